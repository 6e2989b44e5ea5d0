package keylog

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"spindle.dev"
)

// # Gossip
//
// A fork of the key log shown to two clients is caught by neither alone:
// each sees one consistent log. So clients compare heads. A gossip record
// holds the signed heads of one tree size that clients published (see
// package node, keygossip.go, which keeps such records in the DHT under
// the size), at most [MaxGossipHeads], all different. A client that finds
// in it a head of its own size with another tree hash, signed as it
// checks heads (see [Checker.Compare]), holds a fork proved by the two
// heads alone, and adds its own head to the record, so that the client
// shown the other head finds it there too.
//
// The record is untrusted bytes: whoever stores it checks only its shape
// ([DecodeGossip]), and the client checks every head's signatures.

// MaxGossipHeads is the most heads a gossip record holds.
const MaxGossipHeads = 4

// maxGossip bounds an encoded gossip record.
const maxGossip = 1 + MaxGossipHeads*(binary.MaxVarintLen64+maxHeadSize)

const gossipVersion = 1

// EncodeGossip encodes heads, all of tree size n, as a gossip record:
// a version byte, then each head's length as a uvarint and its bytes, in
// increasing byte order. Duplicates are dropped; heads beyond
// MaxGossipHeads, of another size or not heads at all are Invalid.
func EncodeGossip(n int64, heads [][]byte) ([]byte, error) {
	const op spindle.Op = "keylog.EncodeGossip"
	hs := slices.Clone(heads)
	slices.SortFunc(hs, bytes.Compare)
	hs = slices.CompactFunc(hs, bytes.Equal)
	if len(hs) == 0 || len(hs) > MaxGossipHeads {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("a gossip record holds 1 to %d heads, not %d", MaxGossipHeads, len(hs)))
	}
	b := []byte{gossipVersion}
	for _, h := range hs {
		hi, err := ParseHead(h)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		if hi.N != n {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("head of %d records in a gossip record of %d", hi.N, n))
		}
		b = binary.AppendUvarint(b, uint64(len(h)))
		b = append(b, h...)
	}
	return b, nil
}

// DecodeGossip decodes a gossip record of tree size n, as EncodeGossip
// writes it, strictly: every head parses (its signatures are not checked)
// and states a tree of n records, and the heads are in increasing order
// without duplicates. Errors are Invalid. It is safe on untrusted input.
func DecodeGossip(n int64, data []byte) ([][]byte, error) {
	const op spindle.Op = "keylog.DecodeGossip"
	bad := func(format string, args ...any) error {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("gossip record: "+format, args...))
	}
	if len(data) > maxGossip {
		return nil, bad("%d bytes, limit %d", len(data), maxGossip)
	}
	if len(data) == 0 || data[0] != gossipVersion {
		return nil, bad("not version %d", gossipVersion)
	}
	var heads [][]byte
	rest := data[1:]
	for len(rest) > 0 {
		if len(heads) == MaxGossipHeads {
			return nil, bad("more than %d heads", MaxGossipHeads)
		}
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) || l > maxHeadSize {
			return nil, bad("head %d: bad length", len(heads)+1)
		}
		h := rest[k : k+int(l)]
		rest = rest[k+int(l):]
		hi, err := ParseHead(h)
		if err != nil {
			return nil, bad("head %d: %v", len(heads)+1, err)
		}
		if hi.N != n {
			return nil, bad("head %d is of %d records, not %d", len(heads)+1, hi.N, n)
		}
		if len(heads) > 0 && bytes.Compare(heads[len(heads)-1], h) >= 0 {
			return nil, bad("head %d out of order or repeated", len(heads)+1)
		}
		heads = append(heads, bytes.Clone(h))
	}
	if len(heads) == 0 {
		return nil, bad("no head")
	}
	return heads, nil
}

// Compare checks a head someone else published against the newest head
// this checker holds, without taking it: it must be signed as [CheckFork]
// checks heads (by a majority of the members of the configuration it
// names, as the checker knows them; witnesses are not needed, since a
// forged head carries none). A head that is not, or that names a later
// configuration than the checker knows, is Invalid or Integrity, and
// proves nothing. A valid head of the size of the checker's own with
// another tree hash is a fork, proved by the two heads alone: an
// Integrity error that carries a *[ForkError]. Heads of other sizes are
// not compared here (that needs a consistency proof, see
// [Checker.Update]). It returns the tree of the head.
func (c *Checker) Compare(head []byte) (HeadInfo, error) {
	const op spindle.Op = "keylog.Checker.Compare"
	hi, err := ParseHead(head)
	if err != nil {
		return HeadInfo{}, spindle.E(op, err)
	}
	c.upd.Lock()
	defer c.upd.Unlock()
	t, _, err := c.verifyWith(context.Background(), head, nil, false)
	if err != nil {
		return hi, spindle.E(op, err)
	}
	c.mu.Lock()
	old, oldHead := c.tree, bytes.Clone(c.head)
	c.mu.Unlock()
	if oldHead != nil && t.N == old.N && t.Hash != old.Hash {
		why := fmt.Sprintf("two different trees of %d records: one this client holds, one another published", t.N)
		return hi, spindle.E(op, spindle.Integrity, &ForkError{Fork: &Fork{Seen: oldHead, Served: bytes.Clone(head)}, Why: why})
	}
	return hi, nil
}
