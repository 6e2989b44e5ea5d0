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
// Access file, in a tree of 10,000 files; proved=true measures
// LookupProved instead: the same answer with its inclusion proof, entries
// and the (cached) signed head, encoded as a proof travels.
func BenchmarkLookup(b *testing.B) {
	for _, proved := range []bool{false, true} {
		b.Run(fmt.Sprintf("proved=%v", proved), func(b *testing.B) { benchLookup(b, proved) })
	}
}

func benchLookup(b *testing.B, proved bool) {
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
	b.ResetTimer()
	if _, err := e.s.Head(e.ctx, ann); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if !proved {
			if _, err := e.s.Lookup(e.ctx, bob, names[i%len(names)]); err != nil {
				b.Fatal(err)
			}
			continue
		}
		_, pr, err := e.s.LookupProved(e.ctx, bob, names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		_ = pr.Proof.Marshal()
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
