package mem_test

import (
	"context"
	"errors"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/mem"
)

func TestSuite(t *testing.T) {
	blockstest.Test(t, func(t *testing.T) spindle.BlockStore { return new(mem.Store) })
}

func TestCorrupt(t *testing.T) {
	var s mem.Store
	ctx := context.Background()
	ref, err := s.Put(ctx, []byte("good"))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Corrupt(ref, []byte("evil")) {
		t.Fatal("Corrupt: block not found")
	}
	if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("Get of a corrupted block: err = %v, want Integrity", err)
	}
	if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get after the bad copy was discarded: err = %v, want NotExist", err)
	}
	if _, err := s.Put(ctx, []byte("good")); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, ref); err != nil || string(got) != "good" {
		t.Fatalf("Get after Put repaired the block = %q, %v", got, err)
	}
	if s.Corrupt(blocks.RefOf([]byte("absent")), nil) {
		t.Fatal("Corrupt of an absent block reported true")
	}
}

func TestUsage(t *testing.T) {
	var s mem.Store
	ctx := context.Background()
	if n, size, _ := s.Usage(ctx); n != 0 || size != 0 {
		t.Fatalf("empty store: Usage = %d, %d", n, size)
	}
	for _, b := range []string{"one", "block two", "one"} {
		if _, err := s.Put(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if n, size, _ := s.Usage(ctx); n != 2 || size != 12 {
		t.Fatalf("Usage = %d blocks, %d bytes; want 2, 12", n, size)
	}
}
