package host

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// BenchmarkAppend measures signed appends through the client helper: sign,
// verify, check rights, write and (on disk) fsync, apply.
func BenchmarkAppend(b *testing.B) {
	for _, kind := range []string{"disk", "mem"} {
		b.Run(kind, func(b *testing.B) {
			var store Store = &MemStore{}
			if kind == "disk" {
				var err error
				if store, err = DiskStore(filepath.Join(b.TempDir(), "logs")); err != nil {
					b.Fatal(err)
				}
			}
			e := newEnv(b, store)
			c := e.as(ann)
			e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
			e.do(c.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nr: bob@example.com\n")))
			e.do(c.MakeDirectory(e.ctx, "ann@example.com/dir"))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/dir/f%d", i)), 4096)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkAppendBatch measures signed appends of independent entries in
// batches of 8 through the client helper, stored with one fsync a batch.
func BenchmarkAppendBatch(b *testing.B) {
	store, err := DiskStore(filepath.Join(b.TempDir(), "logs"))
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, store)
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/dir"))
	const batch = 8
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ds := make([]*spindle.DirEntry, batch)
		for j := range ds {
			ds[j] = file(spindle.PathName(fmt.Sprintf("ann@example.com/dir/f%d-%d", i, j)), 4096)
		}
		if _, errs := c.PutBatch(e.ctx, ds); errs[0] != nil || errs[batch-1] != nil {
			b.Fatal(errs)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkLookup measures a Lookup by a reader with read rights through an
// Access file, in a tree of 10,000 files. The sub-benchmarks: plain, the
// Lookup alone; proved, LookupProved (the same answer with its inclusion
// proof, entries and the cached signed head) and its encoding; verify, what
// the reader then does (decode, verify against the head's root, match the
// entry), with the bytes of a proof; whichaccess, WhichAccessProved of a
// file two directories down and its encoding, with its bytes.
func BenchmarkLookup(b *testing.B) {
	for _, mode := range []string{"plain", "proved", "verify", "whichaccess"} {
		b.Run(mode, func(b *testing.B) { benchLookup(b, mode) })
	}
}

func benchLookup(b *testing.B, mode string) {
	e := newEnv(b, &MemStore{})
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nr: bob@example.com\n")))
	const dirs, files = 100, 100
	for d := 0; d < dirs; d++ {
		e.do(c.MakeDirectory(e.ctx, spindle.PathName(fmt.Sprintf("ann@example.com/d%d", d))))
		for f := 0; f < files; f++ {
			e.do(c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/f%d", d, f)), 4096)))
		}
	}
	names := make([]spindle.PathName, 1024)
	for i := range names {
		names[i] = spindle.PathName(fmt.Sprintf("ann@example.com/d%d/f%d", (i*7)%dirs, (i*13)%files))
	}
	if _, err := e.s.Head(e.ctx, ann); err != nil {
		b.Fatal(err)
	}
	type answer struct {
		d     *spindle.DirEntry
		proof []byte
		head  *dirlog.Head
	}
	var answers []answer
	if mode == "verify" {
		for _, name := range names {
			d, pr, err := e.s.LookupProved(e.ctx, bob, name)
			if err != nil {
				b.Fatal(err)
			}
			answers = append(answers, answer{d, pr.Marshal(), pr.Head})
		}
	}
	var bytes int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		name := names[i%len(names)]
		switch mode {
		case "plain":
			if _, err := e.s.Lookup(e.ctx, bob, name); err != nil {
				b.Fatal(err)
			}
		case "proved":
			_, pr, err := e.s.LookupProved(e.ctx, bob, name)
			if err != nil {
				b.Fatal(err)
			}
			bytes += len(pr.Marshal())
		case "verify":
			a := answers[i%len(answers)]
			pr, err := dirlog.UnmarshalProved(a.proof)
			if err != nil {
				b.Fatal(err)
			}
			pr.Head = a.head
			if err := pr.Verify(); err != nil {
				b.Fatal(err)
			}
			if err := pr.Matches(a.d); err != nil {
				b.Fatal(err)
			}
			bytes += len(a.proof)
		case "whichaccess":
			_, ap, err := e.s.WhichAccessProved(e.ctx, bob, name)
			if err != nil {
				b.Fatal(err)
			}
			bytes += len(ap.Found.Marshal())
			for _, pr := range ap.Absent {
				bytes += len(pr.Marshal())
			}
		}
	}
	if bytes > 0 {
		b.ReportMetric(float64(bytes)/float64(b.N), "proof-bytes/op")
	}
}

// BenchmarkReplay measures opening a server on a disk log of 2,000
// entries: read, re-verify every signature and right, fold.
func BenchmarkReplay(b *testing.B) {
	store, err := DiskStore(filepath.Join(b.TempDir(), "logs"))
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, store)
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	e.do(c.Put(e.ctx, control("ann@example.com/Access", "*: ann@example.com\nr: bob@example.com\n")))
	const n = 2000
	for i := 2; i < n; i++ {
		e.do(c.Put(e.ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 4096)))
	}
	e.s.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := New(e.ctx, store, Config{Keys: e.keys})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "entries/s")
}

// bringUpEntries is the length of the log BenchmarkBringUp opens; set
// SPINDLE_BRINGUP_ENTRIES to change it (10^6 takes minutes to build and
// to replay on a 2-core machine).
func bringUpEntries() int {
	if n, err := strconv.Atoi(os.Getenv("SPINDLE_BRINGUP_ENTRIES")); err == nil && n > 0 {
		return n
	}
	return 100_000
}

// BenchmarkBringUp measures a dir host's start-up on one user's log of
// bringUpEntries entries, puts that overwrite 1,000 files in 10
// directories again and again: replay, from entry 1, re-checking every
// entry (signature, chain, rights); checkpoint, from a checkpoint of the
// tree (its 1,011 items' signatures and map root checked) and no entry
// after it.
func BenchmarkBringUp(b *testing.B) {
	n := bringUpEntries()
	whole := &MemStore{}
	e := newEnv(b, whole)
	c := e.as(ann)
	e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
	for d := range 10 {
		e.do(c.MakeDirectory(e.ctx, spindle.PathName(fmt.Sprintf("ann@example.com/d%d", d))))
	}
	const batch = 64
	for i := 11; i < n; i += batch {
		var ds []*spindle.DirEntry
		for j := i; j < min(n, i+batch); j++ {
			ds = append(ds, file(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/f%d", j%10, j%1000)), int64(j%4096+1)))
		}
		if _, errs := c.PutBatch(e.ctx, ds); errs[0] != nil || errs[len(errs)-1] != nil {
			b.Fatal(errs)
		}
	}
	head, err := e.s.Head(e.ctx, ann)
	if err != nil {
		b.Fatal(err)
	}
	if head.Seq != int64(n) {
		b.Fatalf("log of %d entries, want %d", head.Seq, n)
	}
	compacted := &MemStore{}
	compacted.SetBytes(ann, whole.Bytes(ann))
	s, err := New(e.ctx, compacted, Config{Keys: e.keys, Host: e.host, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.Compact(e.ctx, ann); err != nil {
		b.Fatal(err)
	}
	s.Close()
	e.s.Close()
	for _, tc := range []struct {
		name  string
		store *MemStore
	}{{"replay", whole}, {"checkpoint", compacted}} {
		b.Run(tc.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s, err := New(e.ctx, tc.store, Config{Keys: e.keys, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				h, err := s.Head(e.ctx, ann)
				if err != nil || h.Seq != head.Seq || h.Root != head.Root {
					b.Fatalf("head after bring-up: %v %v", h, err)
				}
				s.Close()
			}
			b.ReportMetric(float64(len(tc.store.Bytes(ann))), "log-bytes")
		})
	}
}
