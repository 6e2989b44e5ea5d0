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

// maxOpenTunnels bounds the tunnels a client holds open at once, idle or
// in calls, to all dir hosts: below what a node carries for one client
// (node's maxTunnelsPerPeer), so that a client with many reads at once
// waits for a tunnel instead of being refused one.
const maxOpenTunnels = 24

// A tunnels opens and keeps tunnels through the client's node.
type tunnels struct {
	h   host.Host
	via peer.ID

	mu      sync.Mutex
	open    int // Tunnels open, idle or in calls; at most maxOpenTunnels.
	idle    map[peer.ID][]idleTunnel
	waiting int           // Calls waiting for a tunnel.
	changed chan struct{} // Closed when a tunnel is put back or closed.
	closed  bool
}

// An idleTunnel is a tunnel waiting for a call, and since when.
type idleTunnel struct {
	t     *p2p.Tunnel
	since time.Time
}

func newTunnels(h host.Host, via peer.ID) *tunnels {
	return &tunnels{h: h, via: via, idle: make(map[peer.ID][]idleTunnel), changed: make(chan struct{})}
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
	if err != nil && t.Alive() {
		// An error frame from the host, unsigned: no more than a
		// dropped request, as in plain forwarding (checkAnswer), so that
		// it cannot stand for a proved answer such as NotExist.
		ts.put(to, t)
		return nil, spindle.E(spindle.IO, fmt.Sprintf("dir host %s refused the request unsigned: %v", to, err))
	}
	if err != nil {
		ts.mu.Lock()
		ts.dropLocked(t)
		ts.mu.Unlock()
		err = spindle.E(fmt.Errorf("dir host %s, through node %s: %w", to, ts.via, err))
		if kept && ctx.Err() == nil {
			err = spindle.E(spindle.IO, fmt.Errorf("%w: %w", errStaleTunnel, err))
		}
		return nil, err
	}
	ts.put(to, t)
	return out, nil
}

// get returns an idle tunnel to to, and true, or opens one: while
// maxOpenTunnels are open, in place of the oldest idle tunnel to another
// host, or, if none is idle, once one is put back or closed.
func (ts *tunnels) get(ctx context.Context, to peer.ID) (*p2p.Tunnel, bool, error) {
	ts.mu.Lock()
	for {
		for l := ts.idle[to]; len(l) > 0; l = ts.idle[to] {
			it := l[len(l)-1]
			ts.idle[to] = l[:len(l)-1]
			if time.Since(it.since) < tunnelIdle && it.t.Alive() {
				ts.mu.Unlock()
				return it.t, true, nil
			}
			ts.dropLocked(it.t)
		}
		if ts.open >= maxOpenTunnels {
			ts.dropOldestLocked()
		}
		if ts.open < maxOpenTunnels {
			ts.open++
			ts.mu.Unlock()
			t, err := ts.dial(ctx, to)
			if err != nil {
				ts.mu.Lock()
				ts.open--
				ts.signalLocked()
				ts.mu.Unlock()
			}
			return t, false, err
		}
		ts.waiting++
		ch := ts.changed
		ts.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		ts.mu.Lock()
		ts.waiting--
		if ctx.Err() != nil {
			ts.mu.Unlock()
			return nil, false, spindle.E(spindle.Op("client.Tunnel"), spindle.Transient, fmt.Errorf("no tunnel free through node %s (%d open): %w", ts.via, maxOpenTunnels, ctx.Err()))
		}
	}
}

// dropOldestLocked closes the oldest idle tunnel, if any.
func (ts *tunnels) dropOldestLocked() {
	var from peer.ID
	var oldest time.Time
	for p, l := range ts.idle {
		if len(l) > 0 && (from == "" || l[0].since.Before(oldest)) {
			from, oldest = p, l[0].since
		}
	}
	if from != "" {
		t := ts.idle[from][0].t
		ts.idle[from] = ts.idle[from][1:]
		ts.dropLocked(t)
	}
}

// dropLocked closes t, an open tunnel no longer idle.
func (ts *tunnels) dropLocked(t *p2p.Tunnel) {
	t.Close()
	ts.open--
	ts.signalLocked()
}

// signalLocked wakes the calls waiting for a tunnel.
func (ts *tunnels) signalLocked() {
	close(ts.changed)
	ts.changed = make(chan struct{})
}

// tunnelBusyWait bounds how long a dial waits, trying again, while the
// node refuses a tunnel for now (Transient: it still counts tunnels this
// client has closed, until it sees them end).
const tunnelBusyWait = 2 * time.Second

// dial opens a tunnel to to.
func (ts *tunnels) dial(ctx context.Context, to peer.ID) (*p2p.Tunnel, error) {
	t, err := p2p.OpenTunnel(ctx, ts.h, ts.via, to, wire.MaxMessage)
	for wait, deadline := 20*time.Millisecond, time.Now().Add(tunnelBusyWait); tunnelBusy(err) && time.Now().Before(deadline); wait *= 2 {
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		t, err = p2p.OpenTunnel(ctx, ts.h, ts.via, to, wire.MaxMessage)
	}
	if errors.Is(err, p2p.ErrNoTunnels) {
		return nil, spindle.E(spindle.Op("client.Tunnel"), fmt.Errorf("dir host %s: %w; requests are not sent through it in plain unless the client is configured to (PlainForwarding), which lets the node read them", to, err))
	}
	var refused *p2p.RefusedError
	if errors.As(err, &refused) {
		// The node's own word: a demand to sign in again is acted on
		// (remote.callFor), anything else is a dropped request.
		var e *spindle.Error
		if errors.As(refused.Err, &e) && e.Op == wire.SessionOp {
			return nil, e
		}
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

// put keeps t, a tunnel to to, for the next call: for a call waiting, or
// up to maxIdleTunnels per host.
func (ts *tunnels) put(to peer.ID, t *p2p.Tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		ts.dropLocked(t)
		return
	}
	ts.idle[to] = append(ts.idle[to], idleTunnel{t, time.Now()})
	for ts.waiting == 0 && len(ts.idle[to]) > maxIdleTunnels {
		old := ts.idle[to][0].t
		ts.idle[to] = ts.idle[to][1:]
		ts.dropLocked(old)
	}
	ts.signalLocked()
}

// close closes the idle tunnels; those in calls close after them.
func (ts *tunnels) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	for to, l := range ts.idle {
		for _, it := range l {
			ts.dropLocked(it.t)
		}
		delete(ts.idle, to)
	}
}

// tunnelBusy reports whether err is the node's refusal of a tunnel for
// now: it carries as many for this client, or in all, as it will.
func tunnelBusy(err error) bool {
	var refused *p2p.RefusedError
	return errors.As(err, &refused) && errors.Is(refused.Err, spindle.Transient)
}
