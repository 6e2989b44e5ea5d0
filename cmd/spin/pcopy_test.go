package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"spindle.dev"
)

// copyParallel writes exactly the source's bytes, with O_DIRECT where the
// file system allows (the test's temporary directory) and without it
// (tmpfs), and counts every byte.
func TestCopyParallel(t *testing.T) {
	dirs := []string{t.TempDir()}
	if d, err := os.MkdirTemp("/dev/shm", "spin-pcopy-"); err == nil {
		defer os.RemoveAll(d)
		dirs = append(dirs, d)
	}
	const mb = spindle.MaxBlockSize
	for _, dir := range dirs {
		for _, size := range []int{0, 1, directAlign + 1, mb, 3*mb + 5, 9 * mb} {
			data := make([]byte, size)
			rand.NewChaCha8([32]byte{byte(size)}).Read(data)
			name := filepath.Join(dir, "out")
			f, err := os.Create(name)
			if err != nil {
				t.Fatal(err)
			}
			var counted atomic.Int64
			err = copyParallel(f, bytes.NewReader(data), int64(size), func(n int) { counted.Add(int64(n)) })
			f.Close()
			if err != nil {
				t.Fatalf("%s: %d bytes: %v", dir, size, err)
			}
			got, _ := os.ReadFile(name)
			if !bytes.Equal(got, data) {
				t.Fatalf("%s: %d bytes: file holds %d bytes, not the source's", dir, size, len(got))
			}
			if counted.Load() != int64(size) {
				t.Fatalf("%s: %d bytes: counted %d", dir, size, counted.Load())
			}
		}
	}
}

// A source that ends early or fails is an error, not a short file
// reported as copied; a destination that cannot be written is a
// localError.
func TestCopyParallelErrors(t *testing.T) {
	const mb = spindle.MaxBlockSize
	name := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = copyParallel(f, bytes.NewReader(make([]byte, 2*mb)), 5*mb, func(int) {})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short source: %v, want unexpected EOF", err)
	}
	boom := errors.New("network gone")
	err = copyParallel(f, io.MultiReader(bytes.NewReader(make([]byte, mb)), &errReader{boom}), 4*mb, func(int) {})
	if !errors.Is(err, boom) {
		t.Fatalf("failing source: %v, want %v", err, boom)
	}
	ro, err := os.Open(name) // Read-only: writes fail.
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	err = copyParallel(ro, bytes.NewReader(make([]byte, 4*mb)), 4*mb, func(int) {})
	var le *localError
	if !errors.As(err, &le) {
		t.Fatalf("read-only destination: %v, want a localError", err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
