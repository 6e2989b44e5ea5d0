package dirlog

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"spindle.dev"
)

func testLeaf(i int64) Hash {
	return Hash(sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i))))
}

func testStepHead(lt *LogTree, seq int64) *Head {
	r, err := lt.Root(seq)
	if err != nil {
		panic(err)
	}
	return &Head{User: "ann@example.com", Seq: seq, Hash: testLeaf(seq - 1), LogRoot: r}
}

// TestCheckStep checks honest steps and refuses a head one past the floor
// with a made-up hash, and one whose log rewrites an earlier entry.
func TestCheckStep(t *testing.T) {
	var lt LogTree
	for i := range int64(300) {
		lt.Append(testLeaf(i))
	}
	for _, st := range [][2]int64{{1, 2}, {1, 300}, {7, 8}, {64, 65}, {100, 257}, {299, 300}, {5, 5}, {0, 9}} {
		p, err := lt.Prove(st[0], st[1])
		if err != nil {
			t.Fatal(err)
		}
		q, err := UnmarshalConsistencyProof(p.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		var seen *Head
		if st[0] > 0 {
			seen = testStepHead(&lt, st[0])
		}
		if err := CheckStep(seen, testStepHead(&lt, st[1]), q); err != nil {
			t.Errorf("%d→%d: %v", st[0], st[1], err)
		}
	}

	// The liar's log: the first 100 entries, an entry made up at 50.
	var fake LogTree
	for i := range int64(101) {
		h := testLeaf(i)
		if i == 50 {
			h[0] ^= 1
		}
		fake.Append(h)
	}
	seen := testStepHead(&lt, 100)
	got := testStepHead(&fake, 101)
	p, _ := fake.Prove(100, 101)
	err := CheckStep(seen, got, p)
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("step over a rewritten entry: %v", err)
	}
	// A made-up hash one past the floor, proved from the real tree.
	var up LogTree
	for i := range int64(100) {
		up.Append(testLeaf(i))
	}
	up.Append(Hash{1})
	made := testStepHead(&up, 101)
	p, _ = up.Prove(100, 101)
	if err := CheckStep(seen, made, p); err != nil {
		t.Fatalf("an appended leaf is a genuine extension of the log tree: %v", err)
	}
	// The same head with the root of the honest tree at 101 but no proof.
	made.LogRoot, _ = lt.Root(101)
	if err := CheckStep(seen, made, nil); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("step without a proof: %v", err)
	}
	// A version 2 floor and a version 2 answer.
	v2 := *seen
	v2.v2 = true
	if err := CheckStep(&v2, got, p); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("step from a v2 floor: %v", err)
	}
	if err := CheckStep(seen, &v2, nil); err != nil {
		t.Fatalf("same head in v2: %v", err)
	}
	newer := v2
	newer.Seq = 200
	if err := CheckStep(seen, &newer, nil); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("v2 head answering: %v", err)
	}
	if _, err := UnmarshalConsistencyProof(append(p.Marshal(), 0)); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("trailing byte: %v", err)
	}
	if _, err := UnmarshalConsistencyProof([]byte{200}); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("too many hashes: %v", err)
	}
}

func TestHeadV2StillReads(t *testing.T) {
	h := &Head{User: "ann@example.com", Seq: 3, Hash: Hash{1}, Root: Hash{2}, LogRoot: Hash{3}, Time: 5, Host: "h", HostKey: []byte("k"), Sig: []byte("s")}
	g, err := UnmarshalHead(h.Marshal())
	if err != nil || !g.HasLogRoot() || g.LogRoot != h.LogRoot || string(g.Digest()) != string(h.Digest()) {
		t.Fatalf("v3 round trip: %+v %v", g, err)
	}
	v2 := *h
	v2.v2 = true
	b := v2.Marshal()
	if string(b[:6]) != "SPDLH2" {
		t.Fatalf("v2 magic %q", b[:6])
	}
	g, err = UnmarshalHead(b)
	if err != nil || g.HasLogRoot() || string(g.Marshal()) != string(b) || string(g.Digest()) == string(h.Digest()) {
		t.Fatalf("v2 round trip: %+v %v", g, err)
	}
}

// TestConsistencyProofSize reports the size of a step's proof.
func TestConsistencyProofSize(t *testing.T) {
	var lt LogTree
	for _, n := range []int64{1, 100, 10000} {
		for lt.Len() < n+1 {
			lt.Append(testLeaf(lt.Len()))
		}
		for _, from := range []int64{n, n / 2} {
			if from == 0 {
				from = 1
			}
			p, err := lt.Prove(from, n+1)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("log of %d entries, step %d→%d: %d hashes, %d bytes encoded", n, from, n+1, len(p), len(p.Marshal()))
		}
	}
}

// TestCheckpointKeepsLogTree: a checkpoint carries the log tree, so a tree
// folded from it signs the same log root and proves steps from before it;
// a version 1 checkpoint still decodes, with no log tree.
func TestCheckpointKeepsLogTree(t *testing.T) {
	tr := NewTree(ann)
	var all []*Entry
	add := func(op Operation, d spindle.DirEntry) {
		t.Helper()
		d.Writer, d.Sequence = ann, tr.Seq+1
		e := &Entry{Seq: tr.Seq + 1, Prev: tr.Head, Op: op, Writer: ann, Entry: d}
		if _, err := tr.Apply(e); err != nil {
			t.Fatal(err)
		}
		all = append(all, e)
	}
	add(OpMkdir, spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory})
	for i := range 20 {
		add(OpPut, *file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i%7)), int64(i)))
	}
	root, ok := tr.LogRoot()
	if !ok {
		t.Fatal("tree has no log root")
	}
	h := &Head{User: ann, Seq: tr.Seq, Hash: tr.Head, Root: tr.MapRoot(), LogRoot: root}
	if err := CheckLog(all, h); err != nil {
		t.Fatalf("CheckLog: %v", err)
	}
	h.LogRoot[3] ^= 1
	if err := CheckLog(all, h); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("CheckLog of a head with another log root: %v", err)
	}
	cp := tr.Checkpoint()
	if err := CheckLogFrom(cp, nil, h); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("CheckLogFrom of a head with another log root: %v", err)
	}
	got, err := UnmarshalCheckpoint(cp.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if got.Head().LogRoot != root || !got.Head().HasLogRoot() {
		t.Fatalf("checkpoint's log root %s, want %s", got.Head().LogRoot, root)
	}
	ft, err := got.Fold()
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := ft.LogRoot(); !ok || r != root {
		t.Fatalf("folded tree's log root %s %v, want %s", r, ok, root)
	}
	seen := &Head{User: ann, Seq: 5, LogRoot: mustRoot(t, tr.Log, 5)}
	g := *file("ann@example.com/g", 1)
	g.Writer, g.Sequence = ann, ft.Seq+1
	if _, err := ft.Apply(&Entry{Seq: ft.Seq + 1, Prev: ft.Head, Op: OpPut, Writer: ann, Entry: g}); err != nil {
		t.Fatal(err)
	}
	p, err := ft.Log.Prove(5, ft.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckStep(seen, &Head{User: ann, Seq: ft.Seq, Hash: ft.Head, LogRoot: mustRoot(t, ft.Log, ft.Seq)}, p); err != nil {
		t.Fatalf("step from before the checkpoint: %v", err)
	}
	cp.v1 = true
	old, err := UnmarshalCheckpoint(cp.Marshal())
	if err != nil || old.Head().HasLogRoot() {
		t.Fatalf("version 1 checkpoint: %v", err)
	}
	if ot, err := old.Fold(); err != nil || ot.Log != nil {
		t.Fatalf("tree of a version 1 checkpoint: %v", err)
	}
	bad := tr.Checkpoint()
	bad.LogHashes = bad.LogHashes[1:]
	if _, err := UnmarshalCheckpoint(bad.Marshal()); err == nil {
		t.Fatal("checkpoint with a hash missing decoded")
	}
}

func mustRoot(t *testing.T, lt *LogTree, n int64) Hash {
	t.Helper()
	r, err := lt.Root(n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
