package keyraft

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// cosignNet carries cosign requests between in-process members.
type cosignNet struct {
	mu sync.Mutex
	m  map[string]*Cluster
}

func (n *cosignNet) cosign(ctx context.Context, id string, text []byte) ([]byte, error) {
	n.mu.Lock()
	c := n.m[id]
	n.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("no member %s", id)
	}
	return c.SignHead(ctx, text)
}

// followCluster is a cluster whose members cosign heads, on raft's
// in-memory transport, with an operator who made the first member's init.
type followCluster struct {
	t     testing.TB
	net   *cosignNet
	trans []*raft.InmemTransport
	ms    []*member
	gone  map[string]bool // Members removed.
	op    *testSigner
	seq   int64
}

func newFollowCluster(t testing.TB) *followCluster {
	f := &followCluster{t: t, net: &cosignNet{m: map[string]*Cluster{}}, gone: map[string]bool{}, op: newSigner(t, "op@example.com")}
	a := f.open(true)
	f.change(a.c, &keylog.Change{Kind: keylog.ChangeInit, Key: f.op.pub, Arg: a.c.VerifierKey()})
	return f
}

func (f *followCluster) open(bootstrap bool) *member {
	t := f.t
	id := fmt.Sprintf("12D3KooWFollow%d", len(f.ms))
	_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
	for _, o := range f.trans {
		tr.Connect(o.LocalAddr(), o)
		o.Connect(tr.LocalAddr(), tr)
	}
	f.trans = append(f.trans, tr)
	c, err := Open(ctxT(t), Config{ID: id, Bootstrap: bootstrap, Logger: testLogger(t), transport: tr, tune: fast, Cosign: f.net.cosign})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); tr.Close() })
	f.net.mu.Lock()
	f.net.m[id] = c
	f.net.mu.Unlock()
	m := &member{id: id, c: c}
	f.ms = append(f.ms, m)
	return m
}

// change signs ch with the operator and applies it through the leader,
// trying again while leadership moves.
func (f *followCluster) change(_ *Cluster, ch *keylog.Change) {
	f.t.Helper()
	f.seq++
	ch.Seq = f.seq
	signedChange(f.t, f.op, ch)
	deadline := time.Now().Add(time.Minute)
	for {
		err := f.leader().Change(ctxT(f.t), ch)
		if err == nil {
			return
		}
		if !errors.Is(err, spindle.Transient) || time.Now().After(deadline) {
			f.t.Fatalf("Change %s: %v", ch.Kind, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// populate registers n users from from, through whichever member leads.
func (f *followCluster) populate(from, n int) []*testSigner {
	f.t.Helper()
	var ss []*testSigner
	for i := from; i < from+n; i++ {
		s := newSigner(f.t, spindle.UserName(fmt.Sprintf("user%d@example.com", i)))
		if err := putRouted(ctxT(f.t), &liveSet{ms: f.live()}, register(f.t, s, "12D3KooWHost")); err != nil {
			f.t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

// live returns the members not removed.
func (f *followCluster) live() []*member {
	var live []*member
	for _, m := range f.ms {
		if !f.gone[m.id] {
			live = append(live, m)
		}
	}
	return live
}

func (f *followCluster) leader() *Cluster { return leaderOf(f.t, f.live()).c }

// join adds a new member, recorded in the configuration and a voter.
func (f *followCluster) join() *member {
	f.t.Helper()
	m := f.open(false)
	f.change(nil, &keylog.Change{Kind: keylog.ChangeAddMember, Arg: m.c.VerifierKey(), Key: f.op.pub})
	var cs []*Cluster
	for _, o := range f.live() {
		cs = append(cs, o.c)
	}
	addVoter(f.t, cs, m.id)
	return m
}

// leave removes m from the configuration and the voters.
func (f *followCluster) leave(m *member) {
	f.t.Helper()
	f.change(nil, &keylog.Change{Kind: keylog.ChangeRemoveMember, Arg: m.id})
	deadline := time.Now().Add(time.Minute)
	for {
		err := leaderOf(f.t, f.ms).c.RemoveServer(ctxT(f.t), m.id)
		if err == nil {
			break
		}
		if !errors.Is(err, spindle.Transient) || time.Now().After(deadline) {
			f.t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.gone[m.id] = true
}

// settled waits until every live member has applied what the leader has.
func (f *followCluster) settled() {
	f.t.Helper()
	l := f.leader()
	for _, m := range f.live() {
		eventually(f.t, m.id+" catches up", func() bool { return sizeOf(m.c) == sizeOf(l) })
	}
}

// TestFollowingClient is issue 14's "one cluster identity for clients": a
// client that trusted a one-member cluster follows it through joins and a
// removal by the log alone, accepts heads from any member, and a removed
// member cannot get it to accept a head it signs afterwards.
func TestFollowingClient(t *testing.T) {
	ctx := ctxT(t)
	f := newFollowCluster(t)
	a := f.ms[0]
	users := populate(t, a.c, 0, 2)
	chk := mustFollow(t, nil)
	if _, err := chk.VerifyLookup(ctx, mustProof(t, a.c, users[0].name), users[0].name, a.c); err != nil {
		t.Fatalf("first lookup: %v", err)
	}
	if got := chk.Members(); !maps.Equal(got, map[string]string{a.id: a.c.VerifierKey()}) {
		t.Fatalf("members after the first lookup: %v", got)
	}

	b, c := f.join(), f.join()
	more := f.populate(2, 2)
	f.settled()
	for _, m := range []*member{a, b, c} {
		p := mustProof(t, m.c, more[0].name)
		hi, signers, err := keylog.VerifyQuorum(p.Head, f.leader().Config().Members)
		if err != nil {
			t.Fatalf("head from %s: %v", m.id, err)
		}
		if hi.Config != 3 || len(signers) < 2 {
			t.Errorf("head from %s: configuration %d, signers %v", m.id, hi.Config, signers)
		}
		if _, err := chk.VerifyLookup(ctx, p, more[0].name, m.c); err != nil {
			t.Fatalf("lookup through %s after the joins: %v", m.id, err)
		}
	}
	if got := chk.Members(); len(got) != 3 || got[c.id] != c.c.VerifierKey() {
		t.Fatalf("members after the joins: %v", got)
	}

	// A fresh client whose first contact is the newest member.
	fresh := mustFollow(t, nil)
	if _, err := fresh.VerifyLookup(ctx, mustProof(t, c.c, users[1].name), users[1].name, c.c); err != nil {
		t.Fatalf("fresh client through a joined member: %v", err)
	}

	// Remove a; keep its signer to play the removed member.
	f.leave(a)
	late := f.populate(4, 1)
	eventually(t, "a is out of the configuration everywhere", func() bool {
		for _, m := range []*member{b, c} {
			if _, ok := m.c.Config().Members[a.id]; ok {
				return false
			}
		}
		return true
	})
	f.settled()
	l := f.leader()
	if _, err := chk.VerifyLookup(ctx, mustProof(t, l, late[0].name), late[0].name, l); err != nil {
		t.Fatalf("lookup after the removal: %v", err)
	}
	if got := chk.Members(); len(got) != 2 || got[a.id] != "" {
		t.Fatalf("members after the removal: %v", got)
	}
	newest := chk.Tree()

	// The removed member signs heads: of the true current tree, of that
	// tree claiming the configuration it was a member of, and of an
	// older true tree. None is accepted, and the client's view stays.
	cur := headInfoOf(t, l, newest.N)
	old := headInfoOf(t, l, 6) // Leaves: init, 2 users, 2 adds, 1 more user: a was a member.
	claims := map[string]keylog.HeadInfo{
		"the current tree":                          cur,
		"the current tree under an old config":      {Tree: cur.Tree, Config: 3},
		"an older tree, when it was still a member": old,
	}
	for what, hi := range claims {
		h, err := signHead(a.c.signer, hi)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := chk.Update(ctx, h, l); !errors.Is(err, spindle.Integrity) {
			t.Errorf("removed member's head of %s: %v, want Integrity", what, err)
		}
	}
	// Heads by strangers and by the removed member with one current
	// member are refused too; one current member and another are not.
	stranger := strangerSigner(t)
	signedBy := func(hi keylog.HeadInfo, ss ...note.Signer) []byte {
		h, err := note.Sign(&note.Note{Text: string(keylog.FormatHead(hi))}, ss...)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if _, err := chk.Update(ctx, signedBy(cur, stranger), l); !errors.Is(err, spindle.Integrity) {
		t.Errorf("head signed by a non-member: %v, want Integrity", err)
	}
	if _, err := chk.Update(ctx, signedBy(cur, a.c.signer, b.c.signer), l); !errors.Is(err, spindle.Integrity) {
		t.Errorf("head signed by the removed member and one member: %v, want Integrity", err)
	}
	if chk.Tree() != newest || len(chk.Members()) != 2 {
		t.Errorf("refused heads moved the client to %v, members %v", chk.Tree(), chk.Members())
	}
	if _, err := chk.Update(ctx, signedBy(cur, b.c.signer, c.c.signer), l); err != nil {
		t.Errorf("head signed by both current members: %v", err)
	}

	// The client's state survives a restart: stored changes and head.
	cl, err := keylog.RestoreConfigLog(chk.ConfigEntries())
	if err != nil {
		t.Fatal(err)
	}
	again := mustFollow(t, cl)
	if err := again.Trust(chk.Head()); err != nil {
		t.Fatalf("trusting the stored head again: %v", err)
	}
	if _, err := again.Update(ctx, signedBy(cur, a.c.signer), l); !errors.Is(err, spindle.Integrity) {
		t.Errorf("restored client accepts the removed member's head: %v", err)
	}
}

// headInfoOf returns what a head of c's tree of n leaves states.
func headInfoOf(t *testing.T, c *Cluster, n int64) keylog.HeadInfo {
	t.Helper()
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	h, err := c.fsm.st.treeHash(n)
	if err != nil {
		t.Fatal(err)
	}
	return keylog.HeadInfo{Tree: tlog.Tree{N: n, Hash: h}, Config: c.fsm.st.seqAt(n)}
}

func strangerSigner(t *testing.T) note.Signer {
	skey, _, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName("12D3KooWStranger"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lyingConfig is a node between a client and a member that tampers with
// the configuration changes it relays.
type lyingConfig struct {
	*Cluster
	tamper func([]*keylog.Proof) []*keylog.Proof
}

func (l lyingConfig) ConfigProofs(ctx context.Context, after int64, head []byte) ([]*keylog.Proof, error) {
	ps, err := l.Cluster.ConfigProofs(ctx, after, head)
	if err != nil {
		return nil, err
	}
	return l.tamper(ps), nil
}

// TestFollowingClientCatchesLies: a node that drops, reorders, alters or
// adds configuration changes, or serves a head whose configuration does
// not match its tree, is caught, and the client's view does not move.
func TestFollowingClientCatchesLies(t *testing.T) {
	ctx := ctxT(t)
	f := newFollowCluster(t)
	users := populate(t, f.ms[0].c, 0, 1)
	f.join()
	f.join()
	f.populate(1, 1)
	f.settled()
	l := f.leader()
	head, err := l.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lies := map[string]func([]*keylog.Proof) []*keylog.Proof{
		"drops the last change": func(ps []*keylog.Proof) []*keylog.Proof { return ps[:len(ps)-1] },
		"drops every change":    func(ps []*keylog.Proof) []*keylog.Proof { return nil },
		"swaps two changes":     func(ps []*keylog.Proof) []*keylog.Proof { ps[1], ps[2] = ps[2], ps[1]; return ps },
		"repeats a change":      func(ps []*keylog.Proof) []*keylog.Proof { return append(ps, ps[len(ps)-1]) },
		"alters a change": func(ps []*keylog.Proof) []*keylog.Proof {
			ps[1].Record = bytes.Clone(ps[1].Record)
			ps[1].Record[len(ps[1].Record)-1] ^= 1
			return ps
		},
		"moves a change": func(ps []*keylog.Proof) []*keylog.Proof { ps[2].Index++; return ps },
		"adds a member of its own": func(ps []*keylog.Proof) []*keylog.Proof {
			evil := &keylog.Change{Seq: int64(len(ps)) + 1, Kind: keylog.ChangeAddMember, Arg: strings.Replace(f.ms[1].c.VerifierKey(), f.ms[1].id, "12D3KooWEvil", 1)}
			evil.Key = f.op.pub
			keylog.SignChange(evil, newSigner(t, "eve@example.com"))
			return append(ps, &keylog.Proof{Record: keylog.EncodeChange(evil), Index: ps[len(ps)-1].Index + 1, Inclusion: ps[len(ps)-1].Inclusion})
		},
	}
	for what, tamper := range lies {
		chk := mustFollow(t, nil)
		if _, err := chk.Update(ctx, head, lyingConfig{l, tamper}); !errors.Is(err, spindle.Integrity) {
			t.Errorf("a node that %s: %v, want Integrity", what, err)
		}
		if chk.Head() != nil || len(chk.ConfigEntries()) != 0 {
			t.Errorf("a node that %s moved the client", what)
		}
	}
	// The honest answer passes.
	chk := mustFollow(t, nil)
	if _, err := chk.Update(ctx, head, l); err != nil {
		t.Fatalf("honest head: %v", err)
	}
	if _, err := chk.VerifyLookup(ctx, mustProof(t, l, users[0].name), users[0].name, l); err != nil {
		t.Fatalf("honest lookup: %v", err)
	}
	if got := slices.Sorted(maps.Keys(chk.Members())); len(got) != 3 {
		t.Errorf("members %v", got)
	}
}

// TestSignHeadRefuses: a member signs only heads of its own log.
func TestSignHeadRefuses(t *testing.T) {
	ctx := ctxT(t)
	f := newFollowCluster(t)
	c := f.ms[0].c
	populate(t, c, 0, 3)
	hi := headInfoOf(t, c, 3)
	if _, err := c.SignHead(ctx, keylog.FormatHead(hi)); err != nil {
		t.Fatalf("true head: %v", err)
	}
	for what, bad := range map[string]keylog.HeadInfo{
		"another hash":          {Tree: tlog.Tree{N: 3, Hash: tlog.Hash{1}}, Config: hi.Config},
		"another configuration": {Tree: hi.Tree, Config: hi.Config + 1},
	} {
		if _, err := c.SignHead(ctx, keylog.FormatHead(bad)); !errors.Is(err, spindle.Integrity) {
			t.Errorf("head with %s: %v, want Integrity", what, err)
		}
	}
	if _, err := c.SignHead(ctx, []byte("not a head")); !errors.Is(err, spindle.Invalid) {
		t.Errorf("garbage: %v, want Invalid", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.SignHead(short, keylog.FormatHead(keylog.HeadInfo{Tree: tlog.Tree{N: 100}})); !errors.Is(err, spindle.Transient) {
		t.Errorf("head of a tree not applied: %v, want Transient", err)
	}
}

func mustFollow(t *testing.T, cl *keylog.ConfigLog) *keylog.Checker {
	t.Helper()
	c, err := keylog.NewFollowingChecker(cl, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFollowingBootstrap: a client of a one-node cluster whose operator
// has not made the init change trusts that node's key; the honest init
// naming that node is accepted, and a node that builds the same log and
// slips in an init of its own naming itself is caught.
func TestFollowingBootstrap(t *testing.T) {
	ctx := ctxT(t)
	honest := memCluster(t)
	evil := memClusterID(t, "m1")
	users := populate(t, honest, 0, 2)
	for _, s := range users {
		rec, err := honest.Lookup(ctx, s.name)
		if err != nil {
			t.Fatal(err)
		}
		mustPutT(t, evil, rec)
	}
	chk, err := keylog.NewFollowingChecker(nil, honest.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.VerifyLookup(ctx, mustProof(t, honest, users[0].name), users[0].name, honest); err != nil {
		t.Fatalf("head of a cluster with no init: %v", err)
	}
	// Heads by another node, before any init, are not the trusted key's.
	if _, err := chk.VerifyLookup(ctx, mustProof(t, evil, users[0].name), users[0].name, evil); !errors.Is(err, spindle.Integrity) {
		t.Errorf("another node's head before init: %v, want Integrity", err)
	}
	// The evil node's init names itself: its log extends the honest one.
	eop := newSigner(t, "eve@example.com")
	mustChange(t, evil, signedChange(t, eop, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: eop.pub, Arg: evil.VerifierKey()}))
	head, err := evil.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.Update(ctx, head, evil); !errors.Is(err, spindle.Integrity) {
		t.Errorf("a slipped-in init naming another node: %v, want Integrity", err)
	}
	if len(chk.ConfigEntries()) != 0 {
		t.Errorf("the refused init was kept")
	}
	// The honest init, naming the trusted node, is followed.
	op := newSigner(t, "op@example.com")
	mustChange(t, honest, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub, Arg: honest.VerifierKey()}))
	populate(t, honest, 2, 1)
	head, err = honest.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.Update(ctx, head, honest); err != nil {
		t.Fatalf("the honest init: %v", err)
	}
	if got := chk.Members(); got[honest.ID()] != honest.VerifierKey() || len(got) != 1 {
		t.Errorf("members after the honest init: %v", got)
	}
	if _, err := keylog.NewFollowingChecker(nil, "not a key"); !errors.Is(err, spindle.Invalid) {
		t.Errorf("bad bootstrap key: %v, want Invalid", err)
	}
}

// memClusterID is memCluster with another member ID.
func memClusterID(t testing.TB, id string) *Cluster {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(id))
	c, err := Open(ctxT(t), Config{ID: id, Bootstrap: true, Logger: testLogger(t), transport: trans, tune: fast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); trans.Close() })
	return c
}

// BenchmarkCosignedLookup measures a read after a write in a cluster of
// three members that cosign heads (in one process, raft's in-memory
// transport): a registration through the leader, then its proved lookup
// on a follower once the follower has applied it, which needs a round of
// cosigning for the new tree.
func BenchmarkCosignedLookup(b *testing.B) {
	f := newFollowCluster(b)
	f.join()
	f.join()
	f.settled()
	l := f.leader()
	var follower *Cluster
	for _, m := range f.live() {
		if m.c != l {
			follower = m.c
			break
		}
	}
	ctx := ctxT(b)
	var rounds time.Duration
	for i := 0; b.Loop(); i++ {
		s := newSigner(b, spindle.UserName(fmt.Sprintf("bench%d@example.com", i)))
		if err := l.Put(ctx, register(b, s, "12D3KooWHost")); err != nil {
			b.Fatal(err)
		}
		for follower.Version(s.name) < 1 {
			time.Sleep(100 * time.Microsecond)
		}
		at := time.Now()
		p, err := follower.LookupProof(ctx, s.name)
		if err != nil {
			b.Fatal(err)
		}
		rounds += time.Since(at)
		if _, signers, err := keylog.VerifyQuorum(p.Head, follower.Config().Members); err != nil || len(signers) < 2 {
			b.Fatalf("head: %v, signers %v", err, signers)
		}
	}
	b.ReportMetric(float64(rounds.Microseconds())/float64(b.N)/1000, "ms-lookup-after-write")
}
