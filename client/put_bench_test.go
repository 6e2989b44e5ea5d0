package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

// BenchmarkPutGetLarge stores and reads back a 256 MiB file through a node
// in the same process over loopback TCP.
func BenchmarkPutGetLarge(b *testing.B) {
	n := startNodeB(b)
	defer n.Close()
	c := dialAsB(b, n, "ann@example.com")
	ctx := context.Background()
	const size = 256 << 20
	src := &patternReader{n: size}
	b.Run("put", func(b *testing.B) {
		b.SetBytes(size)
		for i := range b.N {
			src.n = size
			if _, err := c.Put(ctx, ann(fmt.Sprint("big", i)), src, 0, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			f, err := c.Open(ctx, ann("big0"))
			if err != nil {
				b.Fatal(err)
			}
			if k, err := io.Copy(io.Discard, f); err != nil || k != size {
				b.Fatal(k, err)
			}
			f.Close()
		}
	})
}

// patternReader yields n bytes of a fixed pattern without allocating.
type patternReader struct{ n int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n)
	for i := range p[:k] {
		p[i] = byte(i)
	}
	r.n -= k
	return int(k), nil
}
