package node

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"spindle.dev"
)

// maxLimitedPeers bounds the peers a peerLimiter tracks at once.
const maxLimitedPeers = 4096

// A limiter allows each key (a peer, an address, a network prefix) at
// most limit events in a window of time. Its memory is bounded: it tracks
// at most max keys, forgetting those whose window has passed, and while
// it is full of keys whose windows run it refuses newcomers (who may try
// again in a window's time).
type limiter[K comparable] struct {
	limit  int
	window time.Duration
	max    int

	mu   sync.Mutex // Guards keys.
	keys map[K]*peerWindow
}

// A peerLimiter limits events per peer.
type peerLimiter = limiter[peer.ID]

// A peerWindow counts one key's events since start.
type peerWindow struct {
	start time.Time
	n     int
}

func newLimiter[K comparable](limit int, window time.Duration, max int) *limiter[K] {
	return &limiter[K]{limit: limit, window: window, max: max, keys: make(map[K]*peerWindow)}
}

func newPeerLimiter(limit int, window time.Duration, max int) *peerLimiter {
	return newLimiter[peer.ID](limit, window, max)
}

// allow reports whether k may have one more event at now, and counts it.
func (l *limiter[K]) allow(k K, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.okLocked(k, now) {
		return false
	}
	l.keys[k].n++
	return true
}

// ok reports whether k may have one more event at now, counting nothing;
// take counts it. A key that ok admits has its window made.
func (l *limiter[K]) ok(k K, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.okLocked(k, now)
}

func (l *limiter[K]) take(k K, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.okLocked(k, now) {
		l.keys[k].n++
	}
}

func (l *limiter[K]) okLocked(k K, now time.Time) bool {
	w := l.keys[k]
	if w != nil && now.Sub(w.start) >= l.window {
		w = nil
		delete(l.keys, k)
	}
	if w == nil {
		if len(l.keys) >= l.max {
			for q, qw := range l.keys {
				if now.Sub(qw.start) >= l.window {
					delete(l.keys, q)
				}
			}
			if len(l.keys) >= l.max {
				return false
			}
		}
		w = &peerWindow{start: now}
		l.keys[k] = w
	}
	return w.n < l.limit
}

// size returns the number of keys tracked.
func (l *limiter[K]) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// Registration limits. A fresh peer ID costs nothing, so sign-ups through
// a node are bounded by where they come from as well: per source address,
// per network prefix (a /24 of IPv4, a /48 of IPv6, what one customer of
// an ISP or one cloud tenant usually holds) and in all, each in a window
// of signupWindow. Only new names count (a record of version 1); changes
// to a record are signed by its key and bounded by KeyPutLimit.
const (
	signupWindow = time.Hour
	// DefaultSignupsPerAddr, DefaultSignupsPerPrefix and DefaultSignups
	// are the defaults of Config.SignupsPerAddr, SignupsPerPrefix and
	// Signups: enough for a household or a class signing up through one
	// node, too few to take names in bulk.
	DefaultSignupsPerAddr   = 20
	DefaultSignupsPerPrefix = 50
	DefaultSignups          = 200
)

// signupLimits applies the registration limits of a node.
type signupLimits struct {
	perAddr, perPrefix, all int

	mu       sync.Mutex // Held to check and count all three at once.
	addrs    *limiter[string]
	prefixes *limiter[string]
	total    *limiter[struct{}]
}

func newSignupLimits(perAddr, perPrefix, all int) *signupLimits {
	return &signupLimits{perAddr: perAddr, perPrefix: perPrefix, all: all,
		addrs:    newLimiter[string](perAddr, signupWindow, maxLimitedPeers),
		prefixes: newLimiter[string](perPrefix, signupWindow, maxLimitedPeers),
		total:    newLimiter[struct{}](all, signupWindow, 1)}
}

// allow counts a sign-up from the source address src ("" if the peer
// reached the node other than over IP, such as through its Unix socket)
// if every limit admits it, and otherwise returns an error of kind
// Transient naming the limit reached.
func (l *signupLimits) allow(src string, now time.Time) error {
	addr, prefix := src, src
	if src == "" {
		addr, prefix = "the node's socket", "the node's socket"
	}
	if a, err := netip.ParseAddr(src); err == nil {
		bits := 24
		if !a.Unmap().Is4() {
			bits = 48
		}
		p, _ := a.Unmap().Prefix(bits)
		addr, prefix = a.Unmap().String(), p.String()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.addrs.ok(addr, now):
		return spindle.E(spindle.Transient, fmt.Sprintf("too many sign-ups from address %s: at most %d an hour", addr, l.perAddr))
	case !l.prefixes.ok(prefix, now):
		return spindle.E(spindle.Transient, fmt.Sprintf("too many sign-ups from network %s: at most %d an hour", prefix, l.perPrefix))
	case !l.total.ok(struct{}{}, now):
		return spindle.E(spindle.Transient, fmt.Sprintf("too many sign-ups through this node: at most %d an hour in all", l.all))
	}
	l.addrs.take(addr, now)
	l.prefixes.take(prefix, now)
	l.total.take(struct{}{}, now)
	return nil
}

// sourceAddr returns the IP address peer p reaches this node from: that
// of a direct connection if it has one, or else that of the relay that
// carries it; "" if it has none over IP.
func (n *Node) sourceAddr(p peer.ID) string {
	var relayed string
	for _, c := range n.host.Network().ConnsToPeer(p) {
		ip, circuit := firstIP(c.RemoteMultiaddr())
		if ip == "" {
			continue
		}
		if !circuit {
			return ip
		}
		relayed = ip
	}
	return relayed
}

// firstIP returns the first IP address in m, and whether m goes through
// a relay.
func firstIP(m ma.Multiaddr) (ip string, circuit bool) {
	for _, c := range m {
		switch c.Protocol().Code {
		case ma.P_IP4, ma.P_IP6:
			if ip == "" {
				ip = c.Value()
			}
		case ma.P_CIRCUIT:
			circuit = true
		}
	}
	return ip, circuit
}
