package host

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// version returns a file entry whose one block is named ref.
func version(name spindle.PathName, ref string) *spindle.DirEntry {
	d := file(name, 10)
	d.Blocks[0].Ref = spindle.Ref(ref)
	return d
}

// TestKeepWindow checks retention: the blocks of every state inside the
// window are leased, and only those; compaction folds only what is older
// than the window, so every state inside it stays readable and provable,
// also after the host restarts; once the window has passed, both behave
// as they do without one.
func TestKeepWindow(t *testing.T) {
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	const keep = time.Hour
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	open := func() {
		s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler),
			Retain: func(_ context.Context, u spindle.UserName) (time.Duration, []int64) {
				if u == ann {
					return keep, nil
				}
				return 0, nil
			},
			Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		e.s = s
	}
	open()
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X1")))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X2")))
	e.do(c.Put(e.ctx, version("ann@example.com/y", "Y1")))
	time.Sleep(20 * time.Millisecond)
	endA := time.Now()
	floor := e.do(c.Lookup(e.ctx, "ann@example.com/y")).Sequence
	time.Sleep(20 * time.Millisecond)
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X3")))
	e.do(c.Delete(e.ctx, "ann@example.com/y"))
	e.do(c.Rename(e.ctx, "ann@example.com/x", "ann@example.com/z"))
	// Bob's tree keeps no versions: his overwritten file goes.
	b := e.as(bob)
	e.do(b.MakeDirectory(e.ctx, "bob@example.com/"))
	e.do(b.Put(e.ctx, version("bob@example.com/f", "B1")))
	e.do(b.Put(e.ctx, version("bob@example.com/f", "B2")))

	refs := func() map[spindle.UserName][]string {
		t.Helper()
		out := make(map[spindle.UserName][]string)
		if _, err := e.s.Refs(e.ctx, func(u spindle.UserName, refs []spindle.Ref) error {
			for _, r := range refs {
				out[u] = append(out[u], string(r))
			}
			slices.Sort(out[u])
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := func(what string, got map[spindle.UserName][]string, a, b []string) {
		t.Helper()
		if !slices.Equal(got[ann], a) || !slices.Equal(got[bob], b) {
			t.Fatalf("%s: leased ann %v, bob %v; want ann %v, bob %v", what, got[ann], got[bob], a, b)
		}
	}

	// Everything is inside the window.
	want("all inside the window", refs(), []string{"X1", "X2", "X3", "Y1"}, []string{"B2"})
	head, err := e.s.Head(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := e.s.Compact(e.ctx, ann)
	if err != nil || cp != nil {
		t.Fatalf("compacting a log wholly inside its window: checkpoint %v, %v; want none", cp, err)
	}
	if es, err := e.s.Entries(e.ctx, ann, ann, 1, 100); err != nil || int64(len(es)) != head.Seq {
		t.Fatalf("entries after a compaction inside the window: %d, %v; want %d", len(es), err, head.Seq)
	}

	// The window starts after the first group: X1, overwritten before
	// it, goes; X2 and Y1, in the tree at its start, stay.
	set(endA.Add(keep))
	want("window from the first group's end", refs(), []string{"X2", "X3", "Y1"}, []string{"B2"})
	cp, err = e.s.Compact(e.ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil || cp.Seq != floor {
		t.Fatalf("checkpoint at %v, want at the window's start, %d", cp, floor)
	}
	check := func(what string) {
		t.Helper()
		got, err := e.s.Checkpoint(e.ctx, ann, ann)
		if err != nil || got == nil || got.Seq != floor {
			t.Fatalf("%s: checkpoint %v, %v", what, got, err)
		}
		tail, err := e.s.Entries(e.ctx, ann, ann, floor+1, 100)
		if err != nil || int64(len(tail)) != head.Seq-floor {
			t.Fatalf("%s: %d entries after the checkpoint, %v; want %d", what, len(tail), err, head.Seq-floor)
		}
		h, err := e.s.Head(e.ctx, ann)
		if err != nil {
			t.Fatal(err)
		}
		if h.Seq != head.Seq || h.Root != head.Root {
			t.Fatalf("%s: head %d %s, want %d %s", what, h.Seq, h.Root, head.Seq, head.Root)
		}
		if err := got.Verify(e.ctx, e.keys, nil, e.host); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := dirlog.CheckLogFrom(got, tail, h); err != nil {
			t.Fatalf("%s: CheckLogFrom: %v", what, err)
		}
		// The state at the window's start folds from the checkpoint.
		tr, err := got.Fold()
		if err != nil {
			t.Fatal(err)
		}
		if n := tr.Lookup("ann@example.com/y"); n == nil || n.Entry.Blocks[0].Ref != "Y1" {
			t.Fatalf("%s: y at the window's start: %v", what, n)
		}
	}
	check("after compaction")
	e.s.Close()
	open()
	check("after a restart")
	want("after a restart", refs(), []string{"X2", "X3", "Y1"}, []string{"B2"})

	// The window has passed: only the current tree is kept, and the
	// whole log compacts.
	set(time.Now().Add(2 * keep))
	want("window passed", refs(), []string{"X3"}, []string{"B2"})
	if cp, err = e.s.Compact(e.ctx, ann); err != nil || cp == nil || cp.Seq != head.Seq {
		t.Fatalf("compaction after the window: %v, %v; want a checkpoint at %d", cp, err, head.Seq)
	}
}

// TestKeepHoldsCompactAfter checks that a log whose entries are all
// inside its window is not rewritten on every append once it passes
// CompactAfter, and is compacted when they leave it.
func TestKeepHoldsCompactAfter(t *testing.T) {
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler), CompactAfter: 3,
		Retain: func(context.Context, spindle.UserName) (time.Duration, []int64) { return time.Hour, nil }, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for i := range 8 {
		e.do(c.Put(e.ctx, file("ann@example.com/f", int64(i+1))))
		s.compactions()
	}
	if cp, _ := s.Checkpoint(e.ctx, ann, ann); cp != nil {
		t.Fatalf("checkpoint at %d with every entry inside the window", cp.Seq)
	}
	s.mu.RLock()
	l := s.logs[ann]
	s.mu.RUnlock()
	l.appendMu.Lock()
	held := s.due(l)
	l.appendMu.Unlock()
	if held {
		t.Fatal("a log wholly inside its window is due for compaction again at once")
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	e.do(c.Put(e.ctx, file("ann@example.com/g", 1)))
	s.compactions()
	cp, err := s.Checkpoint(e.ctx, ann, ann)
	if err != nil || cp == nil || cp.Seq != 10 {
		t.Fatalf("after the window passed: checkpoint %v, %v; want at 10", cp, err)
	}
}

// TestKeepWindowStorage measures what a window costs: a tree of 200
// files, of which 2 (1%) are replaced every day for 60 days, keeps the
// blocks of the 200 current files and of the 60 replaced in the last 30
// days, 1.3 times the tree (docs/performance.md). A day is 20 ms of the
// real clock, which entries' times follow.
func TestKeepWindowStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("sixty simulated days take over a second")
	}
	const (
		files, perDay, days, window = 200, 2, 60, 30
		day                         = 20 * time.Millisecond
	)
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler), CompactAfter: 50,
		Retain: func(context.Context, spindle.UserName) (time.Duration, []int64) { return window * day, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	name := func(i int) spindle.PathName { return spindle.PathName(fmt.Sprintf("ann@example.com/p%03d", i)) }
	for i := range files {
		e.do(c.Put(e.ctx, version(name(i), fmt.Sprintf("p%03d.0", i))))
	}
	next := 0
	var before, after []time.Time // Around each replacement.
	for d := 1; d <= days; d++ {
		time.Sleep(day)
		for range perDay {
			before = append(before, time.Now())
			e.do(c.Put(e.ctx, version(name(next%files), fmt.Sprintf("p%03d.%d", next%files, d))))
			after = append(after, time.Now())
			next++
		}
		s.compactions()
	}
	// The window starts window days before Refs runs, between start
	// and end; a replacement is inside it if its entry's time is after.
	start := time.Now().Add(-window * day)
	n := 0
	if _, err := s.Refs(e.ctx, func(u spindle.UserName, refs []spindle.Ref) error { n += len(refs); return nil }); err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(-window * day)
	// Each replacement inside the window keeps the version it replaced;
	// those before it keep nothing. On a busy machine a day lasts longer
	// than its sleep, so fewer fall inside.
	lo, hi := 0, 0
	for i := range before {
		if before[i].After(end) {
			lo++
		}
		if after[i].After(start) {
			hi++
		}
	}
	if n < files+lo || n > files+hi {
		t.Fatalf("%d blocks leased for a tree of %d files with %d to %d replacements inside the window; want that many more than the tree", n, files, lo, hi)
	}
	t.Logf("a %d-day window over a tree of %d files replacing %d a day: %d blocks leased, %.2f times the tree", window, files, perDay, n, float64(n)/files)
	cp, err := s.Checkpoint(e.ctx, ann, ann)
	if err != nil || cp == nil {
		t.Fatalf("no compaction in %d days: %v", days, err)
	}
	if age := time.Since(cp.Entries[len(cp.Entries)-1].Time.Go()); age < window*day {
		t.Fatalf("the checkpoint's last entry is %v old, inside the %v window", age, window*day)
	}
}

// TestPinKept checks named snapshots: with no window, the pinned state's
// blocks stay leased and compaction stops at it; once the pin is gone,
// both behave as with neither.
func TestPinKept(t *testing.T) {
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	var mu sync.Mutex
	var pins []int64
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler),
		Retain: func(context.Context, spindle.UserName) (time.Duration, []int64) {
			mu.Lock()
			defer mu.Unlock()
			return 0, pins
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X1")))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X2")))
	pin := e.do(c.Put(e.ctx, version("ann@example.com/y", "Y1"))).Sequence
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X3")))
	e.do(c.Delete(e.ctx, "ann@example.com/y"))
	leased := func() []string {
		var out []string
		if _, err := s.Refs(e.ctx, func(u spindle.UserName, refs []spindle.Ref) error {
			for _, r := range refs {
				out = append(out, string(r))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(out)
		return out
	}
	mu.Lock()
	pins = []int64{pin}
	mu.Unlock()
	if got := leased(); !slices.Equal(got, []string{"X2", "X3", "Y1"}) {
		t.Fatalf("leased with a pin at %d: %v, want X2 X3 Y1", pin, got)
	}
	cp, err := s.Compact(e.ctx, ann)
	if err != nil || cp == nil || cp.Seq != pin {
		t.Fatalf("compaction with a pin at %d: %v, %v; want a checkpoint there", pin, cp, err)
	}
	if d, _, err := s.LookupProvedAt(e.ctx, ann, "ann@example.com/y", pin, time.Time{}); err != nil || d.Blocks[0].Ref != "Y1" {
		t.Fatalf("the pinned state after compaction: %v, %v", d, err)
	}
	mu.Lock()
	pins = nil
	mu.Unlock()
	if got := leased(); !slices.Equal(got, []string{"X3"}) {
		t.Fatalf("leased after the pin went: %v, want X3", got)
	}
	if cp, err := s.Compact(e.ctx, ann); err != nil || cp == nil || cp.Seq != pin+2 {
		t.Fatalf("compaction after the pin went: %v, %v; want a checkpoint at %d", cp, err, pin+2)
	}
}

// TestKeepMoreRefs checks that the blocks Config.MoreRefs adds (an
// erasure-coded file's shards) are kept for past states as for the
// current one.
func TestKeepMoreRefs(t *testing.T) {
	st := &MemStore{}
	e := newEnv(t, st)
	e.s.Close()
	s, err := New(e.ctx, st, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler),
		Retain:   func(context.Context, spindle.UserName) (time.Duration, []int64) { return time.Hour, nil },
		MoreRefs: func(d *spindle.DirEntry) []spindle.Ref { return []spindle.Ref{d.Blocks[0].Ref + "-shard"} }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	e.s = s
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X1")))
	e.do(c.Put(e.ctx, version("ann@example.com/x", "X2")))
	var got []string
	if _, err := s.Refs(e.ctx, func(u spindle.UserName, refs []spindle.Ref) error {
		for _, r := range refs {
			got = append(got, string(r))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"X1", "X1-shard", "X2", "X2-shard"}; !slices.Equal(got, want) {
		t.Fatalf("leased %v, want %v", got, want)
	}
}
