package dirlog

import (
	"fmt"
	"path/filepath"
	"testing"

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
		head  *Head
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
			pr, err := UnmarshalProved(a.proof)
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
