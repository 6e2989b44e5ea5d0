package node

// Tunnels: relays see only where, not what.
//
// A client reaches a dir host other than its own node through a tunnel
// (p2p.OpenTunnel): it asks its node, the relay, for a stream to the
// host, and runs a Noise handshake with the host inside it, authenticated
// by the host's peer key. The relay copies the bytes (serveTunnel) and
// learns which host the client asks, when, and how much; not the names,
// sizes, writers, listings or Access text of the requests and answers,
// which it could read when it carried them in plain (forwardDir, still
// served to clients that ask for it, see client.Config.PlainForwarding).
//
// The relay is no open relay: it carries tunnels only for a peer signed
// in to it, at most maxTunnelsPerPeer at once per peer and maxTunnels in
// all, each for at most tunnelLife and while bytes move at least every
// tunnelIdle. The host (serveTunnelEnd) answers in a tunnel only
// directory requests signed for it by their user, as a request carried
// in plain (signedUser), made by the peer the handshake proved
// (wire.AuthMsg.ClientPeer), and signs each answer as before: the
// signatures do not depend on who carries the bytes, and a client that
// forwards in plain keeps its guarantees.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	msmux "github.com/multiformats/go-multistream"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Bounds of the tunnels a node carries and ends.
const (
	// Carried for one client peer at once: below the streams of one
	// protocol libp2p's resource manager takes from one peer (64), and
	// above what a client opens (client.maxOpenTunnels).
	maxTunnelsPerPeer = 32
	maxTunnels        = 1024 // Carried, or ended, in all at once.
	maxTunnelEnds     = 64   // Ended for one relay at once.

	tunnelIdle = 2 * time.Minute
	tunnelLife = 30 * time.Minute
)

// A tunnelCount counts the tunnels open, per peer and in all.
type tunnelCount struct {
	mu  sync.Mutex
	per map[peer.ID]int
	all int
}

// take counts one more tunnel for p, if p has fewer than perPeer and
// all peers fewer than maxTunnels.
func (c *tunnelCount) take(p peer.ID, perPeer int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per == nil {
		c.per = make(map[peer.ID]int)
	}
	if c.per[p] >= perPeer || c.all >= maxTunnels {
		return false
	}
	c.per[p]++
	c.all++
	return true
}

// done counts one tunnel of p fewer.
func (c *tunnelCount) done(p peer.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.per[p]--; c.per[p] <= 0 {
		delete(c.per, p)
	}
	c.all--
}

// serveTunnel carries a tunnel from a client signed in here to the peer
// it names (see the top of this file).
func (n *Node) serveTunnel(s network.Stream) {
	const op spindle.Op = "node.Tunnel"
	remote := s.Conn().RemotePeer()
	refuse := func(err error) {
		s.SetWriteDeadline(time.Now().Add(5 * time.Second))
		s.Write(p2p.TunnelRefused(err))
		s.Close()
	}
	s.SetReadDeadline(time.Now().Add(forwardTimeout))
	to, err := p2p.ReadTunnelHeader(s)
	if err != nil {
		refuse(spindle.E(op, err))
		return
	}
	user := n.session(remote)
	if user == "" {
		refuse(spindle.E(wire.SessionOp, spindle.Permission, fmt.Sprintf("not signed in: node %s carries tunnels only for the users signed in to it", n.host.ID())))
		return
	}
	if to == n.host.ID() || to == remote {
		refuse(spindle.E(op, user, spindle.Invalid, fmt.Sprintf("node %s does not carry a tunnel to %s: ask it directly", n.host.ID(), to)))
		return
	}
	if !n.tunnels.take(remote, maxTunnelsPerPeer) {
		refuse(spindle.E(op, user, spindle.Transient, fmt.Sprintf("node %s carries at most %d tunnels for one client and %d in all", n.host.ID(), maxTunnelsPerPeer, maxTunnels)))
		return
	}
	defer n.tunnels.done(remote)
	ctx, cancel := context.WithTimeout(n.ctx, forwardTimeout)
	end, err := n.openTunnelEnd(ctx, to)
	cancel()
	if errors.Is(err, errNoTunnelEnd) || errors.Is(err, msmux.ErrNotSupported[protocol.ID]{}) {
		refuse(spindle.E(op, user, spindle.IO, fmt.Sprintf("dir host %s ends no tunnels (it predates them): it must be upgraded, or reached in plain by a client configured to (PlainForwarding)", to)))
		return
	}
	if err != nil {
		refuse(spindle.E(op, user, spindle.IO, fmt.Errorf("dir host %s cannot be reached through node %s: %w", to, n.host.ID(), err)))
		return
	}
	s.SetReadDeadline(time.Time{})
	s.SetWriteDeadline(time.Now().Add(forwardTimeout))
	if _, err := s.Write(p2p.TunnelReady()); err != nil {
		s.Reset()
		end.Reset()
		return
	}
	life := time.AfterFunc(tunnelLife, func() { s.Reset(); end.Reset() })
	defer life.Stop()
	stop := context.AfterFunc(n.ctx, func() { s.Reset(); end.Reset() })
	defer stop()
	p2p.Splice(s, end, tunnelIdle, n.tap())
}

// errNoTunnelEnd says that a peer does not serve p2p.TunnelEndProtocol.
var errNoTunnelEnd = errors.New("the peer ends no tunnels")

// openTunnelEnd opens a stream of p2p.TunnelEndProtocol to the peer to,
// connecting first as callPeer does. A peer whose protocols, as it told
// them (identify), do not include it is not asked: libp2p would open
// the stream and fail only at its first bytes, the client's handshake.
func (n *Node) openTunnelEnd(ctx context.Context, to peer.ID) (network.Stream, error) {
	if n.host.Network().Connectedness(to) != network.Connected {
		n.findAddrs(ctx, to)
		if err := n.host.Connect(ctx, peer.AddrInfo{ID: to}); err != nil {
			return nil, err
		}
	}
	if protos, err := n.host.Peerstore().GetProtocols(to); err == nil && len(protos) > 0 && !slices.Contains(protos, p2p.TunnelEndProtocol) {
		return nil, errNoTunnelEnd
	}
	return n.host.NewStream(ctx, to, p2p.TunnelEndProtocol)
}

// serveTunnelEnd ends a tunnel a relay opened to this node: it answers the
// client's signed directory requests inside (serveTunneled).
func (n *Node) serveTunnelEnd(s network.Stream) {
	relay := s.Conn().RemotePeer()
	if !n.tunnelEnds.take(relay, maxTunnelEnds) {
		s.Reset()
		return
	}
	defer n.tunnelEnds.done(relay)
	if err := p2p.ServeTunnelEnd(n.ctx, n.host, s, wire.MaxMessage, tunnelIdle, n.serveTunneled); err != nil {
		n.log.Debug("tunnel ended", "relay", relay, "err", oneLine(err.Error()))
	}
}

// serveTunneled answers one request that came through a tunnel from the
// peer client, as the handshake proved it: a directory request signed
// for this node by its user on client's behalf; any other is refused.
func (n *Node) serveTunneled(ctx context.Context, client peer.ID, data []byte) ([]byte, error) {
	const op spindle.Op = "node.Tunneled"
	var req wire.Request
	if err := wire.Decode(data, &req); err != nil {
		return nil, spindle.E(op, spindle.Invalid, err)
	}
	if !isDirMethod(req.Method) || !wire.SignedFor(&req, n.host.ID().String()) {
		return nil, spindle.E(op, spindle.Permission, "a tunnel carries only directory requests signed for this node by their user")
	}
	if req.Auth.ClientPeer != client.String() {
		return nil, spindle.E(op, spindle.Permission, fmt.Sprintf("request signed for client peer %s, but the tunnel is %s's", req.Auth.ClientPeer, client))
	}
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	return n.serve(ctx, "tunnel", clientTable, client, &req)
}

// tap returns the relay tap, if a test set one (Node.relayTap).
func (n *Node) tap() func([]byte) {
	if f := n.relayTap.Load(); f != nil {
		return *f
	}
	return nil
}
