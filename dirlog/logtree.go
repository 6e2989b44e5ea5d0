package dirlog

import (
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// A LogTree is the Merkle tree (RFC 6962, as [tlog] computes it) over a
// log's entries: leaf i is the record hash of entry i+1's [Hash], and the
// tree of size n is the log up to sequence n. A head signs its root
// (LogRoot), so a reader that saw the head at sequence a checks that the
// head at b extends it with a consistency proof of hashes only, which
// reveals no name.
//
// A LogTree keeps tlog's stored hashes (about two per entry) in memory.
// The zero LogTree is the tree of the empty log. It is not safe for
// concurrent use; the host guards it with its log.
type LogTree struct {
	stored []tlog.Hash
	n      int64
}

// Len returns the number of entries in the tree.
func (lt *LogTree) Len() int64 { return lt.n }

// Append adds the hash of the next entry.
func (lt *LogTree) Append(h Hash) {
	hs, err := tlog.StoredHashes(lt.n, h[:], lt)
	if err != nil {
		// Only a missing stored hash fails, and every one below n is held.
		panic(fmt.Sprintf("dirlog: log tree of %d entries: %v", lt.n, err))
	}
	lt.stored = append(lt.stored, hs...)
	lt.n++
}

// ReadHashes implements [tlog.HashReader].
func (lt *LogTree) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(lt.stored)) {
			return nil, fmt.Errorf("log tree holds %d hashes, not %d", len(lt.stored), x)
		}
		out[i] = lt.stored[x]
	}
	return out, nil
}

// Root returns the root of the tree of the first n entries (the log up to
// sequence n).
func (lt *LogTree) Root(n int64) (Hash, error) {
	if n < 0 || n > lt.n {
		return Hash{}, fmt.Errorf("log tree root at %d of %d entries", n, lt.n)
	}
	h, err := tlog.TreeHash(n, lt)
	return Hash(h), err
}

// Prove returns the consistency proof that the log at sequence from is a
// prefix of the log at sequence to.
func (lt *LogTree) Prove(from, to int64) (ConsistencyProof, error) {
	if from < 0 || from > to || to > lt.n {
		return nil, fmt.Errorf("consistency proof from %d to %d of %d entries", from, to, lt.n)
	}
	if from == 0 || from == to {
		return nil, nil
	}
	p, err := tlog.ProveTree(to, from, lt)
	out := make(ConsistencyProof, len(p))
	for i, h := range p {
		out[i] = Hash(h)
	}
	return out, err
}

// Clone returns a copy that shares nothing writable with lt.
func (lt *LogTree) Clone() *LogTree {
	return &LogTree{stored: append([]tlog.Hash(nil), lt.stored...), n: lt.n}
}

// StoredHashes returns the tree's stored hashes, for a checkpoint.
func (lt *LogTree) StoredHashes() []tlog.Hash { return lt.stored }

// LogTreeFrom rebuilds a tree of n entries from its stored hashes, as
// [LogTree.StoredHashes] returned them. It checks the count only: the
// caller checks the root against a signed head.
func LogTreeFrom(n int64, stored []tlog.Hash) (*LogTree, error) {
	if n < 0 || n > maxLogEntries || int64(len(stored)) != tlog.StoredHashCount(n) {
		return nil, fmt.Errorf("%d stored hashes for a log tree of %d entries, want %d", len(stored), n, tlog.StoredHashCount(max(0, min(n, maxLogEntries))))
	}
	return &LogTree{stored: append([]tlog.Hash(nil), stored...), n: n}, nil
}

// maxLogEntries bounds the size of a log tree a checkpoint may claim.
const maxLogEntries = 1 << 40

// A ConsistencyProof proves that one head's log is a prefix of another's:
// the hashes of [tlog.TreeProof], at most about 2·log2(n) of them.
type ConsistencyProof []Hash

// maxConsistencyHashes bounds a proof: tlog's proofs for trees below 2^62
// entries hold fewer than 2·62 hashes.
const maxConsistencyHashes = 128

// CheckStep checks that the head got extends seen: the log got signs, of
// got.Seq entries, holds the seen.Seq entries of seen's as its prefix. It
// first applies [CheckHead]. A step back or to the same sequence needs no
// proof. Every failure is Integrity, and names both heads and their hosts.
// Both heads must carry a log root (version 3); a seen head of version 2,
// which has none, is not a floor a step can be checked from, and the
// caller decides (see [Head.HasLogRoot]).
func CheckStep(seen, got *Head, p ConsistencyProof) error {
	const op spindle.Op = "dirlog.CheckStep"
	if err := CheckHead(seen, got); err != nil {
		return err
	}
	if seen == nil || got.Seq <= seen.Seq {
		return nil
	}
	if !got.HasLogRoot() {
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("head at sequence %d (%s) from %s commits to no log root; cannot check that it extends the head at %d (%s) from %s", got.Seq, got.Hash, from(got), seen.Seq, seen.Hash, from(seen)))
	}
	if !seen.HasLogRoot() {
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s) from %s commits to no log root; no step from it can be checked", seen.Seq, seen.Hash, from(seen)))
	}
	if len(p) > maxConsistencyHashes {
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("consistency proof of %d hashes from %s", len(p), from(got)))
	}
	if seen.Seq == 0 {
		// The empty log is a prefix of every log, but its root is fixed.
		if seen.LogRoot != (Hash{}) && seen.LogRoot != emptyLogRoot() {
			return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("head at sequence 0 from %s has log root %s", from(seen), seen.LogRoot))
		}
		return nil
	}
	tp := make(tlog.TreeProof, len(p))
	for i, h := range p {
		tp[i] = tlog.Hash(h)
	}
	err := tlog.CheckTree(tp, got.Seq, tlog.Hash(got.LogRoot), seen.Seq, tlog.Hash(seen.LogRoot))
	if err != nil {
		return spindle.E(op, spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s, log root %s) from %s does not extend the head at %d (%s, log root %s) from %s: the host skipped over or rewrote the log (%v)",
			got.Seq, got.Hash, got.LogRoot, from(got), seen.Seq, seen.Hash, seen.LogRoot, from(seen), err))
	}
	return nil
}

// emptyLogRoot is the log root of the empty log.
func emptyLogRoot() Hash {
	var lt LogTree
	r, _ := lt.Root(0)
	return r
}

// Marshal encodes the proof.
func (p ConsistencyProof) Marshal() []byte {
	b := make([]byte, 0, 1+len(p)*len(Hash{}))
	b = append(b, byte(len(p)))
	for _, h := range p {
		b = append(b, h[:]...)
	}
	return b
}

// UnmarshalConsistencyProof decodes a proof encoded by
// [ConsistencyProof.Marshal]. Errors are Invalid.
func UnmarshalConsistencyProof(data []byte) (ConsistencyProof, error) {
	const op spindle.Op = "dirlog.UnmarshalConsistencyProof"
	if len(data) == 0 {
		return nil, spindle.E(op, spindle.Invalid, "empty consistency proof")
	}
	n := int(data[0])
	if n > maxConsistencyHashes || len(data) != 1+n*len(Hash{}) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("consistency proof of %d bytes claims %d hashes", len(data), n))
	}
	if n == 0 {
		return nil, nil
	}
	p := make(ConsistencyProof, n)
	for i := range p {
		copy(p[i][:], data[1+i*len(Hash{}):])
	}
	return p, nil
}
