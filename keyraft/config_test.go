package keyraft

import (
	"crypto/rand"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// signedChange signs ch with s and returns it.
func signedChange(t testing.TB, s *testSigner, ch *keylog.Change) *keylog.Change {
	t.Helper()
	if err := keylog.SignChange(ch, s); err != nil {
		t.Fatal(err)
	}
	return ch
}

func mustChange(t *testing.T, c *Cluster, ch *keylog.Change) {
	t.Helper()
	if err := c.Change(ctxT(t), ch); err != nil {
		t.Fatalf("Change %s: %v", ch.Kind, err)
	}
}

// refused checks that err is of kind and that the configuration did not
// change.
func refused(t *testing.T, c *Cluster, what string, err error, kind spindle.Kind, before ClusterConfig) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Errorf("%s: %v, want %v", what, err, kind)
	}
	if got := c.Config(); !reflect.DeepEqual(got, before) {
		t.Errorf("%s changed the configuration: %+v, was %+v", what, got, before)
	}
}

func TestConfigChanges(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	op1, op2, stranger := newSigner(t, "op1@example.com"), newSigner(t, "op2@example.com"), newSigner(t, "x@example.com")
	cfg0 := c.Config()
	if cfg0.Seq != 0 || cfg0.Policy != keylog.PolicyOpen || len(cfg0.Operators) != 0 {
		t.Fatalf("initial configuration %+v", cfg0)
	}
	refused(t, c, "admit by a non-operator", c.Change(ctx, signedChange(t, stranger, &keylog.Change{Seq: 1, Kind: keylog.ChangeAdmit, Key: stranger.pub})), spindle.Permission, cfg0)
	forged := &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op1.pub}
	signedChange(t, stranger, forged)
	forged.Signer = op1.pub
	refused(t, c, "init with a forged signature", c.Change(ctx, forged), spindle.Permission, cfg0)

	init := signedChange(t, op1, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op1.pub})
	mustChange(t, c, init)
	cfg1 := c.Config()
	if cfg1.Seq != 1 || !slices.Equal(cfg1.Operators, []spindle.PublicKey{op1.pub}) {
		t.Fatalf("after init: %+v", cfg1)
	}
	mustChange(t, c, init) // A repeated request: accepted, no change.
	if got := c.Config(); !reflect.DeepEqual(got, cfg1) {
		t.Errorf("repeated init changed the configuration: %+v", got)
	}
	refused(t, c, "a second init", c.Change(ctx, signedChange(t, stranger, &keylog.Change{Seq: 2, Kind: keylog.ChangeInit, Key: stranger.pub})), spindle.Permission, cfg1)

	add := signedChange(t, op1, &keylog.Change{Seq: 2, Kind: keylog.ChangeAddOperator, Key: op2.pub})
	mustChange(t, c, add)
	cfg2 := c.Config()
	refused(t, c, "a stale change", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 2, Kind: keylog.ChangeAdmit, Key: stranger.pub})), spindle.Invalid, cfg2)
	refused(t, c, "a replayed older change", c.Change(ctx, init), spindle.Invalid, cfg2)
	refused(t, c, "a change from the future", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 9, Kind: keylog.ChangeAdmit, Key: stranger.pub})), spindle.Invalid, cfg2)
	refused(t, c, "a change by a non-operator", c.Change(ctx, signedChange(t, stranger, &keylog.Change{Seq: 3, Kind: keylog.ChangeAddOperator, Key: stranger.pub})), spindle.Permission, cfg2)
	refused(t, c, "an unknown policy", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 3, Kind: keylog.ChangePolicy, Arg: "closed"})), spindle.Invalid, cfg2)
	refused(t, c, "a bad domain", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 3, Kind: keylog.ChangeDomain, Arg: "Example.COM", Key: op2.pub})), spindle.Invalid, cfg2)
	refused(t, c, "removing a non-operator", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 3, Kind: keylog.ChangeRemoveOperator, Key: stranger.pub})), spindle.NotExist, cfg2)

	// The second operator removes the first, whose signature then counts
	// for nothing; the last operator cannot be removed.
	mustChange(t, c, signedChange(t, op2, &keylog.Change{Seq: 3, Kind: keylog.ChangeRemoveOperator, Key: op1.pub}))
	cfg3 := c.Config()
	if !slices.Equal(cfg3.Operators, []spindle.PublicKey{op2.pub}) {
		t.Fatalf("operators after removal: %v", cfg3.Operators)
	}
	refused(t, c, "a change by a removed operator", c.Change(ctx, signedChange(t, op1, &keylog.Change{Seq: 4, Kind: keylog.ChangeAdmit, Key: op1.pub})), spindle.Permission, cfg3)
	refused(t, c, "removing the last operator", c.Change(ctx, signedChange(t, op2, &keylog.Change{Seq: 4, Kind: keylog.ChangeRemoveOperator, Key: op2.pub})), spindle.Invalid, cfg3)

	// Config changes are leaves of the transparency log: records after
	// them still prove against a head the client accepts.
	populate(t, c, 0, 2)
	chk, err := keylog.NewChecker(c.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.VerifyLookup(ctx, mustProof(t, c, "user1@example.com"), "user1@example.com", c); err != nil {
		t.Errorf("lookup after config changes: %v", err)
	}
	if n := sizeOf(c); n != 5 {
		t.Errorf("log holds %d leaves, want 5 (3 changes, 2 records)", n)
	}
}

// grantFor returns the countersignature of admin over u.
func grantFor(t *testing.T, admin *testSigner, u *spindle.User) spindle.Signature {
	t.Helper()
	sig, err := admin.Sign(keylog.GrantDigest(u))
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestDomainPolicy(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	op, admin, other := newSigner(t, "op@example.com"), newSigner(t, "admin@example.com"), newSigner(t, "x@example.com")
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangePolicy, Arg: keylog.PolicyDomain}))
	if p := c.Config().Policy; p != keylog.PolicyDomain {
		t.Fatalf("policy %q", p)
	}
	annKey := newSigner(t, ann)
	annRec := register(t, annKey)
	notRegistered := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, spindle.Permission) {
			t.Errorf("%s: %v, want Permission", what, err)
		}
		if _, err := c.Lookup(ctx, annRec.Name); !errors.Is(err, spindle.NotExist) {
			t.Errorf("%s: ann is registered: %v", what, err)
		}
	}
	notRegistered("domain without an admin key", c.PutGranted(ctx, annRec, grantFor(t, admin, annRec)))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 3, Kind: keylog.ChangeDomain, Arg: "example.com", Key: admin.pub}))
	notRegistered("no countersignature", c.Put(ctx, annRec))
	notRegistered("countersignature by another key", c.PutGranted(ctx, annRec, grantFor(t, other, annRec)))
	// A grant is for one record: it does not let another key take the name.
	thief := register(t, newSigner(t, ann))
	notRegistered("grant of another record", c.PutGranted(ctx, thief, grantFor(t, admin, annRec)))

	if err := c.PutGranted(ctx, annRec, grantFor(t, admin, annRec)); err != nil {
		t.Fatal(err)
	}
	// Repeats are idempotent, with or without the grant.
	if err := c.PutGranted(ctx, annRec, grantFor(t, admin, annRec)); err != nil {
		t.Errorf("repeated granted registration: %v", err)
	}
	if err := c.Put(ctx, annRec); err != nil {
		t.Errorf("repeated registration: %v", err)
	}
	// Updates and +suffix users need no grant: the name is granted.
	mustPut(t, c, update(t, annRec, annKey.pub, annKey, "12D3KooWHost"))
	cam := &spindle.User{Name: annCam, PublicKey: newSigner(t, annCam).pub, Version: 1}
	if err := keylog.Sign(cam, annKey); err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, cam)
	// Another domain has no admin key.
	carl := register(t, newSigner(t, "carl@other.org"))
	if err := c.PutGranted(ctx, carl, grantFor(t, admin, carl)); !errors.Is(err, spindle.Permission) {
		t.Errorf("registration under a domain without admin: %v, want Permission", err)
	}
	// The admin key is lost: an operator removes it, and its grants are
	// refused until another is added.
	bea := register(t, newSigner(t, "bea@example.com"))
	before := c.Config()
	refused(t, c, "removal by a non-operator", c.Change(ctx, signedChange(t, admin, &keylog.Change{Seq: 4, Kind: keylog.ChangeUndomain, Arg: "example.com"})), spindle.Permission, before)
	refused(t, c, "removal of a domain without a key", c.Change(ctx, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeUndomain, Arg: "other.org"})), spindle.NotExist, before)
	refused(t, c, "removal naming a key", c.Change(ctx, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeUndomain, Arg: "example.com", Key: admin.pub})), spindle.Invalid, before)
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeUndomain, Arg: "example.com"}))
	if _, ok := c.Config().Domains["example.com"]; ok {
		t.Errorf("domain key still registered after its removal")
	}
	if err := c.PutGranted(ctx, bea, grantFor(t, admin, bea)); !errors.Is(err, spindle.Permission) {
		t.Errorf("grant by the removed admin key: %v, want Permission", err)
	}
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 5, Kind: keylog.ChangeDomain, Arg: "example.com", Key: other.pub}))
	if err := c.PutGranted(ctx, bea, grantFor(t, other, bea)); err != nil {
		t.Errorf("grant by the new admin key: %v", err)
	}

	// Back to open: anyone may register.
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 6, Kind: keylog.ChangePolicy, Arg: keylog.PolicyOpen}))
	mustPut(t, c, carl)

	// The configuration survives a snapshot and its restore.
	f := newFSM()
	if err := f.Restore(readCloser(snapshotBytes(t, c.fsm))); err != nil {
		t.Fatal(err)
	}
	if got, want := f.st.cfg, c.fsm.st.cfg; !reflect.DeepEqual(got, want) {
		t.Errorf("restored configuration %+v, want %+v", got, want)
	}
}

// Under the invite policy, a new name under any domain needs an
// invitation: an operator's countersignature over its first record (or
// the domain admin's, for a domain that has one). An invitation is for
// one name and one key; updates and +suffix users need none; another
// key, a stranger's or a removed operator's, invites no one.
func TestInvitePolicy(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	op, op2, admin, stranger := newSigner(t, "op@example.com"), newSigner(t, "op2@example.com"), newSigner(t, "admin@example.com"), newSigner(t, "x@example.com")
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangePolicy, Arg: keylog.PolicyInvite}))
	if p := c.Config().Policy; p != keylog.PolicyInvite {
		t.Fatalf("policy %q", p)
	}
	annKey := newSigner(t, ann)
	annRec := register(t, annKey)
	refusedPut := func(what string, err error, rec *spindle.User) {
		t.Helper()
		if !errors.Is(err, spindle.Permission) {
			t.Errorf("%s: %v, want Permission", what, err)
		}
		if _, err := c.Lookup(ctx, rec.Name); !errors.Is(err, spindle.NotExist) {
			t.Errorf("%s: %s is registered: %v", what, rec.Name, err)
		}
	}
	refusedPut("no invitation", c.Put(ctx, annRec), annRec)
	refusedPut("a stranger's invitation", c.PutGranted(ctx, annRec, grantFor(t, stranger, annRec)), annRec)
	thief := register(t, newSigner(t, ann))
	refusedPut("the invitation of another record", c.PutGranted(ctx, thief, grantFor(t, op, annRec)), thief)
	if err := c.PutGranted(ctx, annRec, grantFor(t, op, annRec)); err != nil {
		t.Fatalf("an operator's invitation: %v", err)
	}
	mustPut(t, c, update(t, annRec, annKey.pub, annKey, "12D3KooWHost"))
	cam := &spindle.User{Name: annCam, PublicKey: newSigner(t, annCam).pub, Version: 1}
	if err := keylog.Sign(cam, annKey); err != nil {
		t.Fatal(err)
	}
	mustPut(t, c, cam)

	// A domain's admin invites under the domain; a second operator
	// invites; one removed does not any more.
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 3, Kind: keylog.ChangeDomain, Arg: "example.com", Key: admin.pub}))
	bea := register(t, newSigner(t, "bea@example.com"))
	if err := c.PutGranted(ctx, bea, grantFor(t, admin, bea)); err != nil {
		t.Errorf("the domain admin's invitation: %v", err)
	}
	carl := register(t, newSigner(t, "carl@other.org"))
	refusedPut("example.com's admin inviting under other.org", c.PutGranted(ctx, carl, grantFor(t, admin, carl)), carl)
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeAddOperator, Key: op2.pub}))
	if err := c.PutGranted(ctx, carl, grantFor(t, op2, carl)); err != nil {
		t.Errorf("a second operator's invitation: %v", err)
	}
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 5, Kind: keylog.ChangeRemoveOperator, Key: op2.pub}))
	dora := register(t, newSigner(t, "dora@other.org"))
	refusedPut("a removed operator's invitation", c.PutGranted(ctx, dora, grantFor(t, op2, dora)), dora)
}

func TestConfigSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := diskCluster(t, dir, true)
	op, admin := newSigner(t, "op@example.com"), newSigner(t, "admin@example.com")
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangeDomain, Arg: "example.com", Key: admin.pub}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 3, Kind: keylog.ChangePolicy, Arg: keylog.PolicyDomain}))
	want := c.Config()
	if err := c.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("configuration after a snapshot %+v, want %+v", got, want)
	}
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeAdmit, Key: admin.pub}))
	want = c.Config()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = diskCluster(t, dir, false)
	defer c.Close()
	if got := c.Config(); !reflect.DeepEqual(got, want) {
		t.Errorf("configuration after restart %+v, want %+v", got, want)
	}
	if err := c.Put(ctxT(t), register(t, newSigner(t, ann))); !errors.Is(err, spindle.Permission) {
		t.Errorf("ungranted registration after restart: %v, want Permission", err)
	}
}

// TestJoinAuthorization: a node joins only if the operators admitted its
// operator's key and the request is signed by that key; the member's
// verifier key is then in the configuration, and leaving takes it out.
func TestJoinAuthorization(t *testing.T) {
	ctx := ctxT(t)
	open := func(id string, bootstrap bool, peers ...*raft.InmemTransport) (*Cluster, *raft.InmemTransport) {
		_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
		for _, p := range peers {
			tr.Connect(p.LocalAddr(), p)
			p.Connect(tr.LocalAddr(), tr)
		}
		c, err := Open(ctx, Config{ID: id, Bootstrap: bootstrap, Logger: testLogger(t), transport: tr, tune: fast})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); tr.Close() })
		return c, tr
	}
	first, t0 := open("12D3KooWFirst", true)
	second, _ := open("12D3KooWSecond", false, t0)
	op, nodeOp, other := newSigner(t, "op@example.com"), newSigner(t, "bob@example.com"), newSigner(t, "eve@example.com")
	mustChange(t, first, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub, Arg: first.VerifierKey()}))
	if got := first.Config().Members; !reflect.DeepEqual(got, map[string]string{first.ID(): first.VerifierKey()}) {
		t.Errorf("members after init: %v", got)
	}
	members := func() int {
		ids, err := first.Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(ids)
	}
	join := func(s *testSigner, seq int64, key spindle.PublicKey) *keylog.Change {
		return signedChange(t, s, &keylog.Change{Seq: seq, Kind: keylog.ChangeAddMember, Arg: second.VerifierKey(), Key: key})
	}
	cfg1 := first.Config()
	refused(t, first, "join by a node no operator admitted", first.Join(ctx, join(nodeOp, 2, nodeOp.pub)), spindle.Permission, cfg1)
	mustChange(t, first, signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangeAdmit, Key: nodeOp.pub}))
	cfg2 := first.Config()
	refused(t, first, "join signed by a key that is not the admitted one", first.Join(ctx, join(other, 3, other.pub)), spindle.Permission, cfg2)
	refused(t, first, "join vouched for by the admitted key, signed by another", first.Join(ctx, join(other, 3, nodeOp.pub)), spindle.Permission, cfg2)
	bad := join(nodeOp, 3, nodeOp.pub)
	bad.Arg = "spindle-keyraft/x+00000000+AAAA"
	refused(t, first, "join with a bad verifier key", first.Join(ctx, bad), spindle.Invalid, cfg2)
	if n := members(); n != 1 {
		t.Fatalf("refused joins left %d members", n)
	}
	ok := join(nodeOp, 3, nodeOp.pub)
	if err := first.Join(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if err := first.Join(ctx, ok); err != nil {
		t.Errorf("repeated join: %v", err)
	}
	if n := members(); n != 2 {
		t.Errorf("%d members after the join, want 2", n)
	}
	if got := first.Config().Members[second.ID()]; got != second.VerifierKey() {
		t.Errorf("recorded verifier key of the new member %q, want %q", got, second.VerifierKey())
	}
	// One operator, one vote: the admitted key that vouched for second
	// cannot add a third member, which with second would outvote first.
	_, third, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName("12D3KooWThird"))
	if err != nil {
		t.Fatal(err)
	}
	cfg3 := first.Config()
	refused(t, first, "a second member vouched for by one admitted key", first.Join(ctx, signedChange(t, nodeOp, &keylog.Change{Seq: 4, Kind: keylog.ChangeAddMember, Arg: third, Key: nodeOp.pub})), spindle.Permission, cfg3)
	if err := putRouted(ctx, &liveSet{ms: []*member{{id: first.ID(), c: first}, {id: second.ID(), c: second}}}, register(t, newSigner(t, ann))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the new member has the configuration and records", func() bool {
		return reflect.DeepEqual(second.Config(), first.Config()) && sizeOf(second) == sizeOf(first)
	})

	// Leaving: not by a stranger; by the operator who vouched, yes.
	l := leaderOf(t, []*member{{id: first.ID(), c: first}, {id: second.ID(), c: second}})
	cfg4 := l.c.Config()
	refused(t, l.c, "leave signed by a stranger", l.c.Leave(ctx, signedChange(t, other, &keylog.Change{Seq: 4, Kind: keylog.ChangeRemoveMember, Arg: second.ID()})), spindle.Permission, cfg4)
	refused(t, l.c, "leave of an unrecorded member", l.c.Leave(ctx, signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeRemoveMember, Arg: "12D3KooWNobody"})), spindle.NotExist, cfg4)
	if l.c != first {
		t.Skip("the second member leads now; the removal below is for the first to make")
	}
	if err := first.Leave(ctx, signedChange(t, nodeOp, &keylog.Change{Seq: 4, Kind: keylog.ChangeRemoveMember, Arg: second.ID()})); err != nil {
		t.Fatal(err)
	}
	if _, ok := first.Config().Members[second.ID()]; ok || members() != 1 {
		t.Errorf("after leaving: members %v, %d voters", first.Config().Members, members())
	}
}

func TestStatus(t *testing.T) {
	ms := openMembers(t, 3, false)
	ctx := ctxT(t)
	populateRouted(t, ctx, &liveSet{ms: ms})
	populateRouted(t, ctx, &liveSet{ms: ms})
	leader := ms[0]
	st, err := leader.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ms[0].id, ms[1].id, ms[2].id}
	slices.Sort(want)
	if st.ID != leader.id || (st.Leader != "" && !slices.Contains(want, st.Leader)) || !slices.Equal(st.Members, want) {
		t.Errorf("status %+v", st)
	}
	if st.Term < 1 || st.LastIndex < 3 || st.Applied > st.LastIndex || st.VerifierKey != leader.c.VerifierKey() {
		t.Errorf("status term %d, last index %d, applied %d, key %q", st.Term, st.LastIndex, st.Applied, st.VerifierKey)
	}
	if st.Config.Policy != keylog.PolicyOpen {
		t.Errorf("status policy %q", st.Config.Policy)
	}
}
