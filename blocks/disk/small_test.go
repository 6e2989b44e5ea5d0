package disk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
)

func smallBlock(i int) []byte { return blockstest.Block(uint64(i), 1+(i*977)%(smallMax-1)) }

func mustOpen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// lastSegment returns the name of the segment appended to.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, smallDir, "*.seg"))
	if len(m) == 0 {
		t.Fatal("no segment")
	}
	return m[len(m)-1]
}

// Small blocks put concurrently are all there after a reopen, listed once
// each, in segments rather than files of their own.
func TestSmallConcurrentAndReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	var wg sync.WaitGroup
	refs := make([]spindle.Ref, 400)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < len(refs); i += 16 {
				ref, err := s.Put(ctx, smallBlock(i))
				if err != nil {
					t.Error(err)
					return
				}
				refs[i] = ref
			}
		})
	}
	wg.Wait()
	s.Close()
	s = mustOpen(t, dir)
	defer s.Close()
	for i, ref := range refs {
		got, err := s.Get(ctx, ref)
		if err != nil || !bytes.Equal(got, smallBlock(i)) {
			t.Fatalf("block %d after reopen: %v", i, err)
		}
		d, _ := blocks.ParseRef(ref)
		if _, err := os.Stat(s.Path(d)); !os.IsNotExist(err) {
			t.Fatalf("small block %d has a file of its own: %v", i, err)
		}
	}
	seen := map[spindle.Ref]int{}
	s.List(ctx, func(r spindle.Ref) error { seen[r]++; return nil })
	if len(seen) != len(refs) {
		t.Fatalf("List found %d blocks, want %d", len(seen), len(refs))
	}
	for r, n := range seen {
		if n != 1 {
			t.Fatalf("List gave %s %d times", r, n)
		}
	}
}

// A record whose data rots is reported as Integrity, dropped, stays
// dropped after a reopen, and comes back with a new Put.
func TestSmallCorruptRecord(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	data := smallBlock(5)
	other := smallBlock(6)
	ref, _ := s.Put(ctx, data)
	oref, _ := s.Put(ctx, other)
	seg := lastSegment(t, dir)
	b, _ := os.ReadFile(seg)
	i := bytes.Index(b, data)
	if i < 0 {
		t.Fatal("block not found in its segment")
	}
	b[i+len(data)/2] ^= 0x10
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("Get of a rotten record: %v, want Integrity", err)
	}
	if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get after the record was dropped: %v, want NotExist", err)
	}
	s.Close()
	s = mustOpen(t, dir)
	if _, err := s.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Get after reopen: %v, want NotExist", err)
	}
	if got, err := s.Get(ctx, oref); err != nil || !bytes.Equal(got, other) {
		t.Fatalf("the neighbouring block: %v", err)
	}
	if _, err := s.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = mustOpen(t, dir)
	defer s.Close()
	if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get after a new Put and reopen: %v", err)
	}
}

// A torn append (a crash in the middle of a record) is cut at Open; every
// whole record before it stays, and appending goes on after it.
func TestSmallTornTail(t *testing.T) {
	ctx := context.Background()
	for _, tear := range []func(rec []byte) []byte{
		func(rec []byte) []byte { return rec[:10] },                  // Part of a header.
		func(rec []byte) []byte { return rec[:recordHeader+3] },      // Header and part of the data.
		func(rec []byte) []byte { rec[len(rec)-1] ^= 1; return rec }, // Whole, but not what was written.
		func(rec []byte) []byte { return []byte("garbage after the last record") },
	} {
		dir := t.TempDir()
		s := mustOpen(t, dir)
		var refs []spindle.Ref
		for i := range 10 {
			ref, _ := s.Put(ctx, smallBlock(i))
			refs = append(refs, ref)
		}
		s.Close()
		seg := lastSegment(t, dir)
		fi, _ := os.Stat(seg)
		d, _ := blocks.ParseRef(blocks.RefOf(smallBlock(99)))
		rec := tear(appendRecord(nil, d, smallBlock(99), uint32(len(smallBlock(99)))))
		f, _ := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
		f.Write(rec)
		f.Close()

		s = mustOpen(t, dir)
		if fi2, _ := os.Stat(seg); fi2.Size() != fi.Size() {
			t.Fatalf("torn tail not cut: segment is %d bytes, was %d", fi2.Size(), fi.Size())
		}
		ref, err := s.Put(ctx, smallBlock(10))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
		s.Close()
		s = mustOpen(t, dir)
		for i, ref := range refs {
			if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, smallBlock(i)) {
				t.Fatalf("block %d after a torn append: %v", i, err)
			}
		}
		s.Close()
	}
}

// Deletes survive a reopen; segments roll over at segmentMax and are all
// read back; damage in an older segment hides only what follows it and is
// reported.
func TestSmallDeleteRotateDamage(t *testing.T) {
	ctx := context.Background()
	defer func(old int64) { segmentMax = old }(segmentMax)
	segmentMax = 20 << 10
	dir := t.TempDir()
	s := mustOpen(t, dir)
	var refs []spindle.Ref
	for i := range 60 {
		ref, err := s.Put(ctx, blockstest.Block(uint64(i), 1000))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if err := s.Delete(ctx, refs[3]); err != nil {
		t.Fatal(err)
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, smallDir, "*.seg"))
	if len(segs) < 3 {
		t.Fatalf("%d segments for 60 KB in segments of 20 KiB", len(segs))
	}
	s = mustOpen(t, dir)
	for i, ref := range refs {
		_, err := s.Get(ctx, ref)
		if i == 3 {
			if !errors.Is(err, spindle.NotExist) {
				t.Fatalf("deleted block after reopen: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("block %d after reopen: %v", i, err)
		}
	}
	if len(s.Damage()) != 0 {
		t.Fatalf("damage in sound segments: %v", s.Damage())
	}
	s.Close()

	b, _ := os.ReadFile(segs[0])
	b[recordHeader+1000] ^= 0xFF // The magic of the second record.
	os.WriteFile(segs[0], b, 0o600)
	s = mustOpen(t, dir)
	defer s.Close()
	if len(s.Damage()) != 1 {
		t.Fatalf("damage = %v, want one report", s.Damage())
	}
	if _, err := s.Get(ctx, refs[0]); err != nil {
		t.Fatalf("block before the damage: %v", err)
	}
	if _, err := s.Get(ctx, refs[1]); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("block after the damage: %v, want NotExist", err)
	}
	if _, err := s.Get(ctx, refs[59]); err != nil {
		t.Fatalf("block in a later segment: %v", err)
	}
}

// A broken header in the middle of the last segment is damage, not a torn
// append: the segment is kept as it is (nothing after the damage is cut
// away) and new blocks go to a new segment.
func TestSmallDamagedLastSegmentKept(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := mustOpen(t, dir)
	var refs []spindle.Ref
	for i := range 5 {
		ref, _ := s.Put(ctx, blockstest.Block(uint64(i), 500))
		refs = append(refs, ref)
	}
	s.Close()
	seg := lastSegment(t, dir)
	b, _ := os.ReadFile(seg)
	b[recordHeader+500] ^= 0xFF // The second record's magic.
	os.WriteFile(seg, b, 0o600)
	s = mustOpen(t, dir)
	if len(s.Damage()) != 1 {
		t.Fatalf("damage = %v, want one report", s.Damage())
	}
	if fi, _ := os.Stat(seg); fi.Size() != int64(len(b)) {
		t.Fatalf("damaged segment cut from %d to %d bytes", len(b), fi.Size())
	}
	ref, err := s.Put(ctx, blockstest.Block(9, 500))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if lastSegment(t, dir) == seg {
		t.Fatal("appends went on in the damaged segment")
	}
	s = mustOpen(t, dir)
	defer s.Close()
	for _, r := range []spindle.Ref{refs[0], ref} {
		if _, err := s.Get(ctx, r); err != nil {
			t.Fatalf("Get %s: %v", r, err)
		}
	}
}

// FuzzSegment opens a store whose only segment holds arbitrary bytes: it
// must not panic, and every block it then serves matches its record's CRC
// or its digest.
func FuzzSegment(f *testing.F) {
	var d blocks.Digest
	rec := appendRecord(nil, d, []byte("data"), 4)
	f.Add(rec)
	f.Add(append(rec, rec[:10]...))
	f.Add(appendRecord(rec, d, nil, tombstone))
	f.Add([]byte("spS1"))
	f.Add([]byte("spS2"))
	f.Fuzz(func(t *testing.T, seg []byte) {
		// On tmpfs where there is one: each run syncs files, and on a
		// busy disk a sync can stall long enough for the fuzzer to call
		// the run hung.
		dir, err := os.MkdirTemp("/dev/shm", "fuzzseg-")
		if err != nil {
			dir = t.TempDir()
		} else {
			defer os.RemoveAll(dir)
		}
		os.MkdirAll(filepath.Join(dir, smallDir), 0o700)
		if err := os.WriteFile(filepath.Join(dir, smallDir, "00000000.seg"), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := openSmall(spindle.OS, dir)
		if err != nil {
			return
		}
		defer s.close()
		for d := range s.index {
			if _, err := s.get(d, nil); err != nil && err != errCorrupt {
				t.Fatalf("get of an indexed block: %v", err)
			}
		}
		if _, err := s.append(d, []byte("more"), 4, nil); err != nil {
			t.Fatalf("append after open: %v", err)
		}
	})
}

// Racing Puts and Deletes of one block leave the index agreeing with the
// segments: what a Get saw before a restart, it sees after.
func TestSmallPutDeleteRace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := smallBlock(42)
	ref := blocks.RefOf(data)
	for i := range 30 {
		s := mustOpen(t, dir)
		var wg sync.WaitGroup
		wg.Go(func() { s.Put(ctx, data) })
		wg.Go(func() { s.Delete(ctx, ref) })
		wg.Wait()
		_, before := s.Get(ctx, ref)
		s.Close()
		s = mustOpen(t, dir)
		_, after := s.Get(ctx, ref)
		s.Close()
		if (before == nil) != (after == nil) {
			t.Fatalf("round %d: before a restart Get said %v, after it %v", i, before, after)
		}
	}
}

// A flipped byte in a record's digest no longer files the block under a
// wrong hash: the header's check catches it, in the last segment and in
// the older ones whose headers alone are read, and the block, whose data
// is sound, is served under its own digest, with the damage reported.
// Records of the first form, without a header check, are still read.
func TestSmallDamagedDigest(t *testing.T) {
	ctx := context.Background()
	defer func(old int64) { segmentMax = old }(segmentMax)
	segmentMax = 2000
	dir := t.TempDir()
	s := mustOpen(t, dir)
	var refs []spindle.Ref
	for i := range 6 {
		ref, err := s.Put(ctx, blockstest.Block(uint64(i), 500))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	s.Close()
	segs, _ := filepath.Glob(filepath.Join(dir, smallDir, "*.seg"))
	if len(segs) < 2 {
		t.Fatalf("%d segments", len(segs))
	}
	for _, seg := range []string{segs[0], segs[len(segs)-1]} {
		b, _ := os.ReadFile(seg)
		b[10] ^= 0x01 // In the first record's digest.
		os.WriteFile(seg, b, 0o600)
	}
	s = mustOpen(t, dir)
	if len(s.Damage()) != 2 {
		t.Fatalf("damage = %v, want a report for each segment", s.Damage())
	}
	for i, ref := range refs {
		if _, err := s.Get(ctx, ref); err != nil {
			t.Fatalf("block %d after its digest was damaged on disk: %v", i, err)
		}
	}
	s.Close()

	// A segment of the first form.
	d := blocks.Digest(sha256.Sum256([]byte("old form")))
	rec := append([]byte(nil), recordMagic1[:]...)
	rec = append(rec, d[:]...)
	rec = binary.BigEndian.AppendUint32(rec, 8)
	rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum([]byte("old form"), castagnoli))
	rec = append(rec, "old form"...)
	if err := os.WriteFile(filepath.Join(dir, smallDir, "00000000.seg"), rec, 0o600); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir)
	defer s.Close()
	if got, err := s.Get(ctx, d.Ref()); err != nil || string(got) != "old form" {
		t.Fatalf("a record of the first form: %q, %v", got, err)
	}
}
