package keyraft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

func TestRestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	ctx := ctxT(t)
	c := diskCluster(t, dir, true)
	ss := populate(t, c, 0, 5)
	k := newSigner(t, ann)
	v1 := register(t, k)
	mustPut(t, c, v1)
	k2 := newSigner(t, ann)
	v2 := update(t, v1, k2.pub, k, "12D3KooWHostA")
	mustPut(t, c, v2)
	vkey := c.VerifierKey()
	head1, _ := c.Head(ctx)
	snap1 := snapshotBytes(t, c.fsm)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "raft", "notekey")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("note key file: %v, %v", fi, err)
	}

	// Reopen (Bootstrap is ignored now that the directory holds state).
	c = diskCluster(t, dir, true)
	if c.VerifierKey() != vkey {
		t.Errorf("verifier key changed across restart")
	}
	if got := snapshotBytes(t, c.fsm); !bytes.Equal(got, snap1) {
		t.Fatalf("state after restart differs")
	}
	head2, _ := c.Head(ctx)
	if !bytes.Equal(head1, head2) {
		t.Errorf("tree head after restart:\n%s\nwant\n%s", head2, head1)
	}
	got, err := c.Lookup(ctx, ann)
	if err != nil || !sameRecord(got, v2) {
		t.Fatalf("Lookup after restart = %+v, %v", got, err)
	}

	// Snapshot, change more, restart again: the state comes from the
	// snapshot plus the log after it.
	if err := c.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	populate(t, c, 5, 3)
	mustPut(t, c, update(t, v2, k2.pub, k2, "12D3KooWHostB"))
	snap2 := snapshotBytes(t, c.fsm)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = diskCluster(t, dir, false)
	defer c.Close()
	if got := snapshotBytes(t, c.fsm); !bytes.Equal(got, snap2) {
		t.Fatalf("state after restart from snapshot differs")
	}
	for _, s := range ss {
		if _, err := c.Lookup(ctx, s.name); err != nil {
			t.Errorf("Lookup(%s) after restart: %v", s.name, err)
		}
	}
	if h := mustHistory(t, c, ann); len(h) != 3 {
		t.Errorf("history of %s has %d versions after restart, want 3", ann, len(h))
	}
	mustPut(t, c, register(t, newSigner(t, bob)))
}

func TestSnapshotRestore(t *testing.T) {
	c := memCluster(t)
	populate(t, c, 0, 10)
	k := newSigner(t, ann)
	v1 := register(t, k)
	mustPut(t, c, v1)
	mustPut(t, c, update(t, v1, k.pub, k, "h"))
	mustPut(t, c, func() *spindle.User {
		u := &spindle.User{Name: annCam, PublicKey: newSigner(t, annCam).pub, Version: 1}
		if err := keylog.Sign(u, k); err != nil {
			t.Fatal(err)
		}
		return u
	}())
	snap := snapshotBytes(t, c.fsm)

	f := newFSM()
	if err := f.Restore(readCloser(snap)); err != nil {
		t.Fatal(err)
	}
	if got := snapshotBytes(t, f); !bytes.Equal(got, snap) {
		t.Fatal("snapshot of the restored state differs")
	}
	for name, idx := range c.fsm.st.users {
		if got := f.st.users[name]; fmt.Sprint(got) != fmt.Sprint(idx) {
			t.Errorf("%s: versions at %v, want %v", name, got, idx)
		}
	}
	if fmt.Sprint(f.st.hashes) != fmt.Sprint(c.fsm.st.hashes) {
		t.Error("restored stored hashes differ")
	}

	// A damaged snapshot is refused and leaves the state as it was.
	damaged := map[string][]byte{
		"truncated":   snap[:len(snap)-1],
		"trailing":    append(bytes.Clone(snap), 0),
		"tree hash":   flipByte(snap, len(snap)-1),
		"magic":       flipByte(snap, 0),
		"empty":       nil,
		"record byte": flipByte(snap, 40),
	}
	for what, b := range damaged {
		g := newFSM()
		err := g.Restore(readCloser(b))
		if err == nil {
			t.Errorf("%s snapshot restored", what)
			continue
		}
		if k := spindle.KindOf(err); k != spindle.Invalid && k != spindle.Integrity {
			t.Errorf("%s snapshot: %v, want Invalid or Integrity", what, err)
		}
		if g.st.size() != 0 {
			t.Errorf("%s snapshot changed the state", what)
		}
	}
	if err := f.Restore(readCloser(flipByte(snap, len(snap)-1))); !errors.Is(err, spindle.Integrity) {
		t.Errorf("snapshot with a wrong tree hash: %v, want Integrity", err)
	}
}

func flipByte(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x10
	return b
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func readCloser(b []byte) nopCloser { return nopCloser{bytes.NewReader(b)} }

func TestOpenConfigErrors(t *testing.T) {
	ctx := ctxT(t)
	n := newTCPNet()
	for _, cfg := range []Config{
		{},
		{ID: "a b", Listener: n.listen(t, "x"), Dial: n.dial},
		{ID: "a+b", Listener: n.listen(t, "y"), Dial: n.dial},
		{ID: "ok"},
		{ID: "ok", Listener: n.listen(t, "z")},
		{ID: "ok", Listener: n.listen(t, "v"), Dial: n.dial, HeartbeatTimeout: time.Millisecond},
		{ID: "ok", Dir: t.TempDir(), Listener: n.listen(t, "w"), Dial: n.dial, NoteKey: "PRIVATE+KEY+bad"},
	} {
		c, err := Open(ctx, cfg)
		if !errors.Is(err, spindle.Invalid) {
			t.Errorf("Open(%+v) = %v, want Invalid", cfg, err)
		}
		if c != nil {
			c.Close()
		}
	}
}

// member is one member of a multi-member test cluster.
type member struct {
	id  string
	c   *Cluster
	cfg Config  // As opened, for reopen.
	tn  *tcpNet // The loopback network of a tcp member.
}

// reopen closes m's member if open and starts it again from its directory.
func reopen(t testing.TB, m *member) {
	t.Helper()
	m.c.Close()
	cfg := m.cfg
	cfg.Bootstrap = false
	cfg.Listener = m.tn.listen(t, m.id)
	c, err := Open(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.c = c
	t.Cleanup(func() { c.Close() })
}

// openMembers starts n members, the first bootstrapped, and adds the others
// as voters. With tcp false they talk over raft's in-memory transport and
// keep state in memory; with tcp true over loopback TCP with bolt on disk.
func openMembers(t testing.TB, n int, tcp bool) []*member {
	t.Helper()
	return openMembersTuned(t, n, tcp, fast)
}

func openMembersTuned(t testing.TB, n int, tcp bool, tune func(*raft.Config)) []*member {
	t.Helper()
	ctx := ctxT(t)
	var trans []*raft.InmemTransport
	tn := newTCPNet()
	ms := make([]*member, n)
	for i := range ms {
		id := fmt.Sprintf("12D3KooWMember%d", i)
		cfg := Config{ID: id, Bootstrap: i == 0, Logger: testLogger(t).With("m", i), tune: tune, ApplyTimeout: 5 * time.Second}
		if tcp {
			cfg.Dir = t.TempDir()
			cfg.Listener = tn.listen(t, id)
			cfg.Dial = tn.dial
		} else {
			_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
			for _, o := range trans {
				tr.Connect(o.LocalAddr(), o)
				o.Connect(tr.LocalAddr(), tr)
			}
			trans = append(trans, tr)
			cfg.transport = tr
		}
		c, err := Open(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		ms[i] = &member{id: id, c: c, cfg: cfg, tn: tn}
		t.Cleanup(func() { c.Close() })
	}
	t.Cleanup(func() {
		for _, tr := range trans {
			tr.Close()
		}
	})
	for i, m := range ms[1:] {
		cs := make([]*Cluster, i+1)
		for j := range cs {
			cs[j] = ms[j].c
		}
		addVoter(t, cs, m.id)
	}
	// AddVoter returns once a majority has the new configuration, so the
	// last member added may not have it yet; a test that then cuts the
	// leader off would leave a majority that cannot elect anyone. Wait
	// until every member holds the whole configuration.
	for _, m := range ms {
		eventually(t, m.id+" holds the configuration of all members", func() bool {
			f := m.c.raft.GetConfiguration()
			return f.Error() == nil && len(f.Configuration().Servers) == n
		})
	}
	return ms
}

// addVoter adds id as a voter through whichever of cs leads. On a loaded
// machine a leader may lose its lease while it adds a member (the joiner
// is still catching up and the tests' timing is fast): then it asks
// whoever leads next, again, for up to a minute.
func addVoter(t testing.TB, cs []*Cluster, id string) {
	t.Helper()
	ctx := ctxT(t)
	deadline := time.Now().Add(time.Minute)
	for {
		var l *Cluster
		eventually(t, "a leader", func() bool {
			for _, c := range cs {
				if c.IsLeader() {
					l = c
					return true
				}
			}
			return false
		})
		err := l.AddVoter(ctx, id)
		if err == nil {
			return
		}
		if !errors.Is(err, spindle.Transient) || time.Now().After(deadline) {
			t.Fatalf("adding %s: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func eventually(t testing.TB, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func leaderOf(t testing.TB, ms []*member) *member {
	t.Helper()
	var l *member
	eventually(t, "a leader", func() bool {
		for _, m := range ms {
			if m.c.IsLeader() {
				l = m
				return true
			}
		}
		return false
	})
	return l
}

func TestThreeMembers(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		name := "inmem"
		if tcp {
			name = "tcp+bolt"
		}
		t.Run(name, func(t *testing.T) { testThreeMembers(t, tcp) })
	}
}

func testThreeMembers(t *testing.T, tcp bool) {
	ctx := ctxT(t)
	ms := openMembers(t, 3, tcp)
	ids, err := ms[0].c.Members(ctx)
	if err != nil || len(ids) != 3 {
		t.Fatalf("Members = %v, %v", ids, err)
	}
	leader := leaderOf(t, ms)
	ss := populate(t, leader.c, 0, 5)
	for _, m := range ms {
		eventually(t, "replication to "+m.id, func() bool { return sizeOf(m.c) == 5 })
	}

	// A follower checks the request, then points at the leader.
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
		}
	}
	err = follower.c.Put(ctx, register(t, newSigner(t, bob)))
	if !errors.Is(err, ErrNotLeader) || !errors.Is(err, spindle.Transient) {
		t.Errorf("Put on a follower: %v, want Transient ErrNotLeader", err)
	}
	if err := follower.c.AddVoter(ctx, "12D3KooWSomeone"); !errors.Is(err, ErrNotLeader) || !errors.Is(err, spindle.Transient) {
		t.Errorf("AddVoter on a follower: %v, want Transient ErrNotLeader", err)
	}
	if follower.c.Leader() != leader.id {
		t.Errorf("follower names leader %q, want %q", follower.c.Leader(), leader.id)
	}
	if err := follower.c.Put(ctx, register(t, newSigner(t, spindle.AllUsers))); !errors.Is(err, spindle.Invalid) {
		t.Errorf("bad Put on a follower: %v, want Invalid", err)
	}

	// Every member serves proofs that a client holding all members' keys
	// accepts, and they agree with each other.
	var keys []string
	for _, m := range ms {
		keys = append(keys, m.c.VerifierKey())
	}
	chk, err := keylog.NewChecker(keys...)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := chk.VerifyLookup(ctx, mustProof(t, m.c, ss[2].name), ss[2].name, m.c); err != nil {
			t.Errorf("proof from %s: %v", m.id, err)
		}
	}
	want := snapshotBytes(t, leader.c.fsm)

	// The leader goes away; the other two elect a new one and go on.
	if err := leader.c.Close(); err != nil {
		t.Fatal(err)
	}
	var rest []*member
	for _, m := range ms {
		if m != leader {
			rest = append(rest, m)
		}
	}
	for _, m := range rest {
		if got := snapshotBytes(t, m.c.fsm); !bytes.Equal(got, want) {
			t.Errorf("%s holds a different state", m.id)
		}
	}
	nl := leaderOf(t, rest)
	if nl == leader {
		t.Fatal("old leader still leads")
	}
	eventually(t, "Put on the new leader", func() bool {
		err := nl.c.Put(ctx, register(t, newSigner(t, bob)))
		return err == nil || errors.Is(err, spindle.Exist)
	})
	for _, m := range rest {
		eventually(t, "bob replicated to "+m.id, func() bool {
			_, err := m.c.Lookup(ctx, bob)
			return err == nil
		})
		if _, err := chk.VerifyLookup(ctx, mustProof(t, m.c, bob), bob, m.c); err != nil {
			t.Errorf("proof from %s after failover: %v", m.id, err)
		}
	}
}

func sizeOf(c *Cluster) int64 {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	return c.fsm.st.size()
}

func TestPutHonoursContext(t *testing.T) {
	c := memCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := c.Put(ctx, register(t, newSigner(t, ann)))
	if err != nil && !errors.Is(err, spindle.Transient) {
		t.Errorf("Put with a cancelled context: %v, want nil or Transient", err)
	}
	if _, err := c.Lookup(ctx, ann); !errors.Is(err, spindle.Transient) {
		t.Errorf("Lookup with a cancelled context: %v, want Transient", err)
	}
}
