package dht

import (
	"context"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	pb "github.com/libp2p/go-libp2p-kad-dht/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev/p2p"
)

// refusedType is the message type a request from a peer that is not a
// member is given before it is handled: no handler serves it, so the DHT
// closes the stream without an answer or an effect.
const refusedType = pb.Message_MessageType(-1)

// MembersOnly returns the options that keep a DHT to the network's member
// nodes, as member reports them (it must be safe for concurrent use and
// fast: it is asked on every request and for every peer a lookup hears
// of). The DHT then
//
//   - adds no other peer to its routing table, so it never names one as
//     near a key or as a server to other peers;
//   - asks no other peer in a lookup, so what one says is never heard;
//   - stores nothing another peer sends: its provider records and values
//     (ADD_PROVIDER, PUT_VALUE) are dropped unanswered.
//
// It still answers another peer's lookups (FIND_NODE, GET_PROVIDERS,
// GET_VALUE, PING), so that a node outside the network can find the
// members that hold a block and read it through them, as a client can;
// what it learns is what it could learn by asking a member's clients'
// protocol anyway: which members hold which block addresses.
//
// A member that member stops reporting stays in the routing table until
// [Restrict] is called. Pass the options to [New].
func MembersOnly(member func(peer.ID) bool) []kad.Option {
	return []kad.Option{
		kad.RoutingTableFilter(func(_ any, p peer.ID) bool { return member(p) }),
		kad.QueryFilter(func(_ any, ai peer.AddrInfo) bool { return member(ai.ID) }),
		kad.OnRequestHook(func(_ context.Context, s network.Stream, req *pb.Message) {
			if storesFromPeer(req.GetType()) && !member(s.Conn().RemotePeer()) {
				req.Type = refusedType
			}
		}),
	}
}

// storesFromPeer reports whether a DHT request of type t would store what
// the asking peer sent.
func storesFromPeer(t pb.Message_MessageType) bool {
	switch t {
	case pb.Message_FIND_NODE, pb.Message_GET_PROVIDERS, pb.Message_GET_VALUE, pb.Message_PING:
		return false
	}
	return true
}

// Restrict brings d's routing table in line with member after the list
// of members changed: it drops every peer that is no longer a member, and
// adds the connected peers that now are and serve the DHT. It returns how
// many it dropped and added.
func Restrict(d *kad.IpfsDHT, member func(peer.ID) bool) (dropped, added int) {
	rt := d.RoutingTable()
	for _, p := range rt.ListPeers() {
		if !member(p) {
			rt.RemovePeer(p)
			dropped++
		}
	}
	h := d.Host()
	for _, p := range h.Network().Peers() {
		if !member(p) || rt.Find(p) != "" {
			continue
		}
		if ok, err := h.Peerstore().SupportsProtocols(p, p2p.DHTProtocol); err != nil || len(ok) == 0 {
			continue
		}
		if ok, _ := rt.TryAddPeer(p, true, false); ok {
			added++
		}
	}
	return dropped, added
}
