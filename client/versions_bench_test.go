package client

import (
	"fmt"
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
