package replica_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// A routing table holds 20 peers a bucket, so in a large network most
// servers of the DHT are not in a given node's table. A push from one of
// them is accepted all the same. Here node b's table is kept from ever
// holding node a, as a full bucket would.
func TestPushFromDHTServerOutsideRoutingTable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts loopback nodes; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newHost := func() (*node, error) {
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Memory: 256 << 20})
		return &node{h: h}, err
	}
	a, err := newHost()
	if err != nil {
		t.Fatal(err)
	}
	b, err := newHost()
	if err != nil {
		a.h.Close()
		t.Fatal(err)
	}
	start := func(n *node, boot []spindle.PeerAddr, opts ...kad.Option) {
		t.Helper()
		d, err := dht.New(ctx, n.h, boot, opts...)
		if err != nil {
			n.h.Close()
			t.Fatal(err)
		}
		n.d, n.local = d, new(mem.Store)
		if n.store, err = replica.New(n.h, d, n.local, repairConfig()); err != nil {
			d.Close()
			n.h.Close()
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(context.Background())
		n.cancel = scancel
		srv, cfg := n.store.Server(func(peer.ID) bool { return false }, nil)
		p2p.ServeBlocks(sctx, n.h, srv, cfg)
		t.Cleanup(n.stop)
	}
	notA := func(_ any, p peer.ID) bool { return p != a.h.ID() }
	start(b, nil, kad.RoutingTableFilter(notA))
	start(a, p2p.Addrs(b.h))
	// a knows b as a DHT server; b has heard from a but keeps it out.
	deadline := time.Now().Add(20 * time.Second)
	for a.d.RoutingTable().Find(b.h.ID()) == "" {
		if time.Now().After(deadline) {
			t.Fatal("node b never entered node a's routing table")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.d.RoutingTable().Find(a.h.ID()) != "" {
		t.Fatal("node a is in node b's routing table")
	}

	data := randomBlock(rand.New(rand.NewPCG(5, 5)), 3000)
	ref, _, err := blocks.Receive(data)
	if err != nil {
		t.Fatal(err)
	}
	r := p2p.NewRemoteStore(a.h, b.h.ID())
	defer r.Close()
	if err := r.PutRef(ctx, ref, data); err != nil {
		t.Fatalf("push from a DHT server outside the routing table: %v", err)
	}
	if !b.has(ref) {
		t.Error("the pushed block is not held")
	}
}
