package fsys_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client/fsys"
)

// orderClient is a client whose open files record the offsets they are
// read at.
type orderClient struct {
	spindle.Client
	mu   sync.Mutex
	offs []int64
}

func (c *orderClient) Open(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	f, err := c.Client.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &orderFile{File: f, c: c}, nil
}

type orderFile struct {
	spindle.File
	c *orderClient
}

func (f *orderFile) ReadAt(p []byte, off int64) (int, error) {
	f.c.mu.Lock()
	f.c.offs = append(f.c.offs, off)
	f.c.mu.Unlock()
	return f.File.ReadAt(p, off)
}

// TestSequentialReadInOrder reads a file of many blocks with dd through
// the mount, whose kernel sends several read requests at once, and checks
// that the client's reader was asked for its blocks in order, each once:
// the reader fetches ahead only while it is read in order.
func TestSequentialReadInOrder(t *testing.T) {
	env := inproc(t)
	c, err := env.Client(ann)
	check(t, err)
	ctx := context.Background()
	const blocks, files = 48, 3
	data := make([]byte, blocks*spindle.MaxBlockSize)
	rand.New(rand.NewSource(1)).Read(data)
	var entries []*spindle.DirEntry
	for i := range files {
		e, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/big%d", i)), bytes.NewReader(data), 0, nil)
		check(t, err)
		entries = append(entries, e)
	}
	oc := &orderClient{Client: c}
	dir := t.TempDir()
	// A block cache smaller than a block: every block comes from the
	// reader.
	m, err := fsys.Mount(dir, fsys.Config{Client: oc, CacheDir: t.TempDir(), CacheSize: 1, Timeout: 30 * time.Second, Logger: testLogger(t)})
	if err != nil {
		t.Skipf("cannot mount: %v", err)
	}
	defer m.Unmount()
	for i, e := range entries {
		oc.mu.Lock()
		oc.offs = nil
		oc.mu.Unlock()
		out, err := exec.Command("dd", "if="+filepath.Join(dir, "ann@example.com", fmt.Sprintf("big%d", i)), "bs=1M", "status=none").Output()
		check(t, err)
		if !bytes.Equal(out, data) {
			t.Fatalf("file %d: read %d bytes, not what was stored", i, len(out))
		}
		oc.mu.Lock()
		offs := append([]int64(nil), oc.offs...)
		oc.mu.Unlock()
		if len(offs) != len(e.Blocks) {
			t.Errorf("file %d: the reader was asked %d times for a file of %d blocks: %v", i, len(offs), len(e.Blocks), offs)
		}
		for j, off := range offs {
			if j < len(e.Blocks) && off != e.Blocks[j].Offset {
				t.Fatalf("file %d: read %d of the reader at %d, want block %d at %d: %v", i, j, off, j, e.Blocks[j].Offset, offs)
			}
		}
	}
}
