package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/p2p"
)

// A file put through a node of a network of four is kept on three: each
// of its blocks is on the writer's node and on two others, and reads back.
// After the writer's node drains, the three others hold every block.
func TestPutKeepsThreeCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	first := netNode(t, t.TempDir(), nil)
	defer first.Close()
	boot := []spindle.PeerAddr{p2p.Addrs(first.Host())[0]}
	nodes := []*Node{first}
	for range 3 {
		n := netNode(t, t.TempDir(), boot)
		defer n.Close()
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		waitFor(t, 20*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= 3 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann := dialAs(t, nodes[1], "ann@example.com")
	data := make([]byte, 5<<20/2)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	e, err := ann.Lookup(ctx, "ann@example.com/f", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Blocks) < 2 {
		t.Fatalf("%d blocks, want several", len(e.Blocks))
	}
	for _, b := range e.Blocks {
		var holders []int
		for i, n := range nodes {
			if _, err := n.store.Get(ctx, b.Ref); err == nil {
				holders = append(holders, i)
			}
		}
		if len(holders) != 3 || !slices.Contains(holders, 1) {
			t.Errorf("block %s held by nodes %v, want 3 of them including the writer's (1)", b.Ref, holders)
		}
	}
	mustRead(t, ann, "ann@example.com/f", data)

	// The writer's node drains before it leaves for good: every block is
	// then on the three nodes that stay.
	res, err := nodes[1].Drain(ctx)
	if err != nil || res.Blocks < len(e.Blocks) || res.Failed != 0 {
		t.Fatalf("drain: %+v, %v", res, err)
	}
	for _, b := range e.Blocks {
		for i, n := range nodes {
			if _, err := n.store.Get(ctx, b.Ref); err != nil && i != 1 {
				t.Errorf("after the drain, block %s is not on node %d: %v", b.Ref, i, err)
			}
		}
	}
}
