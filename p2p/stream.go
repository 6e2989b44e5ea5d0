package p2p

import (
	"context"
	"fmt"
	"net"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/gostream"

	"spindle.dev"
)

// Listen returns a net.Listener that accepts the streams of protocol proto
// opened to h, each as a net.Conn whose RemoteAddr().String() is the
// remote peer ID. Its Addr().String() is h's peer ID. Closing the listener
// removes the protocol's handler. With [Dial], it is the seam for
// components that speak net.Conn, such as Raft's stream layer.
func Listen(h host.Host, proto protocol.ID) (net.Listener, error) {
	const op spindle.Op = "p2p.Listen"
	l, err := gostream.Listen(h, proto)
	if err != nil {
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("protocol %s: %w", proto, err))
	}
	return l, nil
}

// Dial opens a stream of protocol proto to the peer at addr (a full
// multiaddr ending in /p2p/<peer ID>, or a bare peer ID whose addresses h
// knows) and returns it as a net.Conn.
func Dial(ctx context.Context, h host.Host, proto protocol.ID, addr spindle.PeerAddr) (net.Conn, error) {
	const op spindle.Op = "p2p.Dial"
	ai, err := ParsePeerAddr(addr)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if len(ai.Addrs) > 0 {
		if err := h.Connect(ctx, ai); err != nil {
			return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("peer %s: %w", addr, err))
		}
	}
	c, err := gostream.Dial(ctx, h, ai.ID, proto)
	if err != nil {
		return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("peer %s, protocol %s: %w", ai.ID, proto, err))
	}
	return c, nil
}

// Dialer returns a function that dials protocol proto from h, in the
// shape a stream layer wants: an address string (a PeerAddr) in, a
// net.Conn out.
func Dialer(h host.Host, proto protocol.ID) func(ctx context.Context, addr string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		return Dial(ctx, h, proto, spindle.PeerAddr(addr))
	}
}

// PeerID returns the peer ID in a PeerAddr.
func PeerID(addr spindle.PeerAddr) (peer.ID, error) {
	ai, err := ParsePeerAddr(addr)
	return ai.ID, err
}
