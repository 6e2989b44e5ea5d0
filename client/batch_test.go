package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// Puts made at once by one client go to the node in batches; each keeps
// its own result, and one put's failure does not touch the others.
func TestConcurrentPuts(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "@/d"); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 12
	var wg sync.WaitGroup
	seqs := make(chan int64, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				data := fmt.Appendf(nil, "file %d of worker %d", i, w)
				if i%5 == 4 {
					// Some puts fail: their directory does not exist.
					_, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("@/nodir/w%d-%d", w, i)), bytes.NewReader(data), 0, nil)
					if !errors.Is(err, spindle.NotExist) {
						t.Errorf("put into a missing directory: %v, want NotExist", err)
					}
					continue
				}
				e, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("@/d/w%d-%d", w, i)), bytes.NewReader(data), 0, nil)
				if err != nil {
					t.Errorf("worker %d file %d: %v", w, i, err)
					continue
				}
				seqs <- e.Sequence
			}
		}()
	}
	wg.Wait()
	close(seqs)
	seen := map[int64]bool{}
	for s := range seqs {
		if seen[s] {
			t.Fatalf("two puts got sequence %d", s)
		}
		seen[s] = true
	}
	es, err := c.Glob(ctx, "@/d/*")
	if err != nil {
		t.Fatal(err)
	}
	if want := workers * (each - each/5); len(es) != want || len(seen) != want {
		t.Fatalf("%d files listed, %d puts succeeded; want %d", len(es), len(seen), want)
	}
	for _, e := range es {
		f, err := c.Open(ctx, e.Name)
		if err != nil {
			t.Fatal(err)
		}
		var w, i int
		got := make([]byte, e.Size)
		if _, err := f.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		fmt.Sscanf(string(e.Name), "ann@example.com/d/w%d-%d", &w, &i)
		if want := fmt.Sprintf("file %d of worker %d", i, w); string(got) != want {
			t.Errorf("%s holds %q, want %q", e.Name, got, want)
		}
	}
}

// A batch of entries is checked entry by entry: the node appends those
// before the first one it refuses, and nothing a peer may not append.
func TestBatchRequests(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	head, err := c.svc.Head(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	sign := func(keys *pack.Keys, seq int64, prev dirlog.Hash, name string) *dirlog.Entry {
		e := &dirlog.Entry{Seq: seq, Prev: prev, Time: spindle.Now(), Op: dirlog.OpMkdir, Entry: spindle.DirEntry{Name: spindle.PathName(name), Attr: spindle.AttrDirectory, Sequence: seq}, KeyAt: c.keyLogSize()}
		if err := e.Sign(keys); err != nil {
			t.Fatal(err)
		}
		return e
	}
	good := sign(c.keys, head.Seq+1, head.Hash, "ann@example.com/good")
	bob, _, _ := pack.Generate("bob@example.com")
	forged := sign(bob, head.Seq+2, good.Hash(), "ann@example.com/bobs")
	call := func(batch ...[]byte) ([]*spindle.DirEntry, error) {
		resp, err := c.svc.call(ctx, &wiretest.Request{Method: wire.DirBatch, Batch: batch})
		if resp == nil {
			return nil, err
		}
		return resp.Entries, err
	}

	out, err := call(good.Marshal(), forged.Marshal())
	if !errors.Is(err, spindle.Permission) || len(out) != 1 || out[0].Name != "ann@example.com/good" {
		t.Fatalf("batch with an entry signed by another user: %v, %v; want the first appended and Permission", out, err)
	}
	out, err = call([]byte("junk"))
	if !errors.Is(err, spindle.Invalid) || len(out) != 0 {
		t.Fatalf("malformed entry: %v, %v; want Invalid", out, err)
	}
	out, err = call(make([][]byte, dirlog.MaxBatch+1)...)
	if !errors.Is(err, spindle.Invalid) || len(out) != 0 {
		t.Fatalf("oversized batch: %v, %v; want Invalid", out, err)
	}
	if _, err := c.Lookup(ctx, "@/bobs", false); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("the forged entry was appended: %v", err)
	}
}

// slowStore is a refPutter that holds each block a while and records the
// most blocks it held at once.
type slowStore struct {
	mu       sync.Mutex
	now, max int
}

func (s *slowStore) PutRef(ctx context.Context, ref spindle.Ref, data []byte) error {
	s.mu.Lock()
	s.now++
	s.max = max(s.max, s.now)
	s.mu.Unlock()
	time.Sleep(2 * time.Millisecond)
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return nil
}

// Many puts at once keep at most the client's budget of blocks in flight
// together, and each at most its own.
func TestPutPipesShareBudget(t *testing.T) {
	store := &slowStore{}
	shared := make(chan struct{}, clientPutInFlight)
	var pool sync.Pool
	ctx := context.Background()
	var wg sync.WaitGroup
	block := make([]byte, spindle.MaxBlockSize)
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := newPutPipe(store, putInFlight, shared, &pool)
			for range 20 {
				if err := p.put(ctx, "ref", block); err != nil {
					t.Error(err)
				}
			}
			if err := p.wait(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if store.max > clientPutInFlight || store.max < putInFlight {
		t.Fatalf("at most %d blocks in flight, want %d to %d", store.max, putInFlight, clientPutInFlight)
	}
	one := &slowStore{}
	p := newPutPipe(one, putInFlight, make(chan struct{}, clientPutInFlight), &pool)
	for range 40 {
		p.put(ctx, "ref", block)
	}
	p.wait()
	if one.max > putInFlight {
		t.Fatalf("one put kept %d blocks in flight, want at most %d", one.max, putInFlight)
	}
}

// A client whose node does not know batches (an older node) puts its
// entries one at a time.
func TestBatchFallbackForOlderNode(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wiretest.Request
		if err := wire.Decode(data, &req); err == nil && req.Method == wire.DirBatch {
			return wire.Encode(&wiretest.Response{Err: wire.ErrBytes(spindle.E(wire.UnknownOp, spindle.Invalid, "unknown method "+req.Method))})
		}
		return n.ServeClient(ctx, remote, data)
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("@/f%d", i)), bytes.NewReader([]byte("x")), 0, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if !c.svc.noBatch.Load() {
		t.Fatal("the client did not notice that the node has no batches")
	}
	if es, err := c.Glob(ctx, "@/f*"); err != nil || len(es) != 8 {
		t.Fatalf("%d files, %v; want 8", len(es), err)
	}
}
