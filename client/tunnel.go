package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Tunnels. A request for a dir host other than the client's own node goes
// through a tunnel its node carries (p2p.OpenTunnel): a channel to the
// host secured end to end with the host's peer key, so that the node in
// the middle learns which host the client asks, not what. The request is
// still signed by the user for the host, and the answer by the host for
// the request, as in plain forwarding (forward.go): the host has no
// session for the client and acts for the user who signed, and the same
// checks serve a client that forwards in plain.
//
// No silent way around: a node that does not carry tunnels, or a far
// side that does not prove it holds the host's key, fails the call. Only
// Config.PlainForwarding sends requests in plain, for the user who
// chooses to let a node older than tunnels read them.

// tunnelIdle is how long a client keeps an idle tunnel for its next
// request: less than the nodes' own idle timeout, so that a tunnel taken
// again is one the relay and the host still hold.
const tunnelIdle = 60 * time.Second

// maxIdleTunnels bounds the idle tunnels kept per dir host; more are
// opened while calls overlap, and closed after.
const maxIdleTunnels = 2

// A tunnels opens and keeps tunnels through the client's node.
type tunnels struct {
	h   host.Host
	via peer.ID

	mu     sync.Mutex
	idle   map[peer.ID][]idleTunnel
	closed bool
}

// An idleTunnel is a tunnel waiting for a call, and since when.
type idleTunnel struct {
	t     *p2p.Tunnel
	since time.Time
}

func newTunnels(h host.Host, via peer.ID) *tunnels {
	return &tunnels{h: h, via: via, idle: make(map[peer.ID][]idleTunnel)}
}

// errStaleTunnel marks the failure of a call on a tunnel kept from an
// earlier call, which the relay or the host may have dropped meanwhile
// (restarted, or stopped): a read may be signed afresh and sent again on
// a new tunnel (see remote.callTo).
var errStaleTunnel = errors.New("the tunnel kept from an earlier request broke")

// call sends data, an encoded request, to the dir host to through a
// tunnel and returns the host's encoded answer.
func (ts *tunnels) call(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	t, kept, err := ts.get(ctx, to)
	if err != nil {
		return nil, err
	}
	out, err := t.Call(ctx, data)
	if err != nil && !t.Alive() {
		t.Close()
		err = spindle.E(fmt.Errorf("dir host %s, through node %s: %w", to, ts.via, err))
		if kept && ctx.Err() == nil {
			err = spindle.E(spindle.IO, fmt.Errorf("%w: %w", errStaleTunnel, err))
		}
		return nil, err
	}
	ts.put(to, t)
	return out, err
}

// get returns an idle tunnel to to, and true, or opens one.
func (ts *tunnels) get(ctx context.Context, to peer.ID) (*p2p.Tunnel, bool, error) {
	ts.mu.Lock()
	for l := ts.idle[to]; len(l) > 0; l = ts.idle[to] {
		it := l[len(l)-1]
		ts.idle[to] = l[:len(l)-1]
		if time.Since(it.since) < tunnelIdle && it.t.Alive() {
			ts.mu.Unlock()
			return it.t, true, nil
		}
		it.t.Close()
	}
	ts.mu.Unlock()
	t, err := ts.open(ctx, to)
	return t, false, err
}

// open opens a tunnel to to.
func (ts *tunnels) open(ctx context.Context, to peer.ID) (*p2p.Tunnel, error) {
	t, err := p2p.OpenTunnel(ctx, ts.h, ts.via, to, wire.MaxMessage)
	if errors.Is(err, p2p.ErrNoTunnels) {
		return nil, spindle.E(spindle.Op("client.Tunnel"), fmt.Errorf("dir host %s: %w; requests are not sent through it in plain unless the client is configured to (PlainForwarding), which lets the node read them", to, err))
	}
	if err != nil {
		return nil, err
	}
	if t.RemotePeer() != to {
		// OpenTunnel checks it; so does this.
		t.Close()
		return nil, spindle.E(spindle.Integrity, p2p.ErrTunnelPeer)
	}
	return t, nil
}

// put keeps t, a tunnel to to, for the next call.
func (ts *tunnels) put(to peer.ID, t *p2p.Tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed || len(ts.idle[to]) >= maxIdleTunnels {
		t.Close()
		return
	}
	ts.idle[to] = append(ts.idle[to], idleTunnel{t, time.Now()})
}

// close closes the idle tunnels; those in calls close after them.
func (ts *tunnels) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	for to, l := range ts.idle {
		for _, it := range l {
			it.t.Close()
		}
		delete(ts.idle, to)
	}
}
