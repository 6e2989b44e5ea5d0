package lease

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
)

// BenchmarkGrant times a holder granting 10^5 leases on disk, in
// messages of MaxDigests (one journal append and fsync each), as one dir
// host's renewal brings them. It reports leases granted per second.
func BenchmarkGrant(b *testing.B) {
	tb, err := OpenTable(filepath.Join(b.TempDir(), "journal"), Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	ds := digests(0, 100000)
	n := 0
	for b.Loop() {
		for rest := ds; len(rest) > 0; {
			k := min(len(rest), MaxDigests)
			got, err := tb.Grant("host", time.Hour, rest[:k])
			if err != nil || got != k {
				b.Fatal(got, err)
			}
			n += k
			rest = rest[k:]
		}
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "leases/s")
}

// BenchmarkPass times a collection pass over 10^5 blocks, all leased.
func BenchmarkPass(b *testing.B) {
	ctx := context.Background()
	tb := NewTable(Config{})
	store := new(mem.Store)
	c := NewCollector(tb, store, time.Hour, nil)
	g := c.Guard()
	var ds []blocks.Digest
	for i := range 100000 {
		ref, err := g.Put(ctx, []byte{byte(i), byte(i >> 8), byte(i >> 16)})
		if err != nil {
			b.Fatal(err)
		}
		d, _ := blocks.ParseRef(ref)
		ds = append(ds, d)
	}
	if _, err := tb.Grant("host", time.Hour, ds); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := c.Pass(ctx)
		if err != nil || res.Blocks != 100000 || res.Leased != 100000 {
			b.Fatal(res, err)
		}
	}
	b.ReportMetric(100000*float64(b.N)/b.Elapsed().Seconds(), "blocks/s")
}
