package dht_test

import (
	"context"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	kad "github.com/libp2p/go-libp2p-kad-dht"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
	"spindle.dev/p2p/p2ptest"
)

func TestDHTProviders(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	net := p2ptest.NewNet(t, 4)
	boot := p2p.Addrs(net.Hosts[0])
	var dhts []*kad.IpfsDHT
	for _, h := range net.Hosts {
		d, err := dht.New(ctx, h, boot)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		dhts = append(dhts, d)
	}
	for _, d := range dhts {
		for _, proto := range d.Host().Mux().Protocols() {
			if proto == "/ipfs/kad/1.0.0" {
				t.Fatal("private DHT speaks the public IPFS protocol")
			}
		}
	}
	// Wait until every routing table has seen the others (a minute: on a
	// loaded machine the refreshes that fill them take more than 10 s).
	deadline := time.Now().Add(time.Minute)
	for _, d := range dhts {
		for d.RoutingTable().Size() < len(dhts)-1 {
			if time.Now().After(deadline) {
				t.Fatalf("routing table of %s holds %d peers", d.Host().ID(), d.RoutingTable().Size())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	ref := blocks.RefOf([]byte("a block held by host 3"))
	c, err := cid.Decode(string(ref))
	if err != nil {
		t.Fatal(err)
	}
	if err := dhts[3].Provide(ctx, c, true); err != nil {
		t.Fatalf("Provide: %v", err)
	}
	provs, err := dhts[1].FindProviders(ctx, c)
	if err != nil {
		t.Fatalf("FindProviders: %v", err)
	}
	if len(provs) != 1 || provs[0].ID != net.Hosts[3].ID() {
		t.Fatalf("FindProviders = %v, want host 3 (%s)", provs, net.Hosts[3].ID())
	}
}

func TestDHTBadBootstrap(t *testing.T) {
	net := p2ptest.NewNet(t, 1)
	if _, err := dht.New(context.Background(), net.Hosts[0], []spindle.PeerAddr{"nonsense"}); err == nil {
		t.Fatal("NewDHT with a malformed bootstrap address succeeded")
	}
	// No bootstrap peers at all is fine: a network of one.
	d, err := dht.New(context.Background(), net.Hosts[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
}
