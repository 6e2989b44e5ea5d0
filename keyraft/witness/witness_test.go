package witness

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/pack"
)

// A testLog is a key log of made-up leaves whose heads one member, the
// one a client first trusts, signs alone (a cluster whose configuration
// records no members yet).
type testLog struct {
	t      testing.TB
	signer note.Signer
	vkey   string
	hashes []tlog.Hash // Stored hashes, as tlog.StoredHashes makes them.
	leaves [][]byte
	n      int64
	config int64 // The configuration its heads name.
}

func newTestLog(t testing.TB) *testLog { return newMemberLog(t, "m1") }

func newMemberLog(t testing.TB, id string) *testLog {
	skey, vkey, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName(id))
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{t: t, signer: s, vkey: vkey}
}

// fork returns a log with the first n leaves of l and none after.
func (l *testLog) fork(n int64) *testLog {
	f := &testLog{t: l.t, signer: l.signer, vkey: l.vkey}
	for i := int64(0); i < n; i++ {
		f.add(fmt.Sprintf("leaf %d", i))
	}
	return f
}

func (l *testLog) add(data string) {
	hs, err := tlog.StoredHashes(l.n, []byte(data), tlog.HashReaderFunc(l.read))
	if err != nil {
		l.t.Fatal(err)
	}
	l.hashes = append(l.hashes, hs...)
	l.leaves = append(l.leaves, []byte(data))
	l.n++
}

func (l *testLog) read(idx []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(idx))
	for i, x := range idx {
		out[i] = l.hashes[x]
	}
	return out, nil
}

// grow adds leaves up to n, each named with tag, and returns the head.
func (l *testLog) grow(n int64, tag string) []byte {
	for l.n < n {
		l.add(fmt.Sprintf("leaf %d%s", l.n, tag))
	}
	return l.head()
}

func (l *testLog) head() []byte {
	h, err := tlog.TreeHash(l.n, tlog.HashReaderFunc(l.read))
	if err != nil {
		l.t.Fatal(err)
	}
	signed, err := note.Sign(&note.Note{Text: string(keylog.FormatHead(keylog.HeadInfo{Tree: tlog.Tree{N: l.n, Hash: h}, Config: l.config}))}, l.signer)
	if err != nil {
		l.t.Fatal(err)
	}
	return signed
}

// request asks to cosign the current head, proved from old.
func (l *testLog) request(old int64) *Request {
	req := &Request{Head: l.head(), OldSize: old}
	if old > 0 && old < l.n {
		p, err := tlog.ProveTree(l.n, old, tlog.HashReaderFunc(l.read))
		if err != nil {
			l.t.Fatal(err)
		}
		req.Proof = p
	}
	return req
}

func openWitness(t testing.TB, dir, boot string) *Witness {
	t.Helper()
	w, err := Open(Config{Dir: dir, ID: "w1", Boot: boot})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// cosigned checks that sig is the witness's valid cosignature of head.
func cosigned(t *testing.T, w *Witness, l *testLog, head, sig []byte) {
	t.Helper()
	both, err := AddCosignature(head, sig)
	if err != nil {
		t.Fatal(err)
	}
	wv, err := note.NewVerifier(w.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	mv, _ := note.NewVerifier(l.vkey)
	n, err := note.Open(both, note.VerifierList(wv, mv))
	if err != nil || len(n.Sigs) != 2 {
		t.Fatalf("cosigned head: %v, %d signatures verify, want 2", err, len(n.Sigs))
	}
	if _, _, err := keylog.VerifyQuorum(both, map[string]string{"m1": l.vkey}); err != nil {
		t.Fatalf("the members' check of a cosigned head: %v", err)
	}
}

func wantKind(t *testing.T, err error, k spindle.Kind, what string) {
	t.Helper()
	if !errors.Is(err, k) {
		t.Fatalf("%s: %v, want %v", what, err, k)
	}
}

// A witness cosigns heads that extend the one it cosigned last, and
// refuses a second tree of one size, an older head, a bad proof and a
// head the members did not sign.
func TestWitnessCosigns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := newTestLog(t)
	w := openWitness(t, dir, l.vkey)

	l.grow(10, "")
	sig, err := w.Cosign(ctx, l.request(0))
	if err != nil {
		t.Fatal(err)
	}
	cosigned(t, w, l, l.head(), sig)
	if sig2, err := w.Cosign(ctx, l.request(0)); err != nil || string(sig2) != string(sig) {
		t.Fatalf("the same head again: %q, %v", sig2, err)
	}

	l.grow(20, "")
	if sig, err = w.Cosign(ctx, l.request(10)); err != nil {
		t.Fatal(err)
	}
	cosigned(t, w, l, l.head(), sig)

	// A head the witness already passed.
	old := l.fork(10)
	_, err = w.Cosign(ctx, old.request(0))
	wantKind(t, err, spindle.Stale, "older head")
	var se *StaleError
	if !errors.As(err, &se) || string(se.Head) != string(l.head()) {
		t.Fatalf("older head: %v does not name the witness's head", err)
	}

	// A proof from a size the witness did not cosign.
	l.grow(30, "")
	_, err = w.Cosign(ctx, l.request(10))
	wantKind(t, err, spindle.Stale, "proof from 10")

	// A proof that does not hold.
	bad := l.request(20)
	bad.Proof = append(tlog.TreeProof(nil), bad.Proof...)
	bad.Proof[0][0] ^= 1
	_, err = w.Cosign(ctx, bad)
	wantKind(t, err, spindle.Integrity, "bad proof")

	// Another tree of the size it cosigned: a fork, kept as evidence
	// that the client's audit checks.
	other := l.fork(15)
	other.grow(20, " forked")
	_, err = w.Cosign(ctx, other.request(0))
	wantKind(t, err, spindle.Integrity, "fork")
	files, _ := filepath.Glob(filepath.Join(dir, "evidence", "key-fork-*"))
	if len(files) != 1 {
		t.Fatalf("%d evidence files after a fork, want 1", len(files))
	}
	data, _ := os.ReadFile(files[0])
	ev, err := client.UnmarshalEvidence(data)
	if err != nil || ev.Kind != client.EvidenceKeyFork || ev.Fork == nil {
		t.Fatalf("evidence: %+v, %v", ev, err)
	}
	chk, _ := keylog.NewFollowingChecker(nil, l.vkey)
	if what, err := chk.CheckFork(ev.Fork); err != nil {
		t.Fatalf("the witness's evidence does not prove a fork: %v", err)
	} else {
		t.Log(what)
	}

	// Signed by someone else.
	stranger := newTestLog(t)
	stranger.grow(30, "")
	_, err = w.Cosign(ctx, stranger.request(20))
	wantKind(t, err, spindle.Integrity, "stranger's head")

	// Still at 20, and goes on from there.
	if h, _ := w.Head(); string(h) != string(l.fork(20).head()) {
		t.Fatalf("after refusals the witness is at\n%s", h)
	}
	if _, err := w.Cosign(ctx, l.request(20)); err != nil {
		t.Fatal(err)
	}
}

// The witness stores the head before it cosigns it: reopened, it still
// refuses what the head it cosigned last rules out, and a damaged state
// is refused with an error naming it, not started afresh.
func TestWitnessRemembers(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := newTestLog(t)
	w := openWitness(t, dir, l.vkey)
	l.grow(20, "")
	if _, err := w.Cosign(ctx, l.request(0)); err != nil {
		t.Fatal(err)
	}
	vkey := w.VerifierKey()

	w = openWitness(t, dir, l.vkey)
	if w.VerifierKey() != vkey {
		t.Fatalf("reopened with another key: %s, want %s", w.VerifierKey(), vkey)
	}
	if h, _ := w.Head(); string(h) != string(l.head()) {
		t.Fatalf("reopened at\n%s\nwant\n%s", h, l.head())
	}
	other := l.fork(15)
	other.grow(20, " forked")
	_, err := w.Cosign(ctx, other.request(0))
	wantKind(t, err, spindle.Integrity, "fork after reopening")
	_, err = w.Cosign(ctx, l.fork(10).request(0))
	wantKind(t, err, spindle.Stale, "older head after reopening")

	state := filepath.Join(dir, "keylog")
	data, _ := os.ReadFile(state)
	os.WriteFile(state, data[:len(data)-10], 0o600)
	if _, err := Open(Config{Dir: dir, ID: "w1", Boot: l.vkey}); !errors.Is(err, spindle.Damaged) {
		t.Fatalf("open with a truncated state: %v, want Damaged", err)
	}
	if _, err := Open(Config{Dir: dir, ID: "w2", Boot: l.vkey}); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("open with another ID: %v, want Invalid", err)
	}
}

// AddCosignature adds one signature line, once.
func TestAddCosignature(t *testing.T) {
	l := newTestLog(t)
	head := l.grow(3, "")
	w := openWitness(t, t.TempDir(), l.vkey)
	sig, err := w.Cosign(context.Background(), l.request(0))
	if err != nil {
		t.Fatal(err)
	}
	once, err := AddCosignature(head, sig)
	if err != nil {
		t.Fatal(err)
	}
	if twice, err := AddCosignature(once, sig); err != nil || string(twice) != string(once) {
		t.Fatalf("added twice: %v\n%s", err, twice)
	}
	for _, bad := range []string{"", "x\n", "— w1\n", "— a b\n— c d\n", "— a b"} {
		if _, err := AddCosignature(head, []byte(bad)); err == nil {
			t.Errorf("cosignature %q added", bad)
		}
	}
	if _, err := AddCosignature([]byte("not a note"), sig); err == nil {
		t.Error("cosignature added to a non-note")
	}
}

// A witness follows the cluster of the member it was opened with: the
// first head it is shown must be that cluster's. Another cluster, whose
// own operator recorded members of its own, is refused however well its
// members signed its head.
func TestWitnessFollowsItsCluster(t *testing.T) {
	ours := newTestLog(t)
	w := openWitness(t, t.TempDir(), ours.vkey)

	evil := newMemberLog(t, "evil")
	op, _, err := pack.Generate("op@example.com")
	if err != nil {
		t.Fatal(err)
	}
	init := &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.PublicKey(), Arg: evil.vkey}
	if err := keylog.SignChange(init, op); err != nil {
		t.Fatal(err)
	}
	enc := keylog.EncodeChange(init)
	evil.add(string(enc))
	evil.config = 1
	evil.grow(5, "")
	incl, err := tlog.ProveRecord(evil.n, 0, tlog.HashReaderFunc(evil.read))
	if err != nil {
		t.Fatal(err)
	}
	req := evil.request(0)
	req.Config = []*keylog.Proof{{Index: 0, Record: enc, Inclusion: incl}}
	_, err = w.Cosign(context.Background(), req)
	wantKind(t, err, spindle.Integrity, "another cluster's first head")
	if h, _ := w.Head(); h != nil {
		t.Fatalf("the witness took another cluster's head:\n%s", h)
	}
	// Its own cluster's head is cosigned still.
	ours.grow(3, "")
	if _, err := w.Cosign(context.Background(), ours.request(0)); err != nil {
		t.Fatal(err)
	}
}

// Whatever a requester sends, the witness does not panic, and cosigns
// only heads that its member signed.
func FuzzCosign(f *testing.F) {
	l := newTestLog(f)
	l.grow(4, "")
	first := l.request(0)
	l.grow(9, "")
	next := l.request(4)
	f.Add(first.Head, int64(0), []byte(nil), int64(0), []byte(nil))
	f.Add(next.Head, int64(4), keylog.MarshalTreeProof(next.Proof), int64(0), []byte(nil))
	f.Add([]byte("spindle.dev key log\n9\nAAAA\nconfig 0\n\n— x y\n"), int64(4), []byte{1}, int64(1), []byte{0})
	w := openWitness(f, f.TempDir(), l.vkey)
	if _, err := w.Cosign(context.Background(), first); err != nil {
		f.Fatal(err)
	}
	mv, _ := note.NewVerifier(l.vkey)
	f.Fuzz(func(t *testing.T, head []byte, old int64, proof []byte, after int64, config []byte) {
		req := &Request{Head: head, OldSize: old, ConfigAfter: after}
		req.Proof, _ = keylog.UnmarshalTreeProof(proof)
		if p, err := keylog.UnmarshalProof(config); err == nil {
			req.Config = []*keylog.Proof{p}
		}
		if _, err := w.Cosign(context.Background(), req); err == nil {
			if _, err := note.Open(head, note.VerifierList(mv)); err != nil {
				t.Fatalf("cosigned a head its member did not sign: %v\n%q", err, head)
			}
		}
	})
}

// BenchmarkCosign is one cosigning of a head 100 records on from the last:
// the members' signature checked, the consistency proof checked, the head
// stored with fsync, and the cosignature made.
func BenchmarkCosign(b *testing.B) {
	l := newTestLog(b)
	w := openWitness(b, b.TempDir(), l.vkey)
	l.grow(100, "")
	if _, err := w.Cosign(context.Background(), l.request(0)); err != nil {
		b.Fatal(err)
	}
	reqs := make([]*Request, b.N)
	for i := range reqs {
		old := l.n
		l.grow(l.n+100, "")
		reqs[i] = l.request(old)
	}
	b.ResetTimer()
	for _, req := range reqs {
		if _, err := w.Cosign(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
