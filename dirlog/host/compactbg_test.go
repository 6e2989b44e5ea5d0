package host

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"spindle.dev"
)

// blockingStore is a MemStore whose logs' Replace, which compaction
// calls, waits until release is closed.
type blockingStore struct {
	*MemStore
	replacing chan struct{} // Receives when a Replace starts.
	release   chan struct{}
}

func (s *blockingStore) Open(ctx context.Context, user spindle.UserName) (Log, error) {
	l, err := s.MemStore.Open(ctx, user)
	if err != nil {
		return nil, err
	}
	return &blockingLog{Log: l, s: s}, nil
}

type blockingLog struct {
	Log
	s *blockingStore
}

func (l *blockingLog) Replace(ctx context.Context, recs ...[]byte) error {
	l.s.replacing <- struct{}{}
	<-l.s.release
	return l.Log.Replace(ctx, recs...)
}

// TestCompactInBackground checks that the append that makes a log due
// for compaction returns while the compaction is still running, and that
// Close waits for the compaction and leaves no goroutine behind.
func TestCompactInBackground(t *testing.T) {
	st := &blockingStore{MemStore: &MemStore{}, replacing: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, st)
	e.s.Close()
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler), CompactAfter: 3})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for i := range 3 {
		done := make(chan error, 1)
		go func() {
			_, err := c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 1))
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("put %d waits for the compaction", i)
		}
	}
	select {
	case <-st.replacing:
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction after 4 entries with CompactAfter 3")
	}
	// The compaction is stuck in Replace, holding the log; reads go on.
	if _, err := s.Lookup(e.ctx, ann, "ann@example.com/f2"); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	s.compactions()
	cp, err := s.Checkpoint(e.ctx, ann, ann)
	if err != nil || cp == nil || cp.Seq != 4 {
		t.Fatalf("checkpoint %v, %v; want one at 4", cp, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
