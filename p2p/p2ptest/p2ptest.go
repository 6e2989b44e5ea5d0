// Package p2ptest builds networks of libp2p hosts in memory, over
// libp2p's mocknet, for tests of the p2p package and of nodes.
package p2ptest

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/host"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// A Net is a network of hosts in memory.
type Net struct {
	// Mock is the underlying mocknet, for tests that cut links
	// (Mock.UnlinkPeers) or disconnect peers (Mock.DisconnectPeers).
	Mock mocknet.Mocknet
	// Hosts are the hosts, linked and connected to each other.
	Hosts []host.Host
}

// NewNet returns a network of n hosts, each linked and connected to every
// other. The network is closed when the test ends.
func NewNet(t testing.TB, n int) *Net {
	t.Helper()
	mn := mocknet.New()
	t.Cleanup(func() { mn.Close() })
	net := &Net{Mock: mn}
	for range n {
		h, err := mn.GenPeer()
		if err != nil {
			t.Fatalf("p2ptest.NewNet: %v", err)
		}
		net.Hosts = append(net.Hosts, h)
	}
	if err := mn.LinkAll(); err != nil {
		t.Fatalf("p2ptest.NewNet: %v", err)
	}
	if n > 1 {
		if err := mn.ConnectAllButSelf(); err != nil {
			t.Fatalf("p2ptest.NewNet: %v", err)
		}
	}
	return net
}

// AddHost adds a host to the network, linked to every other host but not
// connected to any.
func (n *Net) AddHost(t testing.TB) host.Host {
	t.Helper()
	h, err := n.Mock.GenPeer()
	if err != nil {
		t.Fatalf("p2ptest.AddHost: %v", err)
	}
	if err := n.Mock.LinkAll(); err != nil {
		t.Fatalf("p2ptest.AddHost: %v", err)
	}
	n.Hosts = append(n.Hosts, h)
	return h
}

// Split cuts every link between the hosts with indexes in a and those in
// b, and closes their connections, so that they can no longer reach each
// other.
func (n *Net) Split(t testing.TB, a, b []int) {
	t.Helper()
	for _, i := range a {
		for _, j := range b {
			p, q := n.Hosts[i].ID(), n.Hosts[j].ID()
			if err := n.Mock.UnlinkPeers(p, q); err != nil {
				t.Fatalf("p2ptest.Split: %v", err)
			}
			// Close from both ends: a connection being set up may not yet
			// be known to one of them.
			n.Mock.DisconnectPeers(p, q)
			n.Mock.DisconnectPeers(q, p)
		}
	}
}
