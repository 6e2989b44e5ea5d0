package disk

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
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

// Lent buffers come back through Recycle and serve later Gets correctly;
// a large file that is corrupt or overlong is caught on the O_DIRECT path
// as on the buffered one.
func TestRecycleAndLargeCorruption(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var datas [][]byte
	var refs []spindle.Ref
	for i := range 4 {
		data := bytes.Repeat([]byte{byte(i + 1)}, spindle.MaxBlockSize+16)
		ref, err := s.Put(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		datas, refs = append(datas, data), append(refs, ref)
	}
	for round := range 3 {
		for i, ref := range refs {
			got, err := s.Get(ctx, ref)
			if err != nil || !bytes.Equal(got, datas[i]) {
				t.Fatalf("round %d: Get block %d: %v (equal %v)", round, i, err, bytes.Equal(got, datas[i]))
			}
			s.Recycle(got)
		}
	}
	s.Recycle(make([]byte, 10)) // Not lent: ignored.

	d0, _ := blocks.ParseRef(refs[0])
	name := s.Path(d0)
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 2*directAlign+3))
	f.Close()
	if _, err := s.Get(ctx, refs[0]); !spindle.Match(spindle.E(spindle.Integrity), err) {
		t.Fatalf("Get of an overlong block file: %v, want Integrity", err)
	}
	if _, err := os.Stat(name); !os.IsNotExist(err) {
		t.Fatalf("overlong block file not removed: %v", err)
	}
	// It was moved aside for inspection, not deleted.
	if m, _ := filepath.Glob(filepath.Join(filepath.Dir(filepath.Dir(name)), CorruptDir, filepath.Base(name)+".*")); len(m) != 1 {
		t.Fatalf("corrupt block file not kept in %s: %v", CorruptDir, m)
	}

	d1, _ := blocks.ParseRef(refs[1])
	bad := bytes.Clone(datas[1])
	bad[len(bad)-1] ^= 1
	if err := os.WriteFile(s.Path(d1), bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, refs[1]); !spindle.Match(spindle.E(spindle.Integrity), err) {
		t.Fatalf("Get of a corrupt block file: %v, want Integrity", err)
	}
}
