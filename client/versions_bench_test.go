package client

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"spindle.dev"
)

// BenchmarkPastAt reads a tree of 1,100 entries as it was 10 and 1,000
// entries back, and looks a name up in it: the whole log is read and
// checked whatever the distance (docs/performance.md).
func BenchmarkPastAt(b *testing.B) {
	w := newLieWorld(b)
	for i := range 1100 {
		if _, err := w.ann.MakeDirectory(w.ctx, spindle.PathName(fmt.Sprintf("ann@example.com/docs/d%04d", i))); err != nil {
			b.Fatal(err)
		}
	}
	for _, back := range []int64{10, 1000} {
		b.Run(fmt.Sprintf("back=%d", back), func(b *testing.B) {
			for b.Loop() {
				p, err := w.ann.PastAt(w.ctx, -back, time.Time{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Lookup("ann@example.com/docs/d0050"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPastAtDeep is BenchmarkPastAt in a log of 100,100 entries,
// read 10, 1,000 and 100,000 entries back: by the owner, who reads and
// checks the whole log, and by a reader, whose dir host folds the state
// (each read of another state than the last four, which the host keeps
// folded) and proves the answer. Making the log takes minutes.
func BenchmarkPastAtDeep(b *testing.B) {
	w := newLieWorld(b)
	cat := dialAs(b, w.n, "cat@example.com")
	w.put(b, "@/docs/Access", "read: bob@example.com, cat@example.com, friends\n*: ann@example.com\n")
	const n, workers = 100_100, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for k := range workers {
		wg.Go(func() {
			for i := k; i < n; i += workers {
				if _, err := w.ann.MakeDirectory(w.ctx, spindle.PathName(fmt.Sprintf("ann@example.com/docs/d%06d", i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	for _, back := range []int64{10, 1000, 100_000} {
		b.Run(fmt.Sprintf("back=%d", back), func(b *testing.B) {
			for b.Loop() {
				p, err := w.ann.PastAt(w.ctx, -back, time.Time{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Lookup("ann@example.com/docs/d000050"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, back := range []int64{10, 1000, 100_000} {
		b.Run(fmt.Sprintf("reader/back=%d", back), func(b *testing.B) {
			i := int64(0)
			for b.Loop() {
				p, err := cat.PastOf(w.ctx, "ann@example.com", -back+i, time.Time{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := p.Lookup("ann@example.com/docs/d000050"); err != nil {
					b.Fatal(err)
				}
				i++ // Another state each time: none is folded already.
			}
		})
	}
}
