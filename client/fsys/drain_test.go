package fsys

import (
	"context"
	"testing"
	"time"
)

// A drain counts a file whose put failed and waits to be tried again as
// not stored, and a failed try again as no progress: it ends, after the
// timeout, reporting the file, however often the put is retried.
func TestDrainCountsRetriesAsLeft(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWriteBack(&filesys{ctx: ctx})
	w.hold() // A file whose put failed, waiting to be queued again.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		// It is queued and fails again, and again.
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				w.hold()
				w.done()
			}
		}
	}()
	got := make(chan int, 1)
	go func() { got <- w.drain(100 * time.Millisecond) }()
	select {
	case left := <-got:
		if left != 1 {
			t.Fatalf("drain reports %d files left, want 1", left)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("drain went on while the only file's put kept failing")
	}

	close(stop)
	<-stopped

	// A file stored is progress, and then nothing is left.
	w.storedOne()
	w.done()
	if left := w.drain(time.Second); left != 0 {
		t.Fatalf("after the file was stored, drain reports %d left", left)
	}
}
