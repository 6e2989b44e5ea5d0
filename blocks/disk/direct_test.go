package disk

import (
	"bytes"
	"context"
	"os"
	"testing"
)

// Large blocks take the O_DIRECT path where the file system allows it, and
// fall back to buffered writes where it does not (tmpfs); both store the
// exact bytes.
func TestDirectAndFallback(t *testing.T) {
	dirs := []string{t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "spindle-disk-")
		if err == nil {
			defer os.RemoveAll(d)
			dirs = append(dirs, d)
		}
	}
	ctx := context.Background()
	for _, dir := range dirs {
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{directMin - 1, directMin, directMin + 1, 1<<20 + 7} {
			data := bytes.Repeat([]byte{byte(n)}, n)
			data[n/2] = 0x55
			ref, err := s.Put(ctx, data)
			if err != nil {
				t.Fatalf("%s: Put %d bytes: %v", dir, n, err)
			}
			got, err := s.Get(ctx, ref)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s: Get %d bytes: %v (equal %v)", dir, n, err, bytes.Equal(got, data))
			}
		}
		s.Close()
	}
}
