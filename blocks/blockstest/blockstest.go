// Package blockstest is the suite of tests that every [spindle.BlockStore]
// must pass. A store's own tests call [Test] with a constructor:
//
//	func TestSuite(t *testing.T) {
//		blockstest.Test(t, func(t *testing.T) spindle.BlockStore { return new(mem.Store) })
//	}
package blockstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
)

// Test runs the suite against stores made by newStore, which is called
// once per subtest and must return an empty store. Stores that also
// implement [spindle.BlockLister] are tested for List and Delete.
func Test(t *testing.T, newStore func(t *testing.T) spindle.BlockStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, spindle.BlockStore)
	}{
		{"RoundTrip", testRoundTrip},
		{"Sizes", testSizes},
		{"IdempotentPut", testIdempotentPut},
		{"NotExist", testNotExist},
		{"Oversized", testOversized},
		{"BadRef", testBadRef},
		{"NotShared", testNotShared},
		{"Cancelled", testCancelled},
		{"Concurrent", testConcurrent},
		{"ListDelete", testListDelete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

// Block returns n pseudo-random bytes determined by seed.
func Block(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func put(t *testing.T, s spindle.BlockStore, data []byte) spindle.Ref {
	t.Helper()
	ref, err := s.Put(context.Background(), data)
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(data), err)
	}
	if want := blocks.RefOf(data); ref != want {
		t.Fatalf("Put(%d bytes) = %s, want %s", len(data), ref, want)
	}
	return ref
}

func get(t *testing.T, s spindle.BlockStore, ref spindle.Ref, want []byte) {
	t.Helper()
	got, err := s.Get(context.Background(), ref)
	if err != nil {
		t.Fatalf("Get(%s): %v", ref, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%s) returned %d bytes that differ from the %d put", ref, len(got), len(want))
	}
}

func testRoundTrip(t *testing.T, s spindle.BlockStore) {
	data := []byte("hello, spindle")
	ref := put(t, s, data)
	get(t, s, ref, data)
	if err := blocks.Check(ref, data); err != nil {
		t.Fatalf("Check of the returned ref: %v", err)
	}
}

func testSizes(t *testing.T, s spindle.BlockStore) {
	for i, n := range []int{0, 1, 4095, 4096, 65537, spindle.MaxBlockSize, spindle.MaxStoredBlockSize} {
		data := Block(uint64(i), n)
		ref := put(t, s, data)
		get(t, s, ref, data)
	}
}

func testIdempotentPut(t *testing.T, s spindle.BlockStore) {
	data := Block(1, 5000)
	ref1 := put(t, s, data)
	ref2 := put(t, s, data)
	if ref1 != ref2 {
		t.Fatalf("second Put = %s, first = %s", ref2, ref1)
	}
	get(t, s, ref1, data)
}

func testNotExist(t *testing.T, s spindle.BlockStore) {
	ref := blocks.RefOf([]byte("never stored"))
	_, err := s.Get(context.Background(), ref)
	if !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get of an absent block: err = %v, want NotExist", err)
	}
}

func testOversized(t *testing.T, s spindle.BlockStore) {
	data := make([]byte, spindle.MaxStoredBlockSize+1)
	ref, err := s.Put(context.Background(), data)
	if !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Put of %d bytes = %q, %v; want Invalid", len(data), ref, err)
	}
	_, err = s.Get(context.Background(), blocks.RefOf(data))
	if !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get of the refused block: err = %v, want NotExist", err)
	}
}

func testBadRef(t *testing.T, s spindle.BlockStore) {
	good := put(t, s, []byte("x"))
	bad := []spindle.Ref{
		"",
		"not a cid",
		good[:len(good)-3],
		otherCID(t, 0, cid.DagProtobuf, multihash.SHA2_256),
		otherCID(t, 1, cid.DagCBOR, multihash.SHA2_256),
		otherCID(t, 1, cid.Raw, multihash.SHA2_512),
		otherCID(t, 1, cid.Raw, multihash.IDENTITY),
		spindle.Ref(string(good) + "/../x"),
	}
	for _, ref := range bad {
		if _, err := s.Get(context.Background(), ref); !errors.Is(err, spindle.Invalid) {
			t.Errorf("Get(%q): err = %v, want Invalid", ref, err)
		}
		if l, ok := s.(spindle.BlockLister); ok {
			if err := l.Delete(context.Background(), ref); !errors.Is(err, spindle.Invalid) {
				t.Errorf("Delete(%q): err = %v, want Invalid", ref, err)
			}
		}
	}
}

// otherCID returns a well-formed CID that is not a Spindle block ref.
func otherCID(t *testing.T, version uint64, codec uint64, hash uint64) spindle.Ref {
	t.Helper()
	h, err := multihash.Sum([]byte("x"), hash, -1)
	if err != nil {
		t.Fatal(err)
	}
	if version == 0 {
		return spindle.Ref(cid.NewCidV0(h).String())
	}
	return spindle.Ref(cid.NewCidV1(codec, h).String())
}

func testNotShared(t *testing.T, s spindle.BlockStore) {
	data := []byte("keep me")
	ref := put(t, s, data)
	data[0] = 'X'
	got, err := s.Get(context.Background(), ref)
	if err != nil {
		t.Fatalf("Get after changing the caller's slice: %v", err)
	}
	got[0] = 'Y'
	get(t, s, ref, []byte("keep me"))
}

func testCancelled(t *testing.T, s spindle.BlockStore) {
	ref := put(t, s, []byte("c"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, []byte("d")); err == nil {
		t.Errorf("Put with a cancelled context succeeded")
	}
	if _, err := s.Get(ctx, ref); err == nil {
		t.Errorf("Get with a cancelled context succeeded")
	}
}

func testConcurrent(t *testing.T, s spindle.BlockStore) {
	const workers, perWorker = 8, 16
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				// Half the blocks are shared by all workers, half their own.
				seed := uint64(i)
				if i%2 == 1 {
					seed = uint64(1000*(w+1) + i)
				}
				data := Block(seed, 1000+i*37)
				ref, err := s.Put(context.Background(), data)
				if err != nil {
					errc <- err
					return
				}
				got, err := s.Get(context.Background(), ref)
				if err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(got, data) {
					errc <- fmt.Errorf("block %s: wrong contents", ref)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func testListDelete(t *testing.T, s spindle.BlockStore) {
	l, ok := s.(spindle.BlockLister)
	if !ok {
		t.Skipf("%T is not a BlockLister", s)
	}
	ctx := context.Background()
	want := map[spindle.Ref]bool{}
	for i := range 20 {
		want[put(t, s, Block(uint64(i), 100+i))] = true
	}
	got := map[spindle.Ref]bool{}
	err := l.List(ctx, func(ref spindle.Ref) error {
		if got[ref] {
			t.Errorf("List returned %s twice", ref)
		}
		got[ref] = true
		return nil
	})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(got) != len(want) {
		t.Fatalf("List returned %d blocks, want %d", len(got), len(want))
	}
	for ref := range want {
		if !got[ref] {
			t.Fatalf("List did not return %s", ref)
		}
	}

	stop := errors.New("stop")
	n := 0
	if err := l.List(ctx, func(spindle.Ref) error { n++; return stop }); err != stop || n != 1 {
		t.Fatalf("List stopped by fn: err = %v after %d calls, want %v after 1", err, n, stop)
	}

	var victim spindle.Ref
	for ref := range want {
		victim = ref
		break
	}
	if err := l.Delete(ctx, victim); err != nil {
		t.Fatalf("Delete(%s): %v", victim, err)
	}
	if _, err := s.Get(ctx, victim); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get after Delete: err = %v, want NotExist", err)
	}
	if err := l.Delete(ctx, victim); err != nil {
		t.Fatalf("second Delete(%s): %v, want nil", victim, err)
	}
	n = 0
	if err := l.List(ctx, func(spindle.Ref) error { n++; return nil }); err != nil || n != len(want)-1 {
		t.Fatalf("List after Delete: %d blocks, err %v; want %d", n, err, len(want)-1)
	}
}
