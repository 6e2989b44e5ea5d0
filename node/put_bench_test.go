package node

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
)

// BenchmarkPutSmallFiles stores 4 KiB files, eight at a time, through a
// node in the same process over loopback TCP.
func BenchmarkPutSmallFiles(b *testing.B) {
	n := startNodeB(b)
	defer n.Close()
	c := dialAsB(b, n, "ann@example.com")
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 4096)
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range b.N {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := c.Put(ctx, ann(fmt.Sprintf("f%d", i)), bytes.NewReader(data), 0, nil); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "files/s")
}
