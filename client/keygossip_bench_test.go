package client

import (
	"context"
	"testing"
)

// BenchmarkKeyGossip measures one gossip of the key log's head as a client
// does it through a real node over loopback: the round trip, the node's
// read of the DHT record of that size and (the first time) its write, on
// a node alone, so the DHT is local; and the client's check of each head
// found (one: its own). A DHT of many peers adds its lookups to this.
func BenchmarkKeyGossip(b *testing.B) {
	n := startNodeB(b)
	b.Cleanup(func() { n.Close() })
	c := dialAsB(b, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.LookupUser(ctx, "ann@example.com"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		rep, err := c.GossipKeyHead(ctx)
		if err != nil || rep.Agree != 1 {
			b.Fatalf("gossip = %+v, %v", rep, err)
		}
	}
}
