package host

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"spindle.dev"
)

// slowScanStore is a MemStore whose logs' Scan, once block is set,
// waits until release is closed: a watcher reading the log from disk,
// slowly.
type slowScanStore struct {
	*MemStore
	block    atomic.Bool
	scanning chan struct{} // Receives when a blocked Scan starts.
	release  chan struct{}
}

func (s *slowScanStore) Open(ctx context.Context, user spindle.UserName) (Log, error) {
	l, err := s.MemStore.Open(ctx, user)
	if err != nil {
		return nil, err
	}
	return &slowScanLog{Log: l, s: s}, nil
}

type slowScanLog struct {
	Log
	s *slowScanStore
}

func (l *slowScanLog) Scan(ctx context.Context, fn func([]byte) error) error {
	if l.s.block.Load() {
		l.s.scanning <- struct{}{}
		<-l.s.release
	}
	return l.Log.Scan(ctx, fn)
}

// TestWatchHistoryDoesNotStallAppends checks that a watch from an old
// sequence number, whose events must be read again from the log, reads it
// without holding up the owner's appends, and then catches up on them.
func TestWatchHistoryDoesNotStallAppends(t *testing.T) {
	st := &slowScanStore{MemStore: &MemStore{}, scanning: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnv(t, st)
	e.s.maxRecent = 2
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for i := range 5 {
		e.do(c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 1)))
	}
	st.block.Store(true)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	ch, err := c.Watch(ctx, "ann@example.com/", 2)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.scanning:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not read the log")
	}
	st.block.Store(false)
	done := make(chan error, 1)
	go func() {
		_, err := c.Put(e.ctx, file("ann@example.com/f5", 1))
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(st.release)
		t.Fatal("the append waited for the watcher's scan")
	}
	close(st.release)
	for want := int64(2); want <= 7; want++ {
		select {
		case ev := <-ch:
			if ev.Err != nil || ev.Entry.Sequence != want || ev.Entry.Name != spindle.PathName(fmt.Sprintf("ann@example.com/f%d", want-2)) {
				t.Fatalf("event %+v, want f%d at %d", ev, want-2, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for sequence %d", want)
		}
	}
}
