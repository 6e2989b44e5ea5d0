package p2p

import (
	"container/list"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/transport"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// Inbound TCP connections that have not finished their security handshake
// (and so have not authenticated a peer) are held apart from the others, so
// that they cannot starve them. libp2p alone lets them wait 15 s, and
// refuses every new connection once about 35 wait (its transient scope),
// so a few dozen idle connections, from one address or a handful, locked
// every client out. A host therefore
//
//   - gives each inbound TCP connection DefaultHandshakeTimeout to finish
//     its handshake (QUIC's own handshake timeout is the same 5 s);
//   - keeps at most maxPending connections in their handshake, and at most
//     maxPendingPerIP from one IP address, closing the oldest to admit a
//     new one: a client then gets in unless an attacker opens that many
//     connections in the time its handshake takes, which the per-address
//     rate limit forbids (see newResourceManager);
//   - sizes the resource manager so that it never refuses a connection
//     before that limit does, and leaves room for authenticated ones.
//
// A home node sees remote clients and peers at their own public addresses
// (its owner's client uses the node's Unix socket, which none of this
// touches). Several users behind one NAT, or every connection through a
// port-forwarding proxy, share one address, which is why the per-address
// limits are several times libp2p's 8.
const (
	// DefaultHandshakeTimeout is how long an inbound TCP connection may
	// take to finish its security handshake.
	DefaultHandshakeTimeout = 5 * time.Second
	// maxPending bounds inbound TCP connections in their handshake.
	maxPending = 256
	// maxPendingPerIP bounds those from one IP address.
	maxPendingPerIP = 32
)

// handshakes tracks inbound connections in their security handshake. It
// wraps listeners (see handshakeUpgrader) and is the host's connection
// gater, which learns when a handshake is done.
type handshakes struct {
	timeout       time.Duration
	max, maxPerIP int

	mu      sync.Mutex
	queue   list.List             // Of *pendingConn, oldest first.
	byConn  map[any]*list.Element // Keyed by the manet.Conn.
	perAddr map[netip.Addr]int
}

// A pendingConn is an inbound connection in its handshake.
type pendingConn struct {
	c    manet.Conn
	addr netip.Addr // Zero if the remote address is not IP.
	at   time.Time
}

func newHandshakes(timeout time.Duration, max, maxPerIP int) *handshakes {
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	return &handshakes{timeout: timeout, max: max, maxPerIP: maxPerIP, byConn: make(map[any]*list.Element), perAddr: make(map[netip.Addr]int)}
}

// start sets c's handshake deadline and records it, closing the oldest
// connection in its handshake from c's address, or of all, if c would
// exceed a limit.
func (h *handshakes) start(c manet.Conn) {
	now := time.Now()
	c.SetDeadline(now.Add(h.timeout))
	addr := remoteIP(c.RemoteMultiaddr())
	var evict *pendingConn
	h.mu.Lock()
	// Forget connections past their deadline: their handshakes have
	// failed, and libp2p closes them.
	for e := h.queue.Front(); e != nil && now.Sub(e.Value.(*pendingConn).at) >= h.timeout; e = h.queue.Front() {
		h.remove(e)
	}
	if addr.IsValid() && h.perAddr[addr] >= h.maxPerIP {
		for e := h.queue.Front(); e != nil; e = e.Next() {
			if e.Value.(*pendingConn).addr == addr {
				evict = h.remove(e)
				break
			}
		}
	} else if h.queue.Len() >= h.max {
		evict = h.remove(h.queue.Front())
	}
	h.byConn[c] = h.queue.PushBack(&pendingConn{c: c, addr: addr, at: now})
	if addr.IsValid() {
		h.perAddr[addr]++
	}
	h.mu.Unlock()
	if evict != nil {
		// Its handshake fails, and libp2p releases its resources.
		evict.c.Close()
	}
}

// remove forgets the connection at e and returns it. h.mu is held.
func (h *handshakes) remove(e *list.Element) *pendingConn {
	p := h.queue.Remove(e).(*pendingConn)
	delete(h.byConn, p.c)
	if p.addr.IsValid() {
		if h.perAddr[p.addr]--; h.perAddr[p.addr] <= 0 {
			delete(h.perAddr, p.addr)
		}
	}
	return p
}

// secured ends c's handshake: it forgets c and lifts its deadline. A
// connection h does not know (QUIC, or one already past its deadline) is
// left as it is.
func (h *handshakes) secured(c network.ConnMultiaddrs) {
	h.mu.Lock()
	e, ok := h.byConn[c]
	if ok {
		h.remove(e)
	}
	h.mu.Unlock()
	if ok {
		e.Value.(*pendingConn).c.SetDeadline(time.Time{})
	}
}

// pending returns the number of connections in their handshake.
func (h *handshakes) pending() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queue.Len()
}

func remoteIP(m ma.Multiaddr) netip.Addr {
	ip, err := manet.ToIP(m)
	if err != nil {
		return netip.Addr{}
	}
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}
	}
	return a.Unmap()
}

var _ connmgr.ConnectionGater = (*handshakes)(nil)

// InterceptPeerDial implements connmgr.ConnectionGater; it allows all.
func (h *handshakes) InterceptPeerDial(peer.ID) bool { return true }

// InterceptAddrDial implements connmgr.ConnectionGater; it allows all.
func (h *handshakes) InterceptAddrDial(peer.ID, ma.Multiaddr) bool { return true }

// InterceptAccept implements connmgr.ConnectionGater; it allows all.
func (h *handshakes) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured implements connmgr.ConnectionGater: an inbound
// connection has authenticated its peer, and its handshake deadline ends.
func (h *handshakes) InterceptSecured(dir network.Direction, _ peer.ID, c network.ConnMultiaddrs) bool {
	if dir == network.DirInbound {
		h.secured(c)
	}
	return true
}

// InterceptUpgraded implements connmgr.ConnectionGater; it allows all.
func (h *handshakes) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}

// handshakeUpgrader is libp2p's upgrader with the listeners it makes
// wrapped, so that h sees each inbound connection as it is accepted.
type handshakeUpgrader struct {
	transport.Upgrader
	h *handshakes
}

// UpgradeGatedMaListener implements transport.Upgrader.
func (u handshakeUpgrader) UpgradeGatedMaListener(t transport.Transport, l transport.GatedMaListener) transport.Listener {
	return u.Upgrader.UpgradeGatedMaListener(t, handshakeListener{l, u.h})
}

// handshakeListener hands every connection it accepts to h.
type handshakeListener struct {
	transport.GatedMaListener
	h *handshakes
}

// Accept implements transport.GatedMaListener.
func (l handshakeListener) Accept() (manet.Conn, network.ConnManagementScope, error) {
	c, scope, err := l.GatedMaListener.Accept()
	if err == nil {
		l.h.start(c)
	}
	return c, scope, err
}
