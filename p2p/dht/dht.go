// Package dht starts Spindle's private Kademlia DHT on a libp2p host.
// It is apart from package p2p so that clients, which dial nodes but
// take no part in the DHT, do not link kad-dht.
package dht

import (
	"context"
	"fmt"
	"sync"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"spindle.dev"
	"spindle.dev/p2p"
)

// New starts Spindle's private Kademlia DHT on h: protocol prefix
// /spindle, always in server mode (libp2p's automatic mode would leave
// every node on a LAN, loopback or CI a client and the DHT empty), and
// never the public IPFS bootstrap peers. It connects to the bootstrap
// peers it is given (unreachable ones are retried by the DHT whenever its
// routing table empties) and refreshes its routing table. Extra options,
// such as record validators, are passed to dht.New after Spindle's own.
// The caller closes the DHT before the host.
func New(ctx context.Context, h host.Host, bootstrap []spindle.PeerAddr, opts ...kad.Option) (*kad.IpfsDHT, error) {
	const op spindle.Op = "dht.New"
	var peers []peer.AddrInfo
	for _, a := range bootstrap {
		ai, err := p2p.ParsePeerAddr(a)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		if ai.ID != h.ID() {
			peers = append(peers, ai)
		}
	}
	all := []kad.Option{
		kad.ProtocolPrefix(p2p.DHTPrefix),
		kad.Mode(kad.ModeServer),
	}
	if len(peers) > 0 {
		all = append(all, kad.BootstrapPeers(peers...))
	}
	d, err := kad.New(h, append(all, opts...)...)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, err)
	}
	// Best effort, in parallel: a bootstrap peer that is down now is
	// tried again later.
	var wg sync.WaitGroup
	for _, ai := range peers {
		h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
		wg.Go(func() { h.Connect(ctx, ai) })
	}
	wg.Wait()
	if err := d.Bootstrap(ctx); err != nil {
		d.Close()
		return nil, spindle.E(op, spindle.Internal, fmt.Errorf("bootstrap: %w", err))
	}
	return d, nil
}
