package keylog

import (
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// # Forks
//
// A client that catches the key cluster's log rewritten, two signed heads
// that cannot both be heads of one append-only log, holds the proof that
// its members (or thieves of their keys) showed different clients
// different logs. A [Fork] keeps that proof in a form anyone who follows
// the cluster can check without trusting the client that caught it:
//   - two heads of one size with different tree hashes prove it alone;
//   - a head of N records and a larger one of M prove it with what the
//     holder of the larger tree served for it: the hash of its first N
//     records and a consistency proof from that hash to the larger
//     head's. The proof holds, so the larger log does start with those
//     N records, and their hash is not the smaller head's.
// A proof that merely fails shows only that one node answered wrongly,
// which is no evidence against the members; such an answer is refused
// and not kept as a fork.

// A Fork is the proof that two heads, each signed by the members of the
// configuration it names, are of two different logs.
type Fork struct {
	Seen   []byte // The head the client held: the smaller tree, or one of the same size.
	Served []byte // The head a node served afterwards.
	// For a Served head of a larger tree than Seen: Prefix is the hash
	// of Served's first Seen.N records as the node that served it gave
	// it, and Proof the consistency proof from Prefix to Served's hash.
	Prefix tlog.Hash
	Proof  tlog.TreeProof
}

// A ForkError is the error of a checker that caught a fork it can prove:
// it says what the client saw and holds the proof to keep.
type ForkError struct {
	Fork *Fork
	Why  string
}

func (e *ForkError) Error() string {
	return fmt.Sprintf("transparency log rewritten: %s\nnewest head seen:\n%s\nhead now served:\n%s", e.Why, e.Fork.Seen, e.Fork.Served)
}

// A PrefixProver also tells the hash of the first n records of the log it
// holds, so that a consistency proof that fails for the client's head can
// be kept as evidence of a fork (see [Fork]).
type PrefixProver interface {
	TreeProver
	PrefixHash(ctx context.Context, n int64) (tlog.Hash, error)
}

// CheckFork checks that f proves a fork of the log this checker follows:
// both heads are signed by the members of the configurations they name, as
// the checker knows them (a head naming a later configuration than the
// checker knows cannot be checked, and is Invalid), and they are of two
// different logs. It returns what the fork shows, for people. A Fork that
// does not prove one is Invalid or Integrity, naming why.
func (c *Checker) CheckFork(f *Fork) (string, error) {
	const op spindle.Op = "keylog.Checker.CheckFork"
	if f == nil || len(f.Seen) == 0 || len(f.Served) == 0 {
		return "", spindle.E(op, spindle.Invalid, "a fork needs two heads")
	}
	c.upd.Lock()
	defer c.upd.Unlock()
	// The members' signatures make the proof: a fork needs no witness,
	// and the head a witness refused carries no witness's cosignature.
	seen, _, err := c.verifyWith(context.Background(), f.Seen, nil, false)
	if err != nil {
		return "", spindle.E(op, fmt.Errorf("first head: %w", err))
	}
	served, _, err := c.verifyWith(context.Background(), f.Served, nil, false)
	if err != nil {
		return "", spindle.E(op, fmt.Errorf("second head: %w", err))
	}
	switch {
	case seen.N == served.N:
		if seen.Hash == served.Hash {
			return "", spindle.E(op, spindle.Invalid, fmt.Sprintf("no fork: both heads are of the same tree of %d records", seen.N))
		}
		return fmt.Sprintf("proved: two logs of %d records, with tree hashes %s and %s, both signed by the members", seen.N, seen.Hash, served.Hash), nil
	case seen.N > served.N || seen.N == 0:
		return "", spindle.E(op, spindle.Invalid, fmt.Sprintf("the first head (%d records) must be of a smaller, non-empty tree than the second (%d)", seen.N, served.N))
	}
	if err := tlog.CheckTree(f.Proof, served.N, served.Hash, seen.N, f.Prefix); err != nil {
		return "", spindle.E(op, spindle.Invalid, fmt.Sprintf("no fork shown: the proof does not lead from the prefix hash %s of %d records to the tree of %d: %v", f.Prefix, seen.N, served.N, err))
	}
	if f.Prefix == seen.Hash {
		return "", spindle.E(op, spindle.Invalid, fmt.Sprintf("no fork: the tree of %d records extends the one of %d", served.N, seen.N))
	}
	return fmt.Sprintf("proved: the log of %d records signed by the members does not start with the log of %d records they also signed (its first %d records hash to %s, not %s)",
		served.N, seen.N, seen.N, f.Prefix, seen.Hash), nil
}

// forkOf returns the error for a served head of tree t that is not
// consistent with the one seen: a *ForkError if the fork can be proved
// (see [Fork]), else an Integrity error that says why the head was
// refused. p is the failed proof from old to t, if one was served.
func forkOf(ctx context.Context, why string, old tlog.Tree, oldHead []byte, t tlog.Tree, head []byte, p tlog.TreeProof, prover TreeProver) error {
	f := &Fork{Seen: oldHead, Served: head}
	proved := t.N == old.N
	if t.N > old.N {
		if pp, ok := prover.(PrefixProver); ok {
			if prefix, err := pp.PrefixHash(ctx, old.N); err == nil && prefix != old.Hash && tlog.CheckTree(p, t.N, t.Hash, old.N, prefix) == nil {
				f.Prefix, f.Proof, proved = prefix, p, true
			}
		}
	}
	if !proved {
		return spindle.E(spindle.Integrity, fmt.Sprintf("transparency log rewritten: %s\nnewest head seen:\n%s\nhead now served:\n%s", why, oldHead, head))
	}
	return spindle.E(spindle.Integrity, &ForkError{Fork: f, Why: why})
}
