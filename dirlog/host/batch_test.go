package host

import (
	"context"
	"fmt"
	"regexp"
	"sync"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// hookStore wraps a Store to record how many records each Log.Append
// stores, and to let a test hold or fail appends.
type hookStore struct {
	Store
	mu      sync.Mutex
	appends []int        // Records per Append call, in order.
	before  func() error // If set, runs before each Append; an error fails it.
}

func (s *hookStore) Open(ctx context.Context, u spindle.UserName) (Log, error) {
	l, err := s.Store.Open(ctx, u)
	if err != nil {
		return nil, err
	}
	return &hookLog{Log: l, s: s}, nil
}

func (s *hookStore) calls() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.appends...)
}

type hookLog struct {
	Log
	s *hookStore
}

func (l *hookLog) Append(ctx context.Context, recs ...[]byte) error {
	l.s.mu.Lock()
	before := l.s.before
	l.s.mu.Unlock()
	if before != nil {
		if err := before(); err != nil {
			return err
		}
	}
	if err := l.Log.Append(ctx, recs...); err != nil {
		return err
	}
	l.s.mu.Lock()
	l.s.appends = append(l.s.appends, len(recs))
	l.s.mu.Unlock()
	return nil
}

func files(prefix string, n int) []*spindle.DirEntry {
	var ds []*spindle.DirEntry
	for i := range n {
		ds = append(ds, file(spindle.PathName(fmt.Sprintf("%s%d", prefix, i)), 10))
	}
	return ds
}

func wantNoErrs(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
	}
}

// TestPutBatchGroupCommit checks that independent entries are stored with
// one append of the log, that the tree and its replay hold them all with
// consecutive sequence numbers, and that dependent ones are stored apart.
func TestPutBatchGroupCommit(t *testing.T) {
	for _, k := range storeKinds() {
		t.Run(k.name, func(t *testing.T) {
			hs := &hookStore{Store: k.new(t)}
			e := newEnv(t, hs)
			e.setup()
			c := e.as(ann)
			before := len(hs.calls())

			outs, errs := c.PutBatch(e.ctx, files("ann@example.com/docs/f", 20))
			wantNoErrs(t, errs)
			for i, d := range outs {
				if want := int64(6 + i); d == nil || d.Sequence != want || d.Writer != ann {
					t.Fatalf("entry %d = %+v, want sequence %d", i, d, want)
				}
			}
			if got := hs.calls()[before:]; len(got) != 1 || got[0] != 20 {
				t.Fatalf("20 independent entries stored by appends of %v records, want one of 20", got)
			}

			// A directory and a file in it, an Access file, and a rename
			// each depend on what comes before them.
			before = len(hs.calls())
			_, errs = c.PutBatch(e.ctx, []*spindle.DirEntry{
				{Name: "ann@example.com/new", Attr: spindle.AttrDirectory},
				file("ann@example.com/new/a", 1),
				file("ann@example.com/new/b", 1),
				control("ann@example.com/new/Access", "*: ann@example.com\nr: bob@example.com\n"),
				file("ann@example.com/new/c", 1),
			})
			wantNoErrs(t, errs)
			if got := hs.calls()[before:]; fmt.Sprint(got) != "[1 2 1 1]" {
				t.Fatalf("dependent entries stored by appends of %v records, want [1 2 1 1]", got)
			}
			d := e.do(e.as(bob).Lookup(e.ctx, "ann@example.com/new/c"))
			if d.Sequence != 30 {
				t.Fatalf("new/c = %+v, want sequence 30", d)
			}

			want := e.dump(ann)
			e.reopen()
			if got := e.dump(ann); got != want {
				t.Fatalf("replay differs:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestPutBatchSameAsPuts checks that a batch leaves the tree as the same
// entries put one at a time do, including the errors.
func TestPutBatchSameAsPuts(t *testing.T) {
	batch := []*spindle.DirEntry{
		file("ann@example.com/docs/x", 1),
		file("ann@example.com/no/such/dir/y", 1),                    // NotExist
		{Name: "ann@example.com/docs", Attr: spindle.AttrDirectory}, // Exist
		file("ann@example.com/docs/a.txt", 7),                       // Replaces.
		file("ann@example.com/docs/sub", 1),                         // IsDir
		{Name: "ann@example.com/docs/l", Attr: spindle.AttrLink, Link: "ann@example.com/docs/x"},
		file("ann@example.com/docs/l/under", 1), // NotDir: crosses the link.
		file("ann@example.com/docs/z", 1),
	}
	one := newEnv(t, &MemStore{})
	one.setup()
	var wantErrs []string
	for _, d := range batch {
		_, err := one.as(ann).Put(one.ctx, d)
		wantErrs = append(wantErrs, fmt.Sprint(spindle.KindOf(err)))
	}
	many := newEnv(t, &MemStore{})
	many.setup()
	_, errs := many.as(ann).PutBatch(many.ctx, batch)
	for i, err := range errs {
		if got := fmt.Sprint(spindle.KindOf(err)); got != wantErrs[i] {
			t.Errorf("entry %d (%s): error %v, want kind %s", i, batch[i].Name, err, wantErrs[i])
		}
	}
	head := regexp.MustCompile(`head=[0-9a-f]+`)
	if got, want := head.ReplaceAllString(many.dump(ann), ""), head.ReplaceAllString(one.dump(ann), ""); got != want {
		t.Fatalf("batch made\n%s\nputs one at a time made\n%s", got, want)
	}
}

// TestAppendBatchStopsAtFirstRefusal checks Server.AppendBatch directly:
// it appends the prefix before a refused entry and tries nothing after it.
func TestAppendBatchStopsAtFirstRefusal(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	h := e.do2head(e.s.Head(e.ctx, ann))
	signer := e.signers[ann]
	chain := func(names ...string) []*dirlog.Entry {
		var es []*dirlog.Entry
		seq, prev := h.Seq, h.Hash
		for _, n := range names {
			en := &dirlog.Entry{Seq: seq + 1, Prev: prev, Time: spindle.Now(), Op: dirlog.OpPut, Writer: ann, Entry: *file(spindle.PathName(n), 1)}
			en.Entry.Sequence = en.Seq
			if err := en.Sign(signer); err != nil {
				t.Fatal(err)
			}
			es = append(es, en)
			seq, prev = en.Seq, en.Hash()
		}
		return es
	}

	es := chain("ann@example.com/docs/p", "ann@example.com/nodir/q", "ann@example.com/docs/r")
	out, err := e.s.AppendBatch(e.ctx, es)
	wantKind(t, err, spindle.NotExist, "second entry")
	if len(out) != 1 || out[0].Name != "ann@example.com/docs/p" {
		t.Fatalf("appended %v, want the first entry only", out)
	}

	// An entry whose signature does not verify.
	h = e.do2head(e.s.Head(e.ctx, ann))
	es = chain("ann@example.com/docs/s", "ann@example.com/docs/t")
	es[1].Entry.Size = 2
	es[1].Entry.Blocks[0].Size = 2
	out, err = e.s.AppendBatch(e.ctx, es)
	wantKind(t, err, spindle.Integrity, "altered entry")
	if len(out) != 1 {
		t.Fatalf("appended %d entries, want 1", len(out))
	}

	// An entry that does not follow the one before it.
	h = e.do2head(e.s.Head(e.ctx, ann))
	es = chain("ann@example.com/docs/u", "ann@example.com/docs/v")
	es = append(es, chain("ann@example.com/docs/w")...)
	out, err = e.s.AppendBatch(e.ctx, es)
	wantKind(t, err, spindle.Transient, "entry off the chain")
	if len(out) != 2 {
		t.Fatalf("appended %d entries, want 2", len(out))
	}

	// Entries of two trees.
	h = e.do2head(e.s.Head(e.ctx, ann))
	es = chain("ann@example.com/docs/w")
	other := *es[0]
	other.Entry.Name = "bob@example.com/x"
	out, err = e.s.AppendBatch(e.ctx, append(es, &other))
	wantKind(t, err, spindle.Invalid, "second tree")
	if len(out) != 1 {
		t.Fatalf("appended %d entries, want 1", len(out))
	}

	es = make([]*dirlog.Entry, dirlog.MaxBatch+1)
	_, err = e.s.AppendBatch(e.ctx, es)
	wantKind(t, err, spindle.Invalid, "oversized batch")
}

func (e *env) do2head(h *dirlog.Head, err error) *dirlog.Head {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	return h
}

// TestAppendBatchVisibleWhenDurable checks that readers see a batch only
// after the log has stored it, and never if storing it failed.
func TestAppendBatchVisibleWhenDurable(t *testing.T) {
	hs := &hookStore{Store: &MemStore{}}
	e := newEnv(t, hs)
	e.setup()
	entered, release := make(chan struct{}), make(chan error)
	hs.mu.Lock()
	hs.before = func() error {
		entered <- struct{}{}
		return <-release
	}
	hs.mu.Unlock()

	check := func(wantSeq int64, wantFound bool) {
		t.Helper()
		h := e.do2head(e.s.Head(e.ctx, ann))
		if h.Seq != wantSeq {
			t.Fatalf("head at %d, want %d", h.Seq, wantSeq)
		}
		_, err := e.as(ann).Lookup(e.ctx, "ann@example.com/docs/f1")
		if found := err == nil; found != wantFound {
			t.Fatalf("lookup of a batched file: %v, want found %v", err, wantFound)
		}
	}
	for _, fail := range []bool{true, false} {
		done := make(chan []error)
		go func() {
			_, errs := e.as(ann).PutBatch(e.ctx, files("ann@example.com/docs/f", 3))
			done <- errs
		}()
		<-entered
		check(5, false) // Stored but not yet durable: invisible.
		if fail {
			// Fail this append and the ones for the entries left.
			release <- spindle.E(spindle.IO, "disk on fire")
			var errs []error
			for errs == nil {
				select {
				case <-entered:
					release <- spindle.E(spindle.IO, "disk on fire")
				case errs = <-done:
				}
			}
			for i, err := range errs {
				wantKind(t, err, spindle.IO, fmt.Sprintf("entry %d of a batch whose sync failed", i))
			}
			check(5, false)
			continue
		}
		release <- nil
		wantNoErrs(t, <-done)
		check(8, true)
	}
}

// TestPutBatchConcurrent has several clients of one tree put batches at
// once: every entry must land exactly once.
func TestPutBatchConcurrent(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	e.do(e.as(ann).Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com bob@example.com\n")))
	var wg sync.WaitGroup
	for w, u := range []spindle.UserName{ann, ann, bob, bob} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := e.as(u)
			for b := range 5 {
				_, errs := c.PutBatch(e.ctx, files(fmt.Sprintf("ann@example.com/docs/w%d-b%d-", w, b), 10))
				for i, err := range errs {
					if err != nil {
						t.Errorf("worker %d batch %d entry %d: %v", w, b, i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	es, err := e.as(ann).Glob(e.ctx, "ann@example.com/docs/w*")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 200 {
		t.Fatalf("%d files, want 200", len(es))
	}
	h := e.do2head(e.s.Head(e.ctx, ann))
	if h.Seq != 6+200 {
		t.Fatalf("head at %d, want %d", h.Seq, 6+200)
	}
}
