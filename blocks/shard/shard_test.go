package shard_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
)

func block(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Every set of K of the K+M shards gives the block back, for sizes that
// do and do not divide by K.
func TestAnyKShardsJoin(t *testing.T) {
	s := shard.Scheme{K: 4, M: 2}
	for _, n := range []int{1, 3, 4, 1000, 1 << 20, spindle.MaxStoredBlockSize} {
		b := block(uint64(n), n)
		shards, err := shard.Split(b, s)
		if err != nil {
			t.Fatal(err)
		}
		for mask := range 1 << s.N() {
			have := make([][]byte, s.N())
			k := 0
			for i := range have {
				if mask&(1<<i) != 0 {
					have[i] = shards[i]
					k++
				}
			}
			got, err := shard.Join(have)
			switch {
			case k < s.K && !errors.Is(err, spindle.NotExist):
				t.Fatalf("%d bytes, %d shards (mask %b): err %v, want NotExist", n, k, mask, err)
			case k >= s.K && err != nil:
				t.Fatalf("%d bytes, %d shards (mask %b): %v", n, k, mask, err)
			case k >= s.K && !bytes.Equal(got, b):
				t.Fatalf("%d bytes, mask %b: joined other bytes", n, mask)
			}
		}
	}
}

// Split is deterministic and Rebuild makes the very shard that was lost,
// so a repaired shard has the lost one's Ref.
func TestRebuildMakesTheSameShard(t *testing.T) {
	s := shard.Scheme{K: 4, M: 2}
	b := block(7, 300000)
	shards, _ := shard.Split(b, s)
	again, _ := shard.Split(b, s)
	refs, err := shard.Refs(b, s, blocks.RefOf)
	if err != nil {
		t.Fatal(err)
	}
	for i := range shards {
		if !bytes.Equal(shards[i], again[i]) || blocks.RefOf(shards[i]) != refs[i] {
			t.Fatalf("shard %d differs between two splits", i)
		}
	}
	for want := range s.N() {
		have := append([][]byte(nil), shards...)
		have[want] = nil
		have[(want+1)%s.N()] = nil
		got, err := shard.Rebuild(have, want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, shards[want]) {
			t.Fatalf("rebuilt shard %d differs", want)
		}
	}
}

// A damaged payload, or a shard of another stripe or in another place,
// is caught as Integrity, never joined into a block.
func TestJoinCatchesDamage(t *testing.T) {
	s := shard.Scheme{K: 4, M: 2}
	b := block(9, 5000)
	shards, _ := shard.Split(b, s)
	other, _ := shard.Split(block(10, 5000), s)

	bad := append([]byte(nil), shards[1]...)
	bad[shard.HeaderSize+3] ^= 1
	have := [][]byte{shards[0], bad, shards[2], shards[3], nil, nil}
	if _, err := shard.Join(have); !errors.Is(err, spindle.Integrity) {
		t.Errorf("damaged payload: err %v, want Integrity", err)
	}
	have = [][]byte{shards[0], other[1], shards[2], shards[3], nil, nil}
	if _, err := shard.Join(have); !errors.Is(err, spindle.Integrity) {
		t.Errorf("shard of another stripe: err %v, want Integrity", err)
	}
	have = [][]byte{shards[0], shards[2], shards[1], shards[3], nil, nil}
	if _, err := shard.Join(have); !errors.Is(err, spindle.Integrity) {
		t.Errorf("shards out of place: err %v, want Integrity", err)
	}
}

func TestParseScheme(t *testing.T) {
	for _, c := range []struct {
		in   string
		want shard.Scheme
		ok   bool
	}{
		{"4+2", shard.Scheme{K: 4, M: 2}, true},
		{"10+4", shard.Scheme{K: 10, M: 4}, true},
		{"4", shard.Scheme{}, false},
		{"0+2", shard.Scheme{}, false},
		{"4+0", shard.Scheme{}, false},
		{"33+1", shard.Scheme{}, false},
		{"a+b", shard.Scheme{}, false},
	} {
		got, err := shard.ParseScheme(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseScheme(%q) = %v, %v", c.in, got, err)
		}
		if c.ok && got.String() != c.in {
			t.Errorf("%v prints as %q, want %q", got, got.String(), c.in)
		}
	}
}

// FuzzParse checks that Parse never panics, and that what it accepts is
// canonical: the header it returns encodes back to the same bytes.
func FuzzParse(f *testing.F) {
	shards, _ := shard.Split([]byte("a block of some bytes"), shard.Scheme{K: 4, M: 2})
	for _, sh := range shards {
		f.Add(sh)
	}
	f.Add([]byte("SPSHARD1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := shard.Parse(data)
		if err != nil {
			return
		}
		if len(payload) != (h.Size+h.K-1)/h.K || h.Index >= h.N() || h.Check() != nil {
			t.Fatalf("Parse accepted %+v with %d payload bytes", h, len(payload))
		}
		if !bytes.Equal(data[shard.HeaderSize:], payload) {
			t.Fatal("payload is not the bytes after the header")
		}
	})
}

// BenchmarkSplit splits a 1 MiB block into 4+2 shards: the copy into
// the shards, the parity and the headers. The bytes are the block's.
func BenchmarkSplit(b *testing.B) {
	data := block(1, 1<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := shard.Split(data, shard.Scheme{K: 4, M: 2}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkJoin decodes a 1 MiB block from 4 of its 6 shards, two data
// shards missing (the costliest case), and checks its SHA-256.
func BenchmarkJoin(b *testing.B) {
	data := block(1, 1<<20)
	shards, _ := shard.Split(data, shard.Scheme{K: 4, M: 2})
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		have := [][]byte{nil, shards[1], nil, shards[3], shards[4], shards[5]}
		if _, err := shard.Join(have); err != nil {
			b.Fatal(err)
		}
	}
}
