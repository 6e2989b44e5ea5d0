package main

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"spindle.dev"
)

// chunky hands out its data in small pieces of odd sizes and is no
// io.WriterTo, so that every write misses O_DIRECT's alignment.
type chunky struct{ r io.Reader }

func (c *chunky) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), 5003)]) }

// copyDirect writes exactly the source's bytes, whether they come aligned
// (a bytes.Reader over a large, page-aligned slice writes it whole) or in
// odd pieces, on the file systems at hand (tmpfs may refuse O_DIRECT: then
// it must report so and write nothing), and counts every byte.
func TestCopyDirect(t *testing.T) {
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
			for _, src := range []struct {
				name string
				r    io.Reader
			}{{"aligned", bytes.NewReader(data)}, {"pieces", &chunky{bytes.NewReader(data)}}} {
				name := filepath.Join(dir, "out")
				f, err := os.Create(name)
				if err != nil {
					t.Fatal(err)
				}
				var counted int64
				done, err := copyDirect(f, src.r, int64(size), func(n int) { counted += int64(n) })
				f.Close()
				if err != nil {
					t.Fatalf("%s: %d bytes %s: %v", dir, size, src.name, err)
				}
				got, _ := os.ReadFile(name)
				if !done {
					if len(got) != 0 {
						t.Fatalf("%s: not done, yet %d bytes written", dir, len(got))
					}
					continue
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("%s: %d bytes %s: file holds %d bytes, not the source's", dir, size, src.name, len(got))
				}
				if counted != int64(size) {
					t.Fatalf("%s: %d bytes %s: counted %d", dir, size, src.name, counted)
				}
			}
		}
	}
}

// A source that ends early, runs long or fails is an error, not a file
// reported as copied; a destination that cannot be written is a
// localError.
func TestCopyDirectErrors(t *testing.T) {
	const mb = spindle.MaxBlockSize
	name := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if done, err := copyDirect(f, bytes.NewReader(make([]byte, 2*mb)), 5*mb, func(int) {}); !done || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short source: %v, %v; want unexpected EOF", done, err)
	}
	if _, err := copyDirect(f, bytes.NewReader(make([]byte, 2*mb)), mb, func(int) {}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("long source: %v; want unexpected EOF", err)
	}
	boom := errors.New("network gone")
	_, err = copyDirect(f, io.MultiReader(bytes.NewReader(make([]byte, mb)), &errReader{boom}), 4*mb, func(int) {})
	if !errors.Is(err, boom) {
		t.Fatalf("failing source: %v, want %v", err, boom)
	}
	w := &directWriter{f: f, name: name, buf: alignedBuffer(mb), count: func(int) {}}
	f.Close() // Writes now fail.
	_, err = w.Write(alignedBuffer(mb))
	var le *localError
	if !errors.As(err, &le) {
		t.Fatalf("write to a closed file: %v, want a localError", err)
	}
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }
