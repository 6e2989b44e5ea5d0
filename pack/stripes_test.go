package pack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks/shard"
)

// stripeBlocks stores blocks as 4+2 stripes in memory; lose drops the
// shards of the given places on every get.
type stripeBlocks struct {
	*memBlocks
	lose []int
}

func (s *stripeBlocks) stripe(ctx context.Context, ref spindle.Ref, data []byte) ([]spindle.Ref, error) {
	if RefOf(data) != ref {
		return nil, errors.New("stripe: ref does not match data")
	}
	shards, err := shard.Split(data, shard.Scheme{K: 4, M: 2})
	if err != nil {
		return nil, err
	}
	refs := make([]spindle.Ref, len(shards))
	for i, sh := range shards {
		refs[i] = RefOf(sh)
		s.put(ctx, refs[i], sh)
	}
	return refs, nil
}

func (s *stripeBlocks) getStripe(ctx context.Context, ref spindle.Ref, refs []spindle.Ref) ([]byte, error) {
	have := make([][]byte, len(refs))
	for i, r := range refs {
		if slices.Contains(s.lose, i) {
			continue
		}
		b, err := s.get(ctx, r)
		if err == nil && RefOf(b) == r {
			have[i] = b
		}
	}
	return shard.Join(have)
}

func packStriped(t testing.TB, s *stripeBlocks, data []byte, packing spindle.Packing, signer *Keys) *spindle.DirEntry {
	t.Helper()
	e := &spindle.DirEntry{Name: "alice@example.com/striped", Time: 1234567890123456789}
	err := Pack(context.Background(), e, bytes.NewReader(data), Config{Packing: packing, Signer: signer, Erasure: Erasure{K: 4, M: 2}, Stripe: s.stripe})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// A file packed with an erasure code records its shard refs in its
// packdata (version 2) and reads back through GetStripe, for every
// packing, with two shards of each block lost; Get is never called.
func TestStripedRoundTrip(t *testing.T) {
	ak := testKeys(t, alice, 1)
	for _, packing := range packings {
		for _, size := range []int{1, spindle.MaxBlockSize, 3*spindle.MaxBlockSize + 5} {
			s := &stripeBlocks{memBlocks: newMemBlocks(), lose: []int{1, 4}}
			data := testData(size, uint64(size))
			e := packStriped(t, s, data, packing, ak)
			if e.Packdata[0] != packdataVersionStripes {
				t.Fatalf("striped packdata is version %d", e.Packdata[0])
			}
			er, refs, err := Stripes(e)
			if err != nil || er != (Erasure{4, 2}) || len(refs) != len(e.Blocks) {
				t.Fatalf("Stripes = %v, %d blocks, %v; want 4+2 and %d blocks", er, len(refs), err, len(e.Blocks))
			}
			for _, r := range refs[0] {
				if _, err := s.get(context.Background(), r); err != nil {
					t.Fatalf("shard ref %s recorded but not stored", r)
				}
			}
			r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, GetStripe: s.getStripe})
			if err != nil {
				t.Fatalf("%v, %d bytes: NewReader: %v", packing, size, err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%v, %d bytes: read back %d bytes, %v", packing, size, len(got), err)
			}
		}
	}
}

// An entry whose blocks are striped says so: a reader without GetStripe
// is refused, not handed shards as blocks.
func TestStripedNeedsGetStripe(t *testing.T) {
	ak := testKeys(t, alice, 1)
	s := &stripeBlocks{memBlocks: newMemBlocks()}
	e := packStriped(t, s, testData(1000, 1), spindle.EEPack, ak)
	_, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
	if !errors.Is(err, spindle.Invalid) {
		t.Fatalf("NewReader of a striped entry with only Get: err %v, want Invalid", err)
	}
}

// The stripes are under the writer's signature: changing a shard ref,
// the code, or dropping the section (a downgrade to version 1) fails
// Verify. Old entries have no section and verify as before (the vectors
// in testdata/vectors.json, TestVectors).
func TestStripesSigned(t *testing.T) {
	ak := testKeys(t, alice, 1)
	keys := []spindle.PublicKey{ak.PublicKey()}
	s := &stripeBlocks{memBlocks: newMemBlocks()}
	e := packStriped(t, s, testData(2*spindle.MaxBlockSize, 3), spindle.EEPack, ak)
	if err := Verify(e, keys); err != nil {
		t.Fatal(err)
	}
	p, err := unmarshalPackdata(e.Packdata)
	if err != nil {
		t.Fatal(err)
	}
	tamper := func(name string, f func(p *packdata)) {
		q, _ := unmarshalPackdata(e.Packdata)
		f(q)
		bad := *e
		bad.Packdata = q.marshal()
		if err := Verify(&bad, keys); !errors.Is(err, spindle.Integrity) {
			t.Errorf("%s: Verify = %v, want Integrity", name, err)
		}
	}
	tamper("shard ref changed", func(q *packdata) { q.stripes.shards[3][0] ^= 1 })
	tamper("code changed", func(q *packdata) {
		q.stripes.k, q.stripes.m = 3, 3
	})
	tamper("section dropped", func(q *packdata) { q.stripes = nil })
	tamper("blocks of another file", func(q *packdata) { q.stripes.shards = q.stripes.shards[:6] })
	if p.stripes.blocks() != 2 {
		t.Fatalf("stripes of %d blocks, want 2", p.stripes.blocks())
	}
}

// The limits pack enforces on a stripe are package shard's.
func TestStripeLimitsMatchShard(t *testing.T) {
	if maxStripeData != shard.MaxData || maxStripeParity != shard.MaxParity {
		t.Fatalf("pack allows %d+%d, shard %d+%d", maxStripeData, maxStripeParity, shard.MaxData, shard.MaxParity)
	}
	if n := MaxStripedBlocks(6); n != 2048 {
		t.Fatalf("MaxStripedBlocks(6) = %d, want 2048", n)
	}
}
