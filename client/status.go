package client

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/host"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// NodeStatus asks the node at addr for its status, without signing in.
// A node tells it through its socket, to its operator (see
// wire.NodeStatus); elsewhere it answers with a Permission error.
func NodeStatus(ctx context.Context, addr spindle.PeerAddr) (*wire.Status, error) {
	const op spindle.Op = "client.NodeStatus"
	resp, err := NodeCall(ctx, addr, &wire.Request{Method: wire.NodeStatus})
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if resp.Status == nil {
		return nil, spindle.E(op, spindle.IO, "node sent no status")
	}
	return resp.Status, nil
}

// NodeCall sends req to the node at addr without signing in, and returns
// its answer: for the requests a node answers its operator through its
// socket (wire.KeyJoin, wire.KeyLeave) and those anyone may send
// (wire.KeyStatus, wire.KeyChange, whose changes the key cluster checks
// itself). An error the node answers with is returned as such.
func NodeCall(ctx context.Context, addr spindle.PeerAddr, req *wire.Request) (*wire.Response, error) {
	const op spindle.Op = "client.NodeCall"
	var h host.Host
	var err error
	if p2p.IsLocalAddr(addr) {
		h, err = p2p.NewLocalHost(ctx, p2p.LocalConfig{})
	} else {
		h, err = p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	}
	if err != nil {
		return nil, spindle.E(op, err)
	}
	defer h.Close()
	pid, err := p2p.Connect(ctx, h, addr)
	if err != nil {
		return nil, spindle.E(op, fmt.Errorf("cannot reach node %s: %w", addr, err)) // Of kind IO.
	}
	r := &remote{h: h, peer: pid}
	return r.call(ctx, req)
}
