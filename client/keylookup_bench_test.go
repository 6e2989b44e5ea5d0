package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"spindle.dev"
)

// BenchmarkProvedLookup measures key lookups as a client gets them through
// a real node over loopback, on both cores: the node (the cluster's one
// member) proves each record against its signed head, and the client
// checks the proof and the head against its key log.
func BenchmarkProvedLookup(b *testing.B) {
	n := startNodeB(b)
	b.Cleanup(func() { n.Close() })
	var names []spindle.UserName
	for i := range 20 {
		u := spindle.UserName(fmt.Sprintf("user%d@example.com", i))
		dialAsB(b, n, u)
		names = append(names, u)
	}
	c := dialAsB(b, n, "reader@example.com")
	ctx := context.Background()
	var next atomic.Int64
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := names[next.Add(1)%int64(len(names))]
			u, err := c.lookupUser(ctx, name, true)
			if err != nil || u.Name != name {
				b.Errorf("lookup %s: %v", name, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}
