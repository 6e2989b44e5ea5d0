package pack

import (
	"bytes"
	"context"
	"crypto/sha256"
	"strings"

	"github.com/ipfs/go-cid"

	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"spindle.dev"
)

// memBlocks is a trivial block store for tests. Tampering functions can
// replace what it serves.
type memBlocks struct {
	mu sync.Mutex
	m  map[spindle.Ref][]byte
}

func newMemBlocks() *memBlocks { return &memBlocks{m: make(map[spindle.Ref][]byte)} }

func (s *memBlocks) put(_ context.Context, ref spindle.Ref, data []byte) error {
	if RefOf(data) != ref {
		return fmt.Errorf("put: ref %s does not match data", ref)
	}
	s.mu.Lock()
	s.m[ref] = bytes.Clone(data)
	s.mu.Unlock()
	return nil
}

func (s *memBlocks) get(_ context.Context, ref spindle.Ref) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[ref]
	if !ok {
		return nil, spindle.E(spindle.NotExist, fmt.Sprintf("block %s", ref))
	}
	return b, nil
}

// testKeys returns deterministic keys for user, derived from a secret
// filled with seed.
func testKeys(t testing.TB, user spindle.UserName, seed byte) *Keys {
	t.Helper()
	var s Secret
	for i := range s {
		s[i] = seed + byte(i)
	}
	k, err := FromSecret(user, s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// testData returns n deterministic pseudo-random bytes.
func testData(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

const (
	alice = spindle.UserName("alice@example.com")
	bob   = spindle.UserName("bob@example.com")
	carol = spindle.UserName("carol@example.com")
)

var packings = []spindle.Packing{spindle.EEPack, spindle.EEIntegrityPack, spindle.PlainPack}

// packFile packs data as name, written by signer for readers.
func packFile(t testing.TB, s *memBlocks, name spindle.PathName, data []byte, packing spindle.Packing, signer *Keys, readers ...spindle.PublicKey) *spindle.DirEntry {
	t.Helper()
	e := &spindle.DirEntry{Name: name, Time: 1234567890123456789}
	err := Pack(context.Background(), e, bytes.NewReader(data), Config{Packing: packing, Signer: signer, Readers: readers, Put: s.put})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func readAll(e *spindle.DirEntry, s *memBlocks, keys *Keys, writerKeys ...spindle.PublicKey) ([]byte, error) {
	r, err := NewReader(context.Background(), e, ReadConfig{Keys: keys, WriterKeys: writerKeys, Get: s.get})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

func TestRoundTrip(t *testing.T) {
	sizes := []int{0, 1, spindle.MaxBlockSize - 1, spindle.MaxBlockSize, spindle.MaxBlockSize + 1, 10*spindle.MaxBlockSize + 7}
	ak := testKeys(t, alice, 1)
	bk := testKeys(t, bob, 2)
	for _, packing := range packings {
		for _, size := range sizes {
			t.Run(fmt.Sprintf("%v/%d", packing, size), func(t *testing.T) {
				s := newMemBlocks()
				data := testData(size, uint64(size))
				e := &spindle.DirEntry{Name: "alice@example.com/dir/file"}
				w, err := NewWriter(context.Background(), e, Config{Packing: packing, Signer: ak, Readers: []spindle.PublicKey{bk.PublicKey()}, Put: s.put})
				if err != nil {
					t.Fatal(err)
				}
				// Write in awkward pieces to cross block boundaries at odd places.
				for rest := data; len(rest) > 0; {
					k := min(len(rest), 1+rand.IntN(300000))
					if n, err := w.Write(rest[:k]); err != nil || n != k {
						t.Fatalf("Write: %d, %v", n, err)
					}
					rest = rest[k:]
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if e.Size != int64(size) || e.Packing != packing || e.Writer != alice || e.Time == 0 {
					t.Fatalf("entry: size %d packing %v writer %q time %d", e.Size, e.Packing, e.Writer, e.Time)
				}
				if want := (size + spindle.MaxBlockSize - 1) / spindle.MaxBlockSize; len(e.Blocks) != want {
					t.Fatalf("%d blocks, want %d", len(e.Blocks), want)
				}
				for i, b := range e.Blocks {
					stored, _ := s.get(context.Background(), b.Ref)
					if packing == spindle.EEPack && len(stored) > 64 && bytes.Contains(data, stored[:64]) {
						t.Fatalf("ee block %d holds plaintext", i)
					}
				}
				for _, k := range []*Keys{ak, bk} {
					got, err := readAll(e, s, k, ak.PublicKey())
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("%s read back different data", k.UserName())
					}
				}
				r, err := NewReader(context.Background(), e, ReadConfig{Keys: bk, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
				if err != nil {
					t.Fatal(err)
				}
				for range 50 {
					off := rand.Int64N(int64(size) + 2)
					n := rand.IntN(2*spindle.MaxBlockSize + 10)
					buf := make([]byte, n)
					got, err := r.ReadAt(buf, off)
					want := data[min(off, int64(size)):min(off+int64(n), int64(size))]
					if got != len(want) || !bytes.Equal(buf[:got], want) {
						t.Fatalf("ReadAt(%d bytes, %d) = %d, %v; want %d bytes", n, off, got, err, len(want))
					}
					if (got < n) != (err == io.EOF) {
						t.Fatalf("ReadAt(%d bytes, %d) = %d, %v", n, off, got, err)
					}
					if _, err := r.Seek(off, io.SeekStart); err != nil {
						t.Fatal(err)
					}
					k, err := io.ReadFull(r, buf)
					if k != len(want) || !bytes.Equal(buf[:k], want) {
						t.Fatalf("Seek(%d)+Read(%d) = %d, %v", off, n, k, err)
					}
				}
				if end, err := r.Seek(-1, io.SeekEnd); size > 0 && (err != nil || end != int64(size-1)) {
					t.Fatalf("Seek(-1, end) = %d, %v", end, err)
				}
				if _, err := r.Seek(-1, io.SeekStart); !errors.Is(err, spindle.Invalid) {
					t.Fatalf("Seek(-1) = %v, want Invalid", err)
				}
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestStorePut checks the adapter from a BlockStore.
func TestStorePut(t *testing.T) {
	s := &fakeStore{m: map[spindle.Ref][]byte{}}
	ak := testKeys(t, alice, 1)
	data := testData(spindle.MaxBlockSize+5, 9)
	e := &spindle.DirEntry{Name: "alice@example.com/f"}
	if err := Pack(context.Background(), e, bytes.NewReader(data), Config{Signer: ak, Put: StorePut(s)}); err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.Get})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back %d bytes, %v", len(got), err)
	}
	s.lie = true
	e2 := &spindle.DirEntry{Name: "alice@example.com/g"}
	err = Pack(context.Background(), e2, bytes.NewReader(data), Config{Signer: ak, Put: StorePut(s)})
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("store filing blocks under a wrong ref: %v, want Integrity", err)
	}
}

type fakeStore struct {
	mu  sync.Mutex
	m   map[spindle.Ref][]byte
	lie bool
}

func (s *fakeStore) Put(_ context.Context, data []byte) (spindle.Ref, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ref := RefOf(data)
	s.m[ref] = bytes.Clone(data)
	if s.lie {
		return RefOf(append(data, 0)), nil
	}
	return ref, nil
}

func (s *fakeStore) Get(_ context.Context, ref spindle.Ref) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.m[ref]
	if !ok {
		return nil, spindle.E(spindle.NotExist, "no block")
	}
	return bytes.Clone(b), nil
}

func TestPutErrors(t *testing.T) {
	ak := testKeys(t, alice, 1)
	boom := spindle.E(spindle.IO, "disk full")
	calls := 0
	put := func(ctx context.Context, ref spindle.Ref, data []byte) error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	}
	e := &spindle.DirEntry{Name: "alice@example.com/f"}
	err := Pack(context.Background(), e, bytes.NewReader(testData(5*spindle.MaxBlockSize, 1)), Config{Signer: ak, Put: put})
	if !errors.Is(err, spindle.IO) {
		t.Fatalf("Pack with failing put: %v, want IO", err)
	}
	if e.Packdata != nil {
		t.Fatal("failed Pack left packdata in the entry")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = Pack(ctx, e, bytes.NewReader(testData(3*spindle.MaxBlockSize, 1)), Config{Signer: ak, Put: func(context.Context, spindle.Ref, []byte) error { return nil }})
	if err == nil {
		t.Fatal("Pack with a cancelled context succeeded")
	}

	for _, c := range []Config{{Put: put}, {Signer: ak}, {Signer: ak, Put: put, Packing: 9}} {
		if _, err := NewWriter(context.Background(), &spindle.DirEntry{Name: "alice@example.com/f"}, c); !errors.Is(err, spindle.Invalid) {
			t.Errorf("NewWriter(%+v): %v, want Invalid", c, err)
		}
	}
	if _, err := NewWriter(context.Background(), &spindle.DirEntry{Name: "alice@example.com/a/../f"}, Config{Signer: ak, Put: put}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("NewWriter with unclean name: %v, want Invalid", err)
	}
	if _, err := NewWriter(context.Background(), &spindle.DirEntry{Name: "alice@example.com/f"}, Config{Signer: ak, Put: put, Readers: []spindle.PublicKey{"p256:nonsense"}}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("NewWriter with a bad reader key: %v, want Invalid", err)
	}
}

// TestLinkAndInline checks that entries without blocks are signed too.
func TestLinkAndInline(t *testing.T) {
	ak := testKeys(t, alice, 1)
	s := newMemBlocks()
	e := &spindle.DirEntry{Name: "alice@example.com/Access", Inline: []byte("read: bob@example.com\n")}
	if err := Pack(context.Background(), e, bytes.NewReader(nil), Config{Packing: spindle.PlainPack, Signer: ak, Put: s.put}); err != nil {
		t.Fatal(err)
	}
	if err := Verify(e, []spindle.PublicKey{ak.PublicKey()}); err != nil {
		t.Fatal(err)
	}
	e.Inline = []byte("read: all\n")
	if err := Verify(e, []spindle.PublicKey{ak.PublicKey()}); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("changed Inline: %v, want Integrity", err)
	}
	l := &spindle.DirEntry{Name: "alice@example.com/link", Attr: spindle.AttrLink, Link: "bob@example.com/x"}
	if err := Pack(context.Background(), l, bytes.NewReader(nil), Config{Packing: spindle.PlainPack, Signer: ak, Put: s.put}); err != nil {
		t.Fatal(err)
	}
	l.Link = "bob@example.com/y"
	if err := Verify(l, []spindle.PublicKey{ak.PublicKey()}); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("changed Link: %v, want Integrity", err)
	}
}

// TestConcurrentReadAt reads one file from several goroutines at once,
// mixing sequential runs (which read ahead) with random jumps.
func TestConcurrentReadAt(t *testing.T) {
	ak := testKeys(t, alice, 1)
	s := newMemBlocks()
	data := testData(6*spindle.MaxBlockSize+11, 4)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)
	r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			buf := make([]byte, 100000)
			for j := range 40 {
				off := int64(j * len(buf))
				if g%2 == 1 {
					off = rand.Int64N(int64(len(data)))
				}
				n, err := r.ReadAt(buf, off)
				if err != nil && err != io.EOF {
					t.Error(err)
					return
				}
				if !bytes.Equal(buf[:n], data[min(off, int64(len(data))):min(off+int64(n), int64(len(data)))]) {
					t.Errorf("ReadAt(%d) returned wrong data", off)
					return
				}
			}
		})
	}
	wg.Wait()
	r.Close()
	if _, err := r.ReadAt(make([]byte, 1), 0); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("ReadAt after Close: %v, want Invalid", err)
	}
}

// TestRefOf checks refs against go-cid, the reference implementation.
func TestRefOf(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("x"), testData(1000, 3)} {
		sum := sha256.Sum256(data)
		mh := append([]byte{0x12, 0x20}, sum[:]...) // Multihash sha2-256.
		want := cid.NewCidV1(cid.Raw, mh).String()
		if got := RefOf(data); string(got) != want {
			t.Fatalf("RefOf = %s, go-cid says %s", got, want)
		}
		if d, err := refDigest(spindle.Ref(want)); err != nil || d != sum {
			t.Fatalf("refDigest(%s) = %x, %v", want, d, err)
		}
		for _, other := range []string{
			cid.NewCidV1(cid.DagProtobuf, mh).String(),
			cid.NewCidV0(mh).String(),
			strings.ToUpper(want),
			want[:len(want)-1] + "b", // Non-zero trailing bits.
			want + "a",
		} {
			if _, err := refDigest(spindle.Ref(other)); err == nil {
				t.Errorf("refDigest accepted %s", other)
			}
		}
	}
}
