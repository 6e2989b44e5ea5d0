package keyraft

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

func mustVerifiers(t testing.TB, cs ...*Cluster) note.Verifiers {
	t.Helper()
	var keys []string
	for _, c := range cs {
		keys = append(keys, c.VerifierKey())
	}
	v, err := keylog.NewVerifiers(keys...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// populate registers n users (user0@example.com …) and returns their signers.
func populate(t testing.TB, c *Cluster, from, n int) []*testSigner {
	t.Helper()
	var ss []*testSigner
	for i := from; i < from+n; i++ {
		s := newSigner(t, spindle.UserName(fmt.Sprintf("user%d@example.com", i)))
		if err := c.Put(ctxT(t), register(t, s, "12D3KooWHost")); err != nil {
			t.Fatal(err)
		}
		ss = append(ss, s)
	}
	return ss
}

func TestInclusionProof(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	ss := populate(t, c, 0, 7)
	v := mustVerifiers(t, c)
	for i, s := range ss {
		p, err := c.LookupProof(ctx, s.name)
		if err != nil {
			t.Fatal(err)
		}
		u, tree, err := keylog.VerifyLookup(p, s.name, v)
		if err != nil {
			t.Fatalf("VerifyLookup(%s): %v", s.name, err)
		}
		if u.Name != s.name || p.Index != int64(i) || tree.N != 7 {
			t.Errorf("proof of %s: record %s at %d in tree of %d", s.name, u.Name, p.Index, tree.N)
		}
		// The proof survives its wire encoding.
		b, _ := p.MarshalBinary()
		q, err := keylog.UnmarshalProof(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := keylog.VerifyLookup(q, s.name, v); err != nil {
			t.Errorf("decoded proof: %v", err)
		}
	}

	p, _ := c.LookupProof(ctx, ss[3].name)
	integrity := func(what string, p *keylog.Proof, name spindle.UserName, v note.Verifiers) {
		t.Helper()
		if _, _, err := keylog.VerifyLookup(p, name, v); !errors.Is(err, spindle.Integrity) {
			t.Errorf("%s: VerifyLookup = %v, want Integrity", what, err)
		}
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 1
		return b
	}
	for i := range p.Record {
		q := *p
		q.Record = flip(p.Record, i)
		if _, _, err := keylog.VerifyLookup(&q, ss[3].name, v); err == nil {
			t.Fatalf("record with byte %d flipped verifies", i)
		}
	}
	for i := range p.Inclusion {
		q := *p
		q.Inclusion = append(tlog.RecordProof(nil), p.Inclusion...)
		q.Inclusion[i][0] ^= 1
		integrity(fmt.Sprintf("proof hash %d flipped", i), &q, ss[3].name, v)
	}
	q := *p
	q.Index = 2
	integrity("wrong index", &q, ss[3].name, v)
	integrity("record of another user", p, ss[4].name, v)
	other := memCluster(t)
	integrity("head signed by an unknown key", p, ss[3].name, mustVerifiers(t, other))
	q = *p
	q.Head = bytes.Replace(p.Head, []byte("\n7\n"), []byte("\n8\n"), 1)
	integrity("head text altered", &q, ss[3].name, v)
}

func TestConsistencyAndChecker(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	ss := populate(t, c, 0, 3)
	chk, err := keylog.NewChecker(c.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.VerifyLookup(ctx, mustProof(t, c, ss[0].name), ss[0].name, c); err != nil {
		t.Fatal(err)
	}
	stored := chk.Head()
	for n := 3; n < 20; n++ {
		populate(t, c, n, 1)
		// Every pair of sizes has a consistency proof.
		for old := int64(1); old <= int64(n); old++ {
			p, err := c.ConsistencyProof(ctx, old, int64(n+1))
			if err != nil {
				t.Fatal(err)
			}
			oldHash, _ := c.fsm.st.treeHash(old)
			newHash, _ := c.fsm.st.treeHash(int64(n + 1))
			if err := tlog.CheckTree(p, int64(n+1), newHash, old, oldHash); err != nil {
				t.Fatalf("consistency %d→%d: %v", old, n+1, err)
			}
			b := keylog.MarshalTreeProof(p)
			if q, err := keylog.UnmarshalTreeProof(b); err != nil || len(q) != len(p) {
				t.Fatalf("tree proof round trip: %v", err)
			}
		}
		if _, err := chk.VerifyLookup(ctx, mustProof(t, c, ss[n%3].name), ss[n%3].name, c); err != nil {
			t.Fatalf("lookup at size %d: %v", n+1, err)
		}
		if chk.Tree().N != int64(n+1) {
			t.Fatalf("checker at %d records, want %d", chk.Tree().N, n+1)
		}
	}
	for _, bad := range [][2]int64{{0, 1}, {3, 2}, {1, 100}} {
		if _, err := c.ConsistencyProof(ctx, bad[0], bad[1]); !errors.Is(err, spindle.Invalid) {
			t.Errorf("ConsistencyProof(%d, %d) = %v, want Invalid", bad[0], bad[1], err)
		}
	}
	// A checker resumed from an older stored head accepts the newer log.
	chk2, _ := keylog.NewChecker(c.VerifierKey())
	if err := chk2.Trust(stored); err != nil {
		t.Fatal(err)
	}
	head, _ := c.Head(ctx)
	if _, err := chk2.Update(ctx, head, c); err != nil {
		t.Fatal(err)
	}
	// An older head seen after a newer one is accepted if it is a prefix.
	if _, err := chk.Update(ctx, stored, c); err != nil {
		t.Errorf("older consistent head: %v", err)
	}
	if chk.Tree().N != 20 {
		t.Errorf("checker went back to %d records", chk.Tree().N)
	}
}

func mustProof(t testing.TB, c *Cluster, name spindle.UserName) *keylog.Proof {
	t.Helper()
	p, err := c.LookupProof(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestRewrittenHistoryIsCaught runs two clusters that share a note key (a
// member that lies): the second has the same first records but a different
// record in the middle of its history. A checker that has seen the honest
// log catches the rewritten one, whether it is larger, equal in size, or
// smaller.
func TestRewrittenHistoryIsCaught(t *testing.T) {
	skey, vkey, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName("m0"))
	if err != nil {
		t.Fatal(err)
	}
	open := func() *Cluster {
		_, trans := raft.NewInmemTransport("m0")
		c, err := Open(ctxT(t), Config{ID: "m0", Bootstrap: true, Logger: testLogger(t), NoteKey: skey, transport: trans, tune: fast})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); trans.Close() })
		return c
	}
	honest, liar := open(), open()
	if honest.VerifierKey() != vkey || liar.VerifierKey() != vkey {
		t.Fatalf("verifier key %q, want %q", honest.VerifierKey(), vkey)
	}
	ctx := ctxT(t)
	ss := populate(t, honest, 0, 4)
	// The liar holds the same first two records, then user2 with a key of
	// its choosing, then user3.
	for _, s := range ss[:2] {
		rec, _ := honest.Lookup(ctx, s.name)
		mustPutT(t, liar, rec)
	}
	mustPutT(t, liar, register(t, newSigner(t, ss[2].name), "12D3KooWHost"))
	rec, _ := honest.Lookup(ctx, ss[3].name)
	mustPutT(t, liar, rec)

	caught := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "rewritten") {
			t.Errorf("%s: got %v, want an Integrity error about a rewritten log", what, err)
		}
	}
	// Same size, different tree.
	chk, _ := keylog.NewChecker(vkey)
	if _, err := chk.VerifyLookup(ctx, mustProof(t, honest, ss[0].name), ss[0].name, honest); err != nil {
		t.Fatal(err)
	}
	_, err = chk.VerifyLookup(ctx, mustProof(t, liar, ss[0].name), ss[0].name, liar)
	caught("equal size", err)

	// The liar grows: its larger tree does not extend the honest one.
	populate(t, liar, 10, 2)
	_, err = chk.VerifyLookup(ctx, mustProof(t, liar, ss[1].name), ss[1].name, liar)
	caught("larger rewritten tree", err)

	// A client that saw a larger honest tree is shown a smaller rewritten one.
	populate(t, honest, 20, 4)
	chk2, _ := keylog.NewChecker(vkey)
	if _, err := chk2.VerifyLookup(ctx, mustProof(t, honest, ss[0].name), ss[0].name, honest); err != nil {
		t.Fatal(err)
	}
	// The liar cannot prove its tree is a prefix of the larger one, and a
	// proof from an honest member shows that it is not.
	_, err = chk2.VerifyLookup(ctx, mustProof(t, liar, ss[0].name), ss[0].name, liar)
	if !errors.Is(err, spindle.Transient) {
		t.Errorf("smaller rewritten tree proved by the liar: %v, want Transient", err)
	}
	_, err = chk2.VerifyLookup(ctx, mustProof(t, liar, ss[0].name), ss[0].name, honest)
	caught("smaller rewritten tree", err)

	// The honest cluster still passes both checkers' tests.
	if _, err := chk.VerifyLookup(ctx, mustProof(t, honest, ss[3].name), ss[3].name, honest); err != nil {
		t.Errorf("honest cluster after a caught lie: %v", err)
	}
}

func mustPutT(t *testing.T, c *Cluster, u *spindle.User) {
	t.Helper()
	if err := c.Put(ctxT(t), u); err != nil {
		t.Fatal(err)
	}
}

// A prover that lies about consistency cannot help a rewritten head in.
type fixedProver tlog.TreeProof

func (p fixedProver) ConsistencyProof(context.Context, int64, int64) (tlog.TreeProof, error) {
	return tlog.TreeProof(p), nil
}

func TestCheckerRejectsBogusProof(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	populate(t, c, 0, 5)
	chk, _ := keylog.NewChecker(c.VerifierKey())
	h5, _ := c.Head(ctx)
	if _, err := chk.Update(ctx, h5, c); err != nil {
		t.Fatal(err)
	}
	populate(t, c, 5, 3)
	h8, _ := c.Head(ctx)
	good, _ := c.ConsistencyProof(ctx, 5, 8)
	bad := append(tlog.TreeProof(nil), good...)
	bad[0][3] ^= 0x40
	if _, err := chk.Update(ctx, h8, fixedProver(bad)); !errors.Is(err, spindle.Integrity) {
		t.Errorf("bogus consistency proof: %v, want Integrity", err)
	}
	if chk.Tree().N != 5 {
		t.Errorf("checker moved to %d records on a bogus proof", chk.Tree().N)
	}
	if _, err := chk.Update(ctx, h8, fixedProver(good)); err != nil {
		t.Errorf("good consistency proof: %v", err)
	}
	// A member that has not caught up serves the empty log, a prefix of
	// every log: not evidence of a rewrite.
	empty, err := signHead(c.signer, keylog.HeadInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.Update(ctx, empty, nil); err != nil || chk.Tree().N != 8 {
		t.Errorf("empty head: %v, checker at %d", err, chk.Tree().N)
	}
	populate(t, c, 8, 1)
	h9, _ := c.Head(ctx)
	if _, err := chk.Update(ctx, h9, nil); !errors.Is(err, spindle.Invalid) {
		t.Errorf("newer head without a prover: %v, want Invalid", err)
	}
	if err := chk.Trust(h5); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Trust after updates: %v, want Invalid", err)
	}
}

func TestHistoryAudit(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	k1 := newSigner(t, ann)
	v1 := register(t, k1)
	mustPut(t, c, v1)
	populate(t, c, 0, 2)
	k2 := newSigner(t, ann)
	v2 := update(t, v1, k2.pub, k1, "12D3KooWHostA")
	mustPut(t, c, v2)
	populate(t, c, 2, 2)
	v3 := update(t, v2, k2.pub, k2, "12D3KooWHostB")
	mustPut(t, c, v3)
	ps, err := c.History(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	v := mustVerifiers(t, c)
	us, err := keylog.VerifyHistory(ps, ann, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 3 || !sameRecord(us[2], v3) {
		t.Fatalf("history = %d versions", len(us))
	}
	// Hiding a version, or reordering, is caught.
	if _, err := keylog.VerifyHistory([]*keylog.Proof{ps[0], ps[2]}, ann, v); !errors.Is(err, spindle.Integrity) {
		t.Errorf("history with a gap: %v, want Integrity", err)
	}
	if _, err := keylog.VerifyHistory([]*keylog.Proof{ps[1], ps[0]}, ann, v); !errors.Is(err, spindle.Integrity) {
		t.Errorf("reordered history: %v, want Integrity", err)
	}
	if _, err := c.History(ctx, bob); !errors.Is(err, spindle.NotExist) {
		t.Errorf("History(bob) = %v, want NotExist", err)
	}
}
