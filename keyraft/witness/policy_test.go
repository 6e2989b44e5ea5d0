package witness

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/pack"
)

// A policyLog is a key log with real configuration changes, whose heads
// the members named sign.
type policyLog struct {
	*testLog
	t       *testing.T
	configs []int64 // Leaf index of each configuration change.
}

// member is a member's note signer and verifier key.
type member struct {
	s    note.Signer
	vkey string
}

func newMember(t *testing.T, id string) member {
	skey, vkey, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName(id))
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return member{s, vkey}
}

func (l *policyLog) change(op *pack.Keys, kind, arg string) {
	ch := &keylog.Change{Seq: int64(len(l.configs)) + 1, Kind: kind, Arg: arg}
	if kind == keylog.ChangeInit || kind == keylog.ChangeAddMember {
		ch.Key = op.PublicKey()
	}
	if err := keylog.SignChange(ch, op); err != nil {
		l.t.Fatal(err)
	}
	l.configs = append(l.configs, l.n)
	l.add(string(keylog.EncodeChange(ch)))
	l.config = int64(len(l.configs))
}

// clone returns a copy of the log, to fork.
func (l *policyLog) clone() *policyLog {
	c := *l.testLog
	c.hashes = append([]tlog.Hash(nil), l.hashes...)
	c.leaves = append([][]byte(nil), l.leaves...)
	return &policyLog{testLog: &c, t: l.t, configs: append([]int64(nil), l.configs...)}
}

// signedBy returns the current head signed by the members given.
func (l *policyLog) signedBy(ms ...member) []byte {
	h, err := tlog.TreeHash(l.n, tlog.HashReaderFunc(l.read))
	if err != nil {
		l.t.Fatal(err)
	}
	var ss []note.Signer
	for _, m := range ms {
		ss = append(ss, m.s)
	}
	signed, err := note.Sign(&note.Note{Text: string(keylog.FormatHead(keylog.HeadInfo{Tree: tlog.Tree{N: l.n, Hash: h}, Config: l.config}))}, ss...)
	if err != nil {
		l.t.Fatal(err)
	}
	return signed
}

// ConsistencyProof implements keylog.TreeProver.
func (l *policyLog) ConsistencyProof(_ context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	return tlog.ProveTree(newSize, oldSize, tlog.HashReaderFunc(l.read))
}

// ConfigProofs implements keylog.ConfigProver.
func (l *policyLog) ConfigProofs(_ context.Context, after int64, head []byte) ([]*keylog.Proof, error) {
	hi, err := keylog.ParseHead(head)
	if err != nil {
		return nil, err
	}
	var out []*keylog.Proof
	for i := after; i < hi.Config; i++ {
		idx := l.configs[i]
		incl, err := tlog.ProveRecord(hi.N, idx, tlog.HashReaderFunc(l.read))
		if err != nil {
			return nil, err
		}
		out = append(out, &keylog.Proof{Index: idx, Record: l.leaves[idx], Inclusion: incl})
	}
	return out, nil
}

// request asks a witness that has cosigned the tree of old records and
// knows after configuration changes to cosign head.
func (l *policyLog) request(head []byte, old, after int64) *Request {
	req := &Request{Head: head, OldSize: old, ConfigAfter: after}
	hi, _ := keylog.ParseHead(head)
	if old > 0 && old < hi.N {
		req.Proof, _ = l.ConsistencyProof(context.Background(), old, hi.N)
	}
	req.Config, _ = l.ConfigProofs(context.Background(), after, head)
	return req
}

// The attack of issue 28: members an operator removed, whose keys were
// stolen, still make a majority of the configuration a client knows if
// the client was offline during the removal, and sign a fork of the log
// for it. Under a policy of one witness the client refuses the fork: the
// witness cosigned the true log, which removed them, and will not cosign
// the fork.
func TestRemovedMembersForkRefusedUnderWitness(t *testing.T) {
	ctx := context.Background()
	m1, m2, m3 := newMember(t, "m1"), newMember(t, "m2"), newMember(t, "m3")
	op, _, err := pack.Generate("op@example.com")
	if err != nil {
		t.Fatal(err)
	}
	w := openWitness(t, t.TempDir(), m1.vkey)

	l := &policyLog{testLog: newTestLog(t), t: t}
	l.change(op, keylog.ChangeInit, m1.vkey)
	l.change(op, keylog.ChangeAddMember, m2.vkey)
	l.change(op, keylog.ChangeAddMember, m3.vkey)
	l.change(op, keylog.ChangeAddWitness, w.VerifierKey())
	l.change(op, keylog.ChangeWitnessQuorum, "1")
	l.grow(8, "")
	h1 := l.signedBy(m1, m2)
	sig, err := w.Cosign(ctx, l.request(h1, 0, 0))
	if err != nil {
		t.Fatal(err)
	}
	h1w, _ := AddCosignature(h1, sig)

	// The client follows the cluster up to h1; a head without the
	// witness's cosignature is refused already.
	client, err := keylog.NewFollowingChecker(nil, m1.vkey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Update(ctx, h1, l); !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "witnesses") {
		t.Fatalf("a head no witness cosigned: %v, want Integrity naming the witnesses", err)
	}
	if _, err := client.Update(ctx, h1w, l); err != nil {
		t.Fatal(err)
	}

	// While the client is offline, the operator removes m2 and m3; the
	// witness cosigns the true log's head.
	fork := l.clone()
	l.change(op, keylog.ChangeRemoveMember, "m2")
	l.change(op, keylog.ChangeRemoveMember, "m3")
	l.grow(11, "")
	h2 := l.signedBy(m1)
	if _, err := w.Cosign(ctx, l.request(h2, 8, 5)); err != nil {
		t.Fatal(err)
	}

	// m2 and m3, a majority of configuration 5, sign a fork that extends
	// the head the client saw.
	fork.grow(12, " forked")
	forged := fork.signedBy(m2, m3)
	if _, _, err := keylog.VerifyQuorum(forged, map[string]string{"m1": m1.vkey, "m2": m2.vkey, "m3": m3.vkey}); err != nil {
		t.Fatalf("the fork is not signed by a majority of configuration 5: %v", err)
	}
	_, err = w.Cosign(ctx, fork.request(forged, 11, 7))
	if err == nil {
		t.Fatal("the witness cosigned the fork")
	}
	t.Logf("witness: %v", err)
	_, err = client.Update(ctx, forged, fork)
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "witnesses") {
		t.Fatalf("the offline client and the fork: %v, want Integrity naming the witnesses", err)
	}
	// The true log, cosigned, is taken.
	sig, err = w.Cosign(ctx, l.request(h2, 11, 7))
	if err != nil {
		t.Fatal(err)
	}
	h2w, _ := AddCosignature(h2, sig)
	if _, err := client.Update(ctx, h2w, l); err != nil {
		t.Fatalf("the true head, cosigned: %v", err)
	}
}

// The witness changes are checked as the members check every change: an
// operator signs them, a quorum needs as many witnesses, and a witness
// in use cannot be removed below the quorum.
func TestWitnessChanges(t *testing.T) {
	op, _, _ := pack.Generate("op@example.com")
	other, _, _ := pack.Generate("mallory@example.com")
	_, wkey, _ := note.GenerateKey(rand.Reader, keylog.WitnessKeyName("w1"))
	_, mkey, _ := note.GenerateKey(rand.Reader, keylog.MemberKeyName("m1"))
	cfg := keylog.NewConfigState()
	apply := func(s *pack.Keys, kind, arg string) error {
		ch := &keylog.Change{Seq: cfg.Seq() + 1, Kind: kind, Arg: arg}
		if kind == keylog.ChangeInit {
			ch.Key = s.PublicKey()
		}
		if err := keylog.SignChange(ch, s); err != nil {
			return err
		}
		enc := keylog.EncodeChange(ch)
		if _, err := keylog.DecodeChange(enc); err != nil {
			return err
		}
		if _, err := cfg.Check(ch, true); err != nil {
			return err
		}
		cfg.Apply(ch, enc)
		return nil
	}
	if err := apply(op, keylog.ChangeInit, ""); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		s          *pack.Keys
		kind, arg  string
		kind2check spindle.Kind
	}{
		{other, keylog.ChangeAddWitness, wkey, spindle.Permission},
		{op, keylog.ChangeAddWitness, mkey, spindle.Invalid},
		{op, keylog.ChangeWitnessQuorum, "1", spindle.Invalid},
		{op, keylog.ChangeWitnessQuorum, "-1", spindle.Invalid},
		{op, keylog.ChangeWitnessQuorum, "01", spindle.Invalid},
		{op, keylog.ChangeRemoveWitness, "w1", spindle.NotExist},
	} {
		if err := apply(tc.s, tc.kind, tc.arg); !errors.Is(err, tc.kind2check) {
			t.Errorf("%s %q: %v, want %v", tc.kind, tc.arg, err, tc.kind2check)
		}
	}
	if err := apply(op, keylog.ChangeAddWitness, wkey); err != nil {
		t.Fatal(err)
	}
	if err := apply(op, keylog.ChangeWitnessQuorum, "1"); err != nil {
		t.Fatal(err)
	}
	if ws, k := cfg.Witnesses(); k != 1 || ws["w1"] != wkey {
		t.Fatalf("witnesses %v, quorum %d", ws, k)
	}
	if err := apply(op, keylog.ChangeRemoveWitness, "w1"); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("removing the quorum's last witness: %v", err)
	}
	if err := apply(op, keylog.ChangeWitnessQuorum, "0"); err != nil {
		t.Fatal(err)
	}
	if err := apply(op, keylog.ChangeRemoveWitness, "w1"); err != nil {
		t.Fatal(err)
	}
}
