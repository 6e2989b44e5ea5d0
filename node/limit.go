package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// maxLimitedPeers bounds the peers a peerLimiter tracks at once.
const maxLimitedPeers = 4096

// A peerLimiter allows each peer at most limit events in a window of
// time. Its memory is bounded: it tracks at most max peers, forgetting
// those whose window has passed, and while it is full of peers whose
// windows run it refuses newcomers (who may try again in a window's time).
type peerLimiter struct {
	limit  int
	window time.Duration
	max    int

	mu    sync.Mutex // Guards peers.
	peers map[peer.ID]*peerWindow
}

// A peerWindow counts one peer's events since start.
type peerWindow struct {
	start time.Time
	n     int
}

func newPeerLimiter(limit int, window time.Duration, max int) *peerLimiter {
	return &peerLimiter{limit: limit, window: window, max: max, peers: make(map[peer.ID]*peerWindow)}
}

// allow reports whether p may have one more event at now, and counts it.
func (l *peerLimiter) allow(p peer.ID, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.peers[p]
	if w != nil && now.Sub(w.start) >= l.window {
		w = nil
		delete(l.peers, p)
	}
	if w == nil {
		if len(l.peers) >= l.max {
			for q, qw := range l.peers {
				if now.Sub(qw.start) >= l.window {
					delete(l.peers, q)
				}
			}
			if len(l.peers) >= l.max {
				return false
			}
		}
		w = &peerWindow{start: now}
		l.peers[p] = w
	}
	if w.n >= l.limit {
		return false
	}
	w.n++
	return true
}

// size returns the number of peers tracked.
func (l *peerLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.peers)
}
