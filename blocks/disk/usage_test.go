package disk_test

import (
	"bytes"
	"context"
	"testing"

	"spindle.dev/blocks/disk"
)

// Usage counts small and large blocks, each once, and follows deletes
// and a reopen.
func TestUsage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir)
	want := func(s *disk.Store, n, size int64) {
		t.Helper()
		gn, gsize, err := s.Usage(ctx)
		if err != nil || gn != n || gsize != size {
			t.Fatalf("Usage = %d blocks, %d bytes, %v; want %d, %d", gn, gsize, err, n, size)
		}
	}
	want(s, 0, 0)
	small := []byte("a small block")
	large := bytes.Repeat([]byte("L"), disk.SmallMax+1000)
	if _, err := s.Put(ctx, small); err != nil {
		t.Fatal(err)
	}
	ref, err := s.Put(ctx, large)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, large); err != nil { // Again: still one block.
		t.Fatal(err)
	}
	total := int64(len(small) + len(large))
	want(s, 2, total)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	want(s, 2, total)
	if err := s.Delete(ctx, ref); err != nil {
		t.Fatal(err)
	}
	want(s, 1, int64(len(small)))
}
