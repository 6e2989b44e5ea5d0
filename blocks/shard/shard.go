// Package shard erasure-codes blocks: it splits a block's stored bytes
// into K data shards and M parity shards (Reed-Solomon, with
// github.com/klauspost/reedsolomon), any K of which give the block back.
//
// Each shard is a block of its own, stored and addressed like any other
// (its Ref is the CID of its bytes), which begins with a header naming the
// stripe it belongs to:
//
//	magic    8 bytes  "SPSHARD1"
//	k        1 byte   data shards, 1..MaxData
//	m        1 byte   parity shards, 1..MaxParity
//	index    1 byte   this shard's place in the stripe, 0..k+m-1
//	size     4 bytes  big-endian: length of the block, 1..MaxStoredBlockSize
//	block    32 bytes SHA-256 of the block
//	payload  ceil(size/k) bytes: the shard itself
//
// The encoding of a shard is canonical: [Parse] accepts only what [Split]
// and [Rebuild] produce, and a node holding a shard learns from its header
// alone that it is one, so that it keeps it as one copy, not r (package
// blocks/replica). The data shards hold the block in order, the last
// padded with zeros.
//
// Split and Rebuild are deterministic: the shards of a block under one
// [Scheme] are always the same bytes, so a writer can compute their Refs
// without storing them, and a repaired shard has the Ref of the lost one.
package shard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/reedsolomon"

	"spindle.dev"
)

// Limits on a Scheme.
const (
	MaxData   = 32
	MaxParity = 16
)

// HeaderSize is the length of a shard's header.
const HeaderSize = len(magic) + 3 + 4 + sha256.Size

const magic = "SPSHARD1"

// A Scheme is an erasure code: K data shards and M parity shards per
// block. The zero Scheme means blocks are stored whole (replicated).
type Scheme struct {
	K, M int
}

// IsZero reports whether s is the zero Scheme: no erasure coding.
func (s Scheme) IsZero() bool { return s == Scheme{} }

// N returns the number of shards of a block, K+M.
func (s Scheme) N() int { return s.K + s.M }

// String returns the scheme as "K+M", as ParseScheme reads it.
func (s Scheme) String() string { return fmt.Sprintf("%d+%d", s.K, s.M) }

// Check reports, as Invalid, a scheme out of range.
func (s Scheme) Check() error {
	if s.K < 1 || s.K > MaxData || s.M < 1 || s.M > MaxParity {
		return spindle.E(spindle.Invalid, fmt.Errorf("erasure code %d+%d: want 1 to %d data shards and 1 to %d parity shards", s.K, s.M, MaxData, MaxParity))
	}
	return nil
}

// ParseScheme reads a scheme written "K+M", such as "4+2".
func ParseScheme(text string) (Scheme, error) {
	const op spindle.Op = "shard.ParseScheme"
	ks, ms, ok := strings.Cut(text, "+")
	k, err1 := strconv.Atoi(ks)
	m, err2 := strconv.Atoi(ms)
	if !ok || err1 != nil || err2 != nil {
		return Scheme{}, spindle.E(op, spindle.Invalid, fmt.Errorf("erasure code %q: want K+M, such as 4+2", text))
	}
	s := Scheme{k, m}
	if err := s.Check(); err != nil {
		return Scheme{}, spindle.E(op, err)
	}
	return s, nil
}

// Expansion returns the bytes stored per byte of block: (K+M)/K.
func (s Scheme) Expansion() float64 { return float64(s.N()) / float64(s.K) }

// A Header describes one shard.
type Header struct {
	Scheme
	Index int      // The shard's place in its stripe, 0 to N()-1; data shards first.
	Size  int      // Length of the block.
	Block [32]byte // SHA-256 of the block.
}

// payloadLen returns the length of each shard's payload.
func (h *Header) payloadLen() int { return (h.Size + h.K - 1) / h.K }

func (h *Header) append(b []byte) []byte {
	b = append(b, magic...)
	b = append(b, byte(h.K), byte(h.M), byte(h.Index))
	b = binary.BigEndian.AppendUint32(b, uint32(h.Size))
	return append(b, h.Block[:]...)
}

// sameStripe reports whether h and o describe shards of one stripe.
func (h *Header) sameStripe(o *Header) bool {
	return h.Scheme == o.Scheme && h.Size == o.Size && h.Block == o.Block
}

// Is reports whether data begins as a shard does. It is cheap and does
// not check the rest: use Parse for that.
func Is(data []byte) bool { return bytes.HasPrefix(data, []byte(magic)) }

// Parse decodes a shard's header and returns it with the shard's payload,
// which shares data's memory. Errors are Invalid.
func Parse(data []byte) (Header, []byte, error) {
	const op spindle.Op = "shard.Parse"
	var h Header
	if len(data) < HeaderSize || !Is(data) {
		return h, nil, spindle.E(op, spindle.Invalid, "not a shard")
	}
	b := data[len(magic):]
	h.K, h.M, h.Index = int(b[0]), int(b[1]), int(b[2])
	h.Size = int(binary.BigEndian.Uint32(b[3:]))
	copy(h.Block[:], b[7:])
	if err := h.Check(); err != nil {
		return h, nil, spindle.E(op, err)
	}
	if h.Index >= h.N() {
		return h, nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("shard %d of a %s stripe", h.Index, h.Scheme))
	}
	if h.Size < 1 || h.Size > spindle.MaxStoredBlockSize {
		return h, nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("shard of a block of %d bytes", h.Size))
	}
	payload := data[HeaderSize:]
	if len(payload) != h.payloadLen() {
		return h, nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("shard payload of %d bytes, want %d", len(payload), h.payloadLen()))
	}
	return h, payload, nil
}

func encoder(s Scheme) (reedsolomon.Encoder, error) {
	enc, err := reedsolomon.New(s.K, s.M)
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	return enc, nil
}

// Split returns the N() shards of block under s, data shards first.
func Split(block []byte, s Scheme) ([][]byte, error) {
	const op spindle.Op = "shard.Split"
	if err := s.Check(); err != nil {
		return nil, spindle.E(op, err)
	}
	if len(block) < 1 || len(block) > spindle.MaxStoredBlockSize {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("block of %d bytes", len(block)))
	}
	h := Header{Scheme: s, Size: len(block), Block: sha256.Sum256(block)}
	per := h.payloadLen()
	// One allocation holds every shard, header and payload.
	all := make([]byte, s.N()*(HeaderSize+per))
	shards := make([][]byte, s.N())
	payloads := make([][]byte, s.N())
	for i := range shards {
		sh := all[i*(HeaderSize+per) : (i+1)*(HeaderSize+per) : (i+1)*(HeaderSize+per)]
		h.Index = i
		h.append(sh[:0])
		shards[i] = sh
		payloads[i] = sh[HeaderSize:]
		if i < s.K {
			lo := min(i*per, len(block))
			copy(payloads[i], block[lo:min(lo+per, len(block))])
		}
	}
	enc, err := encoder(s)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if err := enc.Encode(payloads); err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	return shards, nil
}

// Refs returns the Refs of the shards of block under s, in order.
func Refs(block []byte, s Scheme, refOf func([]byte) spindle.Ref) ([]spindle.Ref, error) {
	shards, err := Split(block, s)
	if err != nil {
		return nil, err
	}
	refs := make([]spindle.Ref, len(shards))
	for i, sh := range shards {
		refs[i] = refOf(sh)
	}
	return refs, nil
}

// stripe checks that the shards present (nil for a missing one) are of one
// stripe and in their places, that at least K are present, and returns
// their header (Index unset) and payloads.
func stripe(shards [][]byte) (Header, [][]byte, error) {
	var h0 Header
	have := 0
	var payloads [][]byte
	for i, sh := range shards {
		if sh == nil {
			continue
		}
		h, p, err := Parse(sh)
		if err != nil {
			return h0, nil, fmt.Errorf("shard %d: %w", i, err)
		}
		if payloads == nil {
			h0 = h
			if len(shards) != h.N() {
				return h0, nil, spindle.E(spindle.Invalid, fmt.Sprintf("%d shards given for a %s stripe", len(shards), h.Scheme))
			}
			payloads = make([][]byte, h.N())
		}
		if !h.sameStripe(&h0) || h.Index != i {
			return h0, nil, spindle.E(spindle.Integrity, fmt.Sprintf("shard %d is shard %d of another stripe", i, h.Index))
		}
		payloads[i] = p // ReconstructData fills only the missing ones.
		have++
	}
	if payloads == nil || have < h0.K {
		return h0, nil, spindle.E(spindle.NotExist, fmt.Sprintf("%d shards of a stripe that needs %d", have, h0.K))
	}
	h0.Index = 0
	return h0, payloads, nil
}

// Join returns the block whose shards are given, in their places, with
// nil for each shard missing; at least K must be present. It checks the
// block against the SHA-256 in the headers: a mismatch is Integrity. It
// does not check the shards against their Refs: the caller fetched them
// by Ref and has (package blocks checks every fetch).
func Join(shards [][]byte) ([]byte, error) {
	const op spindle.Op = "shard.Join"
	h, payloads, err := stripe(shards)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	enc, err := encoder(h.Scheme)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if err := enc.ReconstructData(payloads); err != nil {
		return nil, spindle.E(op, spindle.Integrity, err)
	}
	block := make([]byte, 0, h.payloadLen()*h.K)
	for _, p := range payloads[:h.K] {
		block = append(block, p...)
	}
	block = block[:h.Size]
	if sha256.Sum256(block) != h.Block {
		return nil, spindle.E(op, spindle.Integrity, "the shards decode to a block with another hash")
	}
	return block, nil
}

// Rebuild returns shard want of the stripe whose shards are given (nil
// for each missing, at least K present): the same bytes Split made. It
// decodes the block and checks its hash first, so a damaged shard is not
// spread.
func Rebuild(shards [][]byte, want int) ([]byte, error) {
	const op spindle.Op = "shard.Rebuild"
	if want < 0 || want >= len(shards) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("shard %d of %d", want, len(shards)))
	}
	block, err := Join(shards)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	h, _, err := stripe(shards)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	all, err := Split(block, h.Scheme)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return all[want], nil
}

// A GetFunc fetches a shard by its ref and checks its bytes against it,
// as every block store and fetch does.
type GetFunc func(ctx context.Context, ref spindle.Ref) ([]byte, error)

// Gather returns the block whose SHA-256 is block from its stripe, whose
// shard refs are refs, in order. It asks get for every shard at once and
// decodes from the first K that arrive and are shards of this stripe in
// their places, cancelling the others: it never waits for the slowest M.
// Error kinds: NotExist when fewer than K shards can be had, Integrity
// when K shards decode to another block.
func Gather(ctx context.Context, block [32]byte, refs []spindle.Ref, get GetFunc) ([]byte, error) {
	const op spindle.Op = "shard.Gather"
	if len(refs) < 2 || len(refs) > MaxData+MaxParity {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("a stripe of %d shards", len(refs)))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type got struct {
		i    int
		data []byte
		err  error
	}
	out := make(chan got, len(refs))
	var wg sync.WaitGroup
	defer wg.Wait() // After cancel: the gets still running end with ctx.
	for i, ref := range refs {
		wg.Go(func() {
			data, err := get(ctx, ref)
			out <- got{i, data, err}
		})
	}
	shards := make([][]byte, len(refs))
	var problems []error
	have, k := 0, 0
	for range refs {
		g := <-out
		if g.err == nil {
			h, _, err := Parse(g.data)
			switch {
			case err != nil:
				g.err = err
			case h.Index != g.i || h.N() != len(refs) || h.Block != block:
				g.err = spindle.E(spindle.Integrity, fmt.Sprintf("shard %d is shard %d of another stripe", g.i, h.Index))
			default:
				k = h.K
			}
		}
		if g.err != nil {
			problems = append(problems, fmt.Errorf("shard %d (%s): %w", g.i, refs[g.i], g.err))
			continue
		}
		shards[g.i] = g.data
		if have++; have == k {
			break
		}
	}
	if k == 0 || have < k {
		return nil, spindle.E(op, spindle.NotExist, fmt.Sprintf("%d of %d shards found, not enough to decode: %v", have, len(refs), errors.Join(problems...)))
	}
	cancel()
	data, err := Join(shards)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return data, nil
}
