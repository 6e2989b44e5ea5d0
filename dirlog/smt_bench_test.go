package dirlog

import (
	"fmt"
	"runtime"
	"testing"

	"spindle.dev"
)

const benchMapItems = 100_000

// benchMap returns a map of 100,000 names spread over 1,000 directories,
// with the names' keys, and the heap bytes the map took.
func benchMap(b *testing.B) (*treeMap, []Hash, uint64) {
	b.Helper()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	m := &treeMap{}
	keys := make([]Hash, benchMapItems)
	for i := range keys {
		keys[i] = MapKey(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/f%d", i%1000, i)))
		m.Set(keys[i], testHash(fmt.Sprint(i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	return m, keys, ms1.HeapAlloc - ms0.HeapAlloc - uint64(len(keys))*32
}

// BenchmarkMapProof measures proofs in a map of 100,000 items: the size of
// encoded inclusion and exclusion proofs (mean and max over 100,000 of
// each), the time to make and encode one, and to decode and verify one.
func BenchmarkMapProof(b *testing.B) {
	m, keys, heap := benchMap(b)
	root := m.Root()
	absent := make([]Hash, len(keys))
	for i := range absent {
		absent[i] = MapKey(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/absent%d", i%1000, i)))
	}
	size := func(ks []Hash) (mean float64, max int) {
		total := 0
		for _, k := range ks {
			n := len(m.Prove(k).Marshal())
			total += n
			if n > max {
				max = n
			}
		}
		return float64(total) / float64(len(ks)), max
	}
	inMean, inMax := size(keys)
	exMean, exMax := size(absent)
	for _, c := range []struct {
		name     string
		ks       []Hash
		mean     float64
		max      int
		included bool
	}{{"inclusion", keys, inMean, inMax, true}, {"exclusion", absent, exMean, exMax, false}} {
		b.Run(c.name+"/prove", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				_ = m.Prove(c.ks[i%len(c.ks)]).Marshal()
			}
			b.ReportMetric(c.mean, "mean-bytes")
			b.ReportMetric(float64(c.max), "max-bytes")
			b.ReportMetric(float64(heap)/float64(len(keys)), "map-heap-bytes/item")
		})
		encs := make([][]byte, 1024)
		for i := range encs {
			encs[i] = m.Prove(c.ks[i]).Marshal()
		}
		b.Run(c.name+"/verify", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				j := i % len(encs)
				p, err := UnmarshalMapProof(encs[j])
				if err != nil {
					b.Fatal(err)
				}
				if c.included {
					v, _ := m.Get(c.ks[j])
					err = p.VerifyIncluded(root, c.ks[j], v)
				} else {
					err = p.VerifyAbsent(root, c.ks[j])
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMapUpdate measures setting a new item in, and deleting one
// from, a map of 100,000 items: what each put and delete adds to an append.
func BenchmarkMapUpdate(b *testing.B) {
	m, _, _ := benchMap(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := MapKey(spindle.PathName(fmt.Sprintf("ann@example.com/new%d", i)))
		m.Set(k, k)
		m.Delete(k)
	}
}

// BenchmarkApply measures folding put entries into a tree of 10,000 files,
// with the tree map kept and without it: the server-side cost of the map
// on an append, without the signature check and the fsync around it.
func BenchmarkApply(b *testing.B) {
	for _, withMap := range []bool{false, true} {
		b.Run(fmt.Sprintf("map=%v", withMap), func(b *testing.B) {
			t := NewTree(ann)
			if !withMap {
				t.Map = nil
			}
			var prev Hash
			seq := int64(0)
			add := func(op Operation, d *spindle.DirEntry) {
				seq++
				d.Sequence = seq
				d.Writer = ann
				e := &Entry{Seq: seq, Prev: prev, Op: op, Writer: ann, Entry: *d, Sig: []byte("sig")}
				t.Apply(e)
				prev = t.Head
			}
			add(OpMkdir, &spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory})
			for d := 0; d < 100; d++ {
				add(OpMkdir, &spindle.DirEntry{Name: spindle.PathName(fmt.Sprintf("ann@example.com/d%d", d)), Attr: spindle.AttrDirectory})
				for f := 0; f < 100; f++ {
					add(OpPut, file(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/f%d", d, f)), 4096))
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				add(OpPut, file(spindle.PathName(fmt.Sprintf("ann@example.com/d%d/new%d", i%100, i)), 4096))
			}
		})
	}
}
