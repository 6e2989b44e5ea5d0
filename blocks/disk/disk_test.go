package disk_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/disk"
)

func open(t testing.TB, dir string) *disk.Store {
	t.Helper()
	s, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSuite(t *testing.T) {
	blockstest.Test(t, func(t *testing.T) spindle.BlockStore { return open(t, t.TempDir()) })
}

// The same suite with buffered writes, the path a store takes on a file
// system that refuses O_DIRECT (tmpfs refuses it on older kernels only, so
// a test cannot count on finding one).
func TestSuiteBuffered(t *testing.T) {
	blockstest.Test(t, func(t *testing.T) spindle.BlockStore {
		s := open(t, t.TempDir())
		disk.Buffered(s)
		return s
	})
}

func digest(t *testing.T, ref spindle.Ref) blocks.Digest {
	t.Helper()
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A get for a reader that checks each block itself skips the CRC of a
// block file: a flipped bit is served as it is (the reader's hash
// catches it), and the reader's get again, unmarked, finds the damage
// and sets the file aside. What cannot be a block (a file with its size
// wrong, or without a trailer and not hashing right) is refused either
// way.
func TestGetForCheckingReaderSkipsCRC(t *testing.T) {
	ctx := context.Background()
	reader := blocks.WithCheckedByReader(ctx)
	data := blockstest.Block(8, disk.SmallMax+10000)
	s := open(t, t.TempDir())
	ref, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	name := s.Path(digest(t, ref))
	onDisk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(reader, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get for a checking reader of a sound file: %v, equal=%v", err, bytes.Equal(got, data))
	}
	rotten := bytes.Clone(onDisk)
	rotten[5000] ^= 0x40
	if err := os.WriteFile(name, rotten, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get(reader, ref)
	if err != nil || !bytes.Equal(got, rotten[:len(data)]) {
		t.Fatalf("Get for a checking reader of a rotten file = %d bytes, %v; want its bytes as stored, for the reader to check", len(got), err)
	}
	if _, err := os.Stat(name); err != nil {
		t.Fatalf("the file was moved by a get that did not check it: %v", err)
	}
	if got, err := s.Get(ctx, ref); !errors.Is(err, spindle.Integrity) || got != nil {
		t.Fatalf("the get again of a rotten file = %d bytes, %v; want Integrity", len(got), err)
	}
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("rotten file still present after the get again: %v", err)
	}
	// Without its trailer a file is hashed, for any reader.
	if _, err := s.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, rotten[:len(data)], 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(reader, ref); !errors.Is(err, spindle.Integrity) || got != nil {
		t.Fatalf("Get for a checking reader of a rotten file without its trailer = %d bytes, %v; want Integrity", len(got), err)
	}
}

func TestCorruptFile(t *testing.T) {
	ctx := context.Background()
	data := blockstest.Block(7, disk.SmallMax+10000) // Large enough for a file of its own.
	for _, tc := range []struct {
		name    string
		corrupt func([]byte) []byte
	}{
		{"flip", func(b []byte) []byte { b[5000] ^= 0x40; return b }},
		{"flip-last", func(b []byte) []byte { b[len(b)-1-disk.TrailerLen] ^= 1; return b }},
		{"truncate", func(b []byte) []byte { return b[:len(b)-1] }},
		{"truncate-block", func(b []byte) []byte { return disk.AppendTrailer(nil, b[:len(data)-1]) }},
		{"extend", func(b []byte) []byte { return append(b, 0) }},
		{"empty", func(b []byte) []byte { return nil }},
		{"huge", func(b []byte) []byte { return make([]byte, spindle.MaxStoredBlockSize+10) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, t.TempDir())
			ref, err := s.Put(ctx, data)
			if err != nil {
				t.Fatal(err)
			}
			name := s.Path(digest(t, ref))
			onDisk, err := os.ReadFile(name)
			if err != nil || !bytes.Equal(onDisk, disk.AppendTrailer(bytes.Clone(data), data)) {
				t.Fatalf("block file %s does not hold the block and its trailer: %v", name, err)
			}
			if err := os.WriteFile(name, tc.corrupt(onDisk), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, ref)
			if !errors.Is(err, spindle.Integrity) || got != nil {
				t.Fatalf("Get of a corrupt file = %d bytes, %v; want Integrity", len(got), err)
			}
			if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("corrupt file still present: %v", err)
			}
			if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
				t.Fatalf("Get after removal: %v, want NotExist", err)
			}
			if _, err := s.Put(ctx, data); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("Get after a new Put: %v", err)
			}
		})
	}
}

// A Put of a block whose file is present but corrupt replaces the file.
func TestPutRepairs(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	data := blockstest.Block(8, disk.SmallMax)
	ref, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	name := s.Path(digest(t, ref))
	if err := os.WriteFile(name, []byte("rotten bits"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, disk.AppendTrailer(bytes.Clone(data), data)) {
		t.Fatalf("file after Put holds %d bytes, %v; want the block and its trailer", len(got), err)
	}
}

// A file whose trailer alone is damaged, or that has none (as written
// before trailers existed), is served if its hash matches.
func TestTrailerDamageAndLegacyFiles(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	for _, n := range []int{disk.SmallMax, disk.SmallMax + 1, spindle.MaxStoredBlockSize - disk.TrailerLen, spindle.MaxStoredBlockSize} {
		data := blockstest.Block(uint64(n), n)
		ref, err := s.Put(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		name := s.Path(digest(t, ref))
		for _, tc := range []struct {
			name string
			file []byte
		}{
			{"crc flipped", func() []byte { f := disk.AppendTrailer(bytes.Clone(data), data); f[len(f)-1] ^= 1; return f }()},
			{"magic flipped", func() []byte { f := disk.AppendTrailer(bytes.Clone(data), data); f[len(data)] ^= 1; return f }()},
			{"no trailer", bytes.Clone(data)},
		} {
			if err := os.WriteFile(name, tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := s.Get(ctx, ref)
			if tc.name == "magic flipped" {
				// The trailer is no longer recognised, and the file with
				// its remains does not hash to the block.
				if !errors.Is(err, spindle.Integrity) {
					t.Fatalf("%d bytes, %s: Get = %v, want Integrity", n, tc.name, err)
				}
				if _, err := s.Put(ctx, data); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, %s: Get = %d bytes, %v; want the block", n, tc.name, len(got), err)
			}
			s.Recycle(got)
		}
	}
}

func TestStaleTempFilesRemoved(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	kept := blockstest.Block(9, disk.SmallMax)
	ref, err := s.Put(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Simulate a crash during a Put: a half-written temp file, and a stray
	// file in a fan-out directory that is not named like a block.
	stale := filepath.Join(dir, "tmp", "put-123456")
	if err := os.WriteFile(stale, []byte("half a blo"), 0o600); err != nil {
		t.Fatal(err)
	}
	stray := filepath.Join(filepath.Dir(s.Path(digest(t, ref))), "junk")
	if err := os.WriteFile(stray, []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temp file survived Open: %v", err)
	}
	var refs []spindle.Ref
	if err := s.List(ctx, func(r spindle.Ref) error { refs = append(refs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0] != ref {
		t.Fatalf("List = %v, want [%s]", refs, ref)
	}
	if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, kept) {
		t.Fatalf("Get after reopen: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil || len(ents) != 0 {
		t.Fatalf("tmp holds %d entries after a Put, err %v", len(ents), err)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, dir)
	if s, err := disk.Open(dir); !errors.Is(err, spindle.Exist) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("second Open of %s: %v, want Exist", dir, err)
	}
}

// Concurrent Gets of a corrupt block and Puts of the good one never lose
// the good copy once a Put has returned.
func TestCorruptRaceWithPut(t *testing.T) {
	ctx := context.Background()
	s := open(t, t.TempDir())
	data := blockstest.Block(3, disk.SmallMax+50000)
	ref, err := s.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	name := s.Path(digest(t, ref))
	for range 20 {
		if err := os.WriteFile(name, []byte("bad"), 0o600); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { s.Get(ctx, ref) })
		wg.Go(func() {
			if _, err := s.Put(ctx, data); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("Get after a racing Put: %v", err)
		}
	}
}

func BenchmarkPut(b *testing.B) {
	s := open(b, b.TempDir())
	ctx := context.Background()
	data := blockstest.Block(1, spindle.MaxBlockSize)
	b.SetBytes(int64(len(data)))
	i := uint64(0)
	for b.Loop() {
		i++
		data[0], data[1], data[2], data[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
		if _, err := s.Put(ctx, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s := open(b, b.TempDir())
	ctx := context.Background()
	var refs []spindle.Ref
	for i := range 64 {
		ref, err := s.Put(ctx, blockstest.Block(uint64(i), spindle.MaxBlockSize))
		if err != nil {
			b.Fatal(err)
		}
		refs = append(refs, ref)
	}
	b.SetBytes(spindle.MaxBlockSize)
	i := 0
	for b.Loop() {
		if _, err := s.Get(ctx, refs[i%len(refs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkPutParallel measures Puts with 16 in flight, as a node storing
// a large file does.
func BenchmarkPutParallel(b *testing.B) {
	s := open(b, b.TempDir())
	ctx := context.Background()
	b.SetBytes(spindle.MaxBlockSize)
	b.SetParallelism(8)
	var mu sync.Mutex
	seed := uint64(0)
	b.RunParallel(func(pb *testing.PB) {
		mu.Lock()
		seed++
		data := blockstest.Block(seed, spindle.MaxBlockSize)
		mu.Unlock()
		i := uint64(0)
		for pb.Next() {
			i++
			data[0], data[1], data[2], data[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			if _, err := s.Put(ctx, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
