package pack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"

	"spindle.dev"
)

// lender hands out copies of stored blocks, as a network fetcher does, and
// counts what comes back through ReadConfig.Release.
type lender struct {
	s       *memBlocks
	corrupt map[spindle.Ref]bool // Blocks lent with one byte flipped.

	mu       sync.Mutex
	out      map[*byte]int // Lent slices not yet returned, by first byte.
	lent     int
	returned int
	errs     []string
}

func newLender(s *memBlocks) *lender {
	return &lender{s: s, corrupt: map[spindle.Ref]bool{}, out: map[*byte]int{}}
}

func (l *lender) get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, err := l.s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	b := make([]byte, len(data), len(data)+1) // Never empty: keyed by &b[:1][0].
	copy(b, data)
	if l.corrupt[ref] && len(b) > 0 {
		b[len(b)/2] ^= 0x40
	}
	l.mu.Lock()
	l.out[&b[:1][0]]++
	l.lent++
	l.mu.Unlock()
	return b, nil
}

func (l *lender) release(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.returned++
	k := &b[:1][0]
	if l.out[k] == 0 {
		l.errs = append(l.errs, fmt.Sprintf("Release of a slice not lent, or returned twice (len %d)", len(b)))
		return
	}
	l.out[k]--
	if l.out[k] == 0 {
		delete(l.out, k)
	}
}

func (l *lender) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.errs {
		t.Error(e)
	}
	if len(l.out) != 0 || l.lent != l.returned {
		t.Errorf("lent %d blocks, %d returned, %d outstanding after Close", l.lent, l.returned, len(l.out))
	}
}

// TestOwnedBuffers reads files with ReadConfig.Release set, sequentially,
// backwards and after a corrupt block, for every packing and read-ahead,
// and checks the contents and that every lent slice comes back once.
func TestOwnedBuffers(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	const size = 7*spindle.MaxBlockSize + 999
	for _, packing := range packings {
		s := newMemBlocks()
		data := testData(size, 3)
		e := packFile(t, s, "alice@example.com/f", data, packing, ak, bk.PublicKey())
		for _, ahead := range []int{-1, 0, 1, 8} {
			t.Run(fmt.Sprintf("%v/ahead%d", packing, ahead), func(t *testing.T) {
				open := func(l *lender) *Reader {
					r, err := NewReader(context.Background(), e, ReadConfig{Keys: bk, WriterKeys: []spindle.PublicKey{ak.PublicKey()},
						Get: l.get, Release: l.release, ReadAhead: ahead})
					if err != nil {
						t.Fatal(err)
					}
					return r
				}

				l := newLender(s)
				r := open(l)
				got, err := io.ReadAll(r)
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("sequential read: %d bytes, %v; want the %d bytes written", len(got), err, len(data))
				}
				r.Close()
				l.check(t)
				// Stored blocks are untouched by decryption in place.
				if got, err := readAll(e, s, bk, ak.PublicKey()); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("store changed by an owned read: %v", err)
				}

				l = newLender(s)
				r = open(l)
				for i := len(e.Blocks) - 1; i >= 0; i-- {
					b := e.Blocks[i]
					buf := make([]byte, b.Size)
					if _, err := r.ReadAt(buf, b.Offset); err != nil && err != io.EOF {
						t.Fatalf("ReadAt block %d: %v", i, err)
					}
					if !bytes.Equal(buf, data[b.Offset:b.Offset+b.Size]) {
						t.Fatalf("ReadAt block %d: wrong contents", i)
					}
				}
				r.Close()
				l.check(t)

				l = newLender(s)
				l.corrupt[e.Blocks[4].Ref] = true
				r = open(l)
				got, err = io.ReadAll(r)
				if !spindle.Match(spindle.E(spindle.Integrity), err) || len(got) != int(e.Blocks[4].Offset) {
					t.Fatalf("read with block 4 corrupt: %d bytes, %v; want %d bytes and Integrity", len(got), err, e.Blocks[4].Offset)
				}
				r.Close()
				l.check(t)
			})
		}
	}
}

// WriteTo writes the rest of the file from the Read offset, in owned and
// unowned mode, and stops at the first failing write.
func TestWriteTo(t *testing.T) {
	ak := testKeys(t, alice, 1)
	const size = 3*spindle.MaxBlockSize + 77
	for _, packing := range packings {
		s := newMemBlocks()
		data := testData(size, 5)
		e := packFile(t, s, "alice@example.com/f", data, packing, ak)
		for _, owned := range []bool{false, true} {
			l := newLender(s)
			cfg := ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get}
			if owned {
				cfg.Get, cfg.Release = l.get, l.release
			}
			for _, from := range []int64{0, 1, spindle.MaxBlockSize, size - 1, size} {
				r, err := NewReader(context.Background(), e, cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := r.Seek(from, io.SeekStart); err != nil {
					t.Fatal(err)
				}
				var buf bytes.Buffer
				n, err := r.WriteTo(&buf)
				if err != nil || n != size-from || !bytes.Equal(buf.Bytes(), data[from:]) {
					t.Fatalf("%v owned=%v from %d: WriteTo = %d, %v; contents equal %v", packing, owned, from, n, err, bytes.Equal(buf.Bytes(), data[from:]))
				}
				if k, err := r.Read(make([]byte, 1)); k != 0 || err != io.EOF {
					t.Fatalf("Read after WriteTo = %d, %v; want EOF", k, err)
				}
				fw := &failingWriter{left: spindle.MaxBlockSize + 10}
				r.Seek(0, io.SeekStart)
				n, err = r.WriteTo(fw)
				if !errors.Is(err, errDiskFull) || n != spindle.MaxBlockSize+10 {
					t.Fatalf("WriteTo a failing writer = %d, %v; want %d and %v", n, err, spindle.MaxBlockSize+10, errDiskFull)
				}
				r.Close()
			}
			l.check(t)
		}
	}
}

var errDiskFull = errors.New("disk full")

type failingWriter struct{ left int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		k := w.left
		w.left = 0
		return k, errDiskFull
	}
	w.left -= len(p)
	return len(p), nil
}

// A block whose bytes are wrong is fetched again once, with
// ReadConfig.Refetch: bytes wrong once (a lying holder a node in the
// middle passed on unchecked) are then read right; bytes wrong twice fail
// with Integrity, after two fetches. Without Refetch, once is enough to
// fail. Every lent slice comes back.
func TestRefetchWrongBlock(t *testing.T) {
	ak := testKeys(t, alice, 1)
	const size = 5*spindle.MaxBlockSize + 3
	for _, packing := range packings {
		s := newMemBlocks()
		data := testData(size, 9)
		e := packFile(t, s, "alice@example.com/f", data, packing, ak)
		bad := e.Blocks[2].Ref
		for _, owned := range []bool{false, true} {
			for _, wrongTimes := range []int{1, 2, 100} {
				for _, refetch := range []bool{false, true} {
					t.Run(fmt.Sprintf("%v/owned=%v/wrong%d/refetch=%v", packing, owned, wrongTimes, refetch), func(t *testing.T) {
						l := newLender(s)
						var mu sync.Mutex
						fetches := 0
						get := func(ctx context.Context, ref spindle.Ref) ([]byte, error) {
							b, err := l.get(ctx, ref)
							if err == nil && ref == bad {
								mu.Lock()
								fetches++
								if fetches <= wrongTimes {
									b[len(b)/3] ^= 1
								}
								mu.Unlock()
							}
							return b, err
						}
						cfg := ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: get}
						tries := 1
						if refetch {
							cfg.Refetch, tries = get, 2
						}
						if owned {
							cfg.Release = l.release
						}
						r, err := NewReader(context.Background(), e, cfg)
						if err != nil {
							t.Fatal(err)
						}
						got, err := io.ReadAll(r)
						r.Close()
						if owned {
							l.check(t)
						}
						if wrongTimes < tries {
							if err != nil || !bytes.Equal(got, data) {
								t.Fatalf("read with block 2 wrong %d times: %d bytes, %v; want the file", wrongTimes, len(got), err)
							}
							if fetches != wrongTimes+1 {
								t.Fatalf("block 2 fetched %d times, want %d", fetches, wrongTimes+1)
							}
							return
						}
						if !spindle.Match(spindle.E(spindle.Integrity), err) || len(got) != int(e.Blocks[2].Offset) {
							t.Fatalf("read with block 2 always wrong: %d bytes, %v; want %d bytes and Integrity", len(got), err, e.Blocks[2].Offset)
						}
						if fetches != tries {
							t.Fatalf("block 2 wrong %d times fetched %d times, want %d", wrongTimes, fetches, tries)
						}
					})
				}
			}
		}
	}
}
