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
// A node tells it through its socket, on the operator protocol, to its
// operator (see wire.NodeStatusRequest); elsewhere it answers with a
// Permission error.
func NodeStatus(ctx context.Context, addr spindle.PeerAddr) (*wire.Status, error) {
	const op spindle.Op = "client.NodeStatus"
	call := NodeCall[wire.NodeStatusRequest, wire.NodeStatusResponse]
	if p2p.IsLocalAddr(addr) {
		call = OperatorCall[wire.NodeStatusRequest, wire.NodeStatusResponse]
	}
	resp, err := call(ctx, addr, wire.NodeStatus, &wire.NodeStatusRequest{})
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if resp.Status == nil {
		return nil, spindle.E(op, spindle.IO, "node sent no status")
	}
	return resp.Status, nil
}

// NodeCall sends a request of method whose body is req to the node at
// addr on the client protocol without signing in, and returns its
// answer: for the requests anyone may send
// (wire.KeyStatus, wire.KeyChange, whose changes the key cluster checks
// itself). An error the node answers with is returned as such.
func NodeCall[Req, Resp any](ctx context.Context, addr spindle.PeerAddr, method string, req *Req) (*Resp, error) {
	return nodeCall[Req, Resp](ctx, spindle.Op("client.NodeCall"), addr, wire.ClientProtocol, method, req)
}

// OperatorCall sends a request of method whose body is req to the node
// whose socket is addr, on the operator protocol (wire.OperatorProtocol), and returns its answer: for
// the requests a node answers only its operator (wire.KeyJoin,
// wire.KeyLeave, wire.NodeStatus with the logs it hosts).
func OperatorCall[Req, Resp any](ctx context.Context, addr spindle.PeerAddr, method string, req *Req) (*Resp, error) {
	const op spindle.Op = "client.OperatorCall"
	if !p2p.IsLocalAddr(addr) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("%s is not a node's socket: a node answers its operator only through its socket", addr))
	}
	return nodeCall[Req, Resp](ctx, op, addr, wire.OperatorProtocol, method, req)
}

func nodeCall[Req, Resp any](ctx context.Context, op spindle.Op, addr spindle.PeerAddr, proto, method string, req *Req) (*Resp, error) {
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
	r := &remote{h: h, peer: pid, proto: proto}
	return call[Req, Resp](ctx, r, method, "", req)
}
