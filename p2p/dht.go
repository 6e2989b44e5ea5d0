package p2p

import (
	"context"
	"fmt"
	"sync"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"spindle.dev"
)

// DHTPrefix is the protocol prefix of Spindle's private DHT, which keeps
// it apart from the public IPFS DHT.
const DHTPrefix = "/spindle"

// DHTProtocol is the protocol the private DHT speaks: kad-dht's under
// [DHTPrefix].
const DHTProtocol = DHTPrefix + "/kad/1.0.0"

// NewDHT starts Spindle's private Kademlia DHT on h: protocol prefix
// /spindle, always in server mode (libp2p's automatic mode would leave
// every node on a LAN, loopback or CI a client and the DHT empty), and
// never the public IPFS bootstrap peers. It connects to the bootstrap
// peers it is given (unreachable ones are retried by the DHT whenever its
// routing table empties) and refreshes its routing table. Extra options,
// such as record validators, are passed to dht.New after Spindle's own.
// The caller closes the DHT before the host.
func NewDHT(ctx context.Context, h host.Host, bootstrap []spindle.PeerAddr, opts ...dht.Option) (*dht.IpfsDHT, error) {
	const op spindle.Op = "p2p.NewDHT"
	var peers []peer.AddrInfo
	for _, a := range bootstrap {
		ai, err := ParsePeerAddr(a)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		if ai.ID != h.ID() {
			peers = append(peers, ai)
		}
	}
	all := []dht.Option{
		dht.ProtocolPrefix(DHTPrefix),
		dht.Mode(dht.ModeServer),
	}
	if len(peers) > 0 {
		all = append(all, dht.BootstrapPeers(peers...))
	}
	d, err := dht.New(h, append(all, opts...)...)
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
