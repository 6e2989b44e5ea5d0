package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node"
)

// TestKeepWindowCompaction checks retention end to end through a node:
// the owner sets a window in the key record; the dir host compacts only
// the entries older than it, so every state inside it reads back (a file
// deleted after the window's start included, and restored) while one
// before it is NotExist, saying it was compacted; and the range
// Retention reports is the one that reads.
func TestKeepWindowCompaction(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a window of two seconds")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: testLogger(t), CompactAfter: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ann := dialAs(t, n, "ann@example.com")
	if err := ann.SetKeep(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if u, err := ann.lookupUser(ctx, ann.user, true); err != nil || u.Keep != 2 {
		t.Fatalf("key record after SetKeep(2s): %+v, %v", u, err)
	}
	put := func(name spindle.PathName, text string) {
		t.Helper()
		if _, err := ann.Put(ctx, name, strings.NewReader(text), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	seq := func() int64 {
		t.Helper()
		tr, err := ann.TreeAt(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return tr.Seq
	}
	// The first group, then a wait longer than the window.
	put("ann@example.com/doc", "one")
	before := seq()
	put("ann@example.com/doc", "two")
	put("ann@example.com/gone", "deleted later")
	floor := seq()
	time.Sleep(3 * time.Second)
	// The second group passes CompactAfter: the log is compacted up to
	// the first group's end, no further.
	if err := ann.Delete(ctx, "ann@example.com/gone"); err != nil {
		t.Fatal(err)
	}
	put("ann@example.com/doc", "three")
	put("ann@example.com/new", "new")
	head := seq()
	var r Retention
	deadline := time.Now().Add(30 * time.Second)
	for r.From == 0 && time.Now().Before(deadline) {
		if r, err = ann.Retention(ctx); err != nil {
			t.Fatal(err)
		}
		if r.From == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if r.From != floor || r.To != head || r.Keep != 2 {
		t.Fatalf("retained %+v; want from %d (the window's start) to %d, keep 2", r, floor, head)
	}
	read := func(at int64, name spindle.PathName) (string, error) {
		p, err := ann.PastAt(ctx, at, time.Time{})
		if err != nil {
			return "", err
		}
		f, err := p.Open(ctx, name)
		if err != nil {
			return "", err
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		return string(b), err
	}
	for _, tc := range []struct {
		at         int64
		name, want string
	}{
		{floor, "ann@example.com/doc", "two"},
		{floor, "ann@example.com/gone", "deleted later"},
		{floor + 1, "ann@example.com/doc", "two"},
		{head - 1, "ann@example.com/doc", "three"},
		{head, "ann@example.com/new", "new"},
	} {
		if got, err := read(tc.at, spindle.PathName(tc.name)); err != nil || got != tc.want {
			t.Errorf("%s at %d: %q, %v; want %q", tc.name, tc.at, got, err, tc.want)
		}
	}
	if _, err := read(before, "ann@example.com/doc"); !errors.Is(err, spindle.NotExist) || !strings.Contains(err.Error(), "compacted") {
		t.Errorf("doc at %d, before the window: %v; want NotExist saying it was compacted", before, err)
	}
	// The file deleted after the window's start is restored from it.
	p, err := ann.PastAt(ctx, floor, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := ann.Restore(ctx, p, "ann@example.com/gone", "ann@example.com/gone"); err != nil || res.Files != 1 {
		t.Fatalf("restore after compaction: %+v, %v", res, err)
	}
	mustRead(t, ann, "ann@example.com/gone", []byte("deleted later"))
}

// TestBulkImportThenRead: an owner who writes more entries than a step
// used to be checked for (16,384) without a read between, as a bulk
// import of a photo library does, reads her tree after: the step from the
// last signed head she saw is checked entry by entry, not refused.
func TestBulkImportThenRead(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 16,500 entries")
	}
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	ann := dialAs(t, n, "ann@example.com")
	if _, err := ann.MakeDirectory(ctx, "ann@example.com/import"); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Lookup(ctx, "ann@example.com/import", false); err != nil {
		t.Fatal(err) // A signed head: the anchor the step starts from.
	}
	const count, workers = 16_500, 8
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for k := range workers {
		wg.Go(func() {
			for i := k; i < count; i += workers {
				if _, err := ann.MakeDirectory(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/import/d%05d", i))); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Lookup(ctx, "ann@example.com/import/d16499", false); err != nil {
		t.Fatalf("lookup after a bulk import of %d entries: %v", count, err)
	}
	if _, err := ann.PastAt(ctx, -count, time.Time{}); err != nil {
		t.Fatalf("the state before the import: %v", err)
	}
}
