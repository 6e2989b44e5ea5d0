package disk_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/disk"
)

// The store passes the block store suite on the strict in-memory file
// system too.
func TestSuiteMemFS(t *testing.T) {
	blockstest.Test(t, func(t *testing.T) spindle.BlockStore {
		s, err := disk.OpenFS(spindle.NewMemFS(), "/blocks")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// bufferedFS is a file system without direct I/O: the MemFS it holds,
// with OpenDirect hidden.
type bufferedFS struct{ spindle.FS }

// TestCrashAtEveryStep stores large blocks (a file each) and small ones
// (segments, put concurrently so that they share syncs), and deletes one,
// on the strict in-memory file system, and simulates a crash after each
// step the file system sees. After each crash the store opens what is
// left: every block it acknowledged reads back whole, an acknowledged
// delete stays done, and a block in flight is there whole or not at all,
// never corrupt. It does so with large blocks written with direct I/O
// (64 KiB and more, as in production on Linux) and through the page cache
// (as where the file system refuses direct I/O).
func TestCrashAtEveryStep(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		crashAtEveryStep(t, func(m *spindle.MemFS) spindle.FS { return m })
	})
	t.Run("buffered", func(t *testing.T) {
		crashAtEveryStep(t, func(m *spindle.MemFS) spindle.FS { return bufferedFS{m} })
	})
}

func crashAtEveryStep(t *testing.T, wrap func(*spindle.MemFS) spindle.FS) {
	ctx := context.Background()
	large := [][]byte{blockstest.Block(1, disk.SmallMax), blockstest.Block(2, spindle.MaxBlockSize), blockstest.Block(7, disk.SmallMax+1000)}
	small := [][]byte{blockstest.Block(3, 100), blockstest.Block(4, 5000), blockstest.Block(5, 30000), blockstest.Block(6, 7)}
	steps := 0
	for k := 0; ; k++ {
		if k > 10000 {
			t.Fatal("the scenario never ran to its end")
		}
		m := spindle.NewMemFS()
		s, err := disk.OpenFS(wrap(m), "/blocks")
		if err != nil {
			t.Fatal(err)
		}
		start := m.Ops()
		m.CrashAfter(k)

		var mu sync.Mutex
		acked := map[spindle.Ref][]byte{}
		inFlight := map[spindle.Ref][]byte{}
		put := func(data []byte) bool {
			ref, err := s.Put(ctx, data)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				inFlight[refOf(data)] = data
				return false
			}
			acked[ref] = data
			return true
		}
		var deleted spindle.Ref
		func() {
			for _, b := range large {
				if !put(b) {
					return
				}
			}
			var wg sync.WaitGroup
			for _, b := range small {
				wg.Go(func() { put(b) })
			}
			wg.Wait()
			if m.Crashed() {
				return
			}
			ref := refOf(large[0])
			if err := s.Delete(ctx, ref); err != nil {
				inFlight[ref] = large[0]
				return
			}
			delete(acked, ref)
			deleted = ref
			ref = refOf(small[0])
			if err := s.Delete(ctx, ref); err != nil {
				inFlight[ref] = small[0]
				return
			}
			delete(acked, ref)
		}()
		finished := !m.Crashed()
		if finished {
			steps = m.Ops() - start
		}
		_, buffered := wrap(m).(bufferedFS)
		if !m.Crashed() && disk.Direct(s) == buffered {
			t.Fatalf("crash after step %d: the store writes with direct I/O: %v, want %v (a misaligned write?)", k, disk.Direct(s), !buffered)
		}
		m.Crash()

		s2, err := disk.OpenFS(wrap(m), "/blocks")
		if err != nil {
			t.Fatalf("crash after step %d: the store does not open: %v", k, err)
		}
		if d := s2.Damage(); len(d) > 0 {
			t.Fatalf("crash after step %d: damage reported: %v", k, d)
		}
		for ref, data := range acked {
			got, err := s2.Get(ctx, ref)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("crash after step %d: acknowledged block %s: %v (equal %v)", k, ref, err, bytes.Equal(got, data))
			}
		}
		if deleted != "" && inFlight[deleted] == nil {
			if _, err := s2.Get(ctx, deleted); !errors.Is(err, spindle.NotExist) {
				t.Fatalf("crash after step %d: acknowledged delete of %s undone: %v", k, deleted, err)
			}
		}
		for ref, data := range inFlight {
			got, err := s2.Get(ctx, ref)
			if err == nil && !bytes.Equal(got, data) || err != nil && !errors.Is(err, spindle.NotExist) {
				t.Fatalf("crash after step %d: block %s in flight is there in part: %v", k, ref, err)
			}
		}
		err = s2.List(ctx, func(ref spindle.Ref) error {
			if acked[ref] == nil && inFlight[ref] == nil && ref != deleted {
				t.Errorf("crash after step %d: %s listed, never acknowledged nor in flight", k, ref)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s2.Close()
		if finished {
			break
		}
	}
	t.Logf("a crash after each of %d file-system steps left every acknowledged block", steps)
}

// refOf returns the reference of a block.
func refOf(data []byte) spindle.Ref {
	ref, _, err := blocks.Receive(data)
	if err != nil {
		panic(err)
	}
	return ref
}
