package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
)

// The hold limit: what a node takes from other nodes is bounded by the
// bytes it holds, counted from its store, not by the bytes pushed to it
// since it started (which only ever grew, so a node that had run for
// long refused every copy, and a node restarted took everything again).

// fullRetry is how long a node that refused a push as full is tried
// only after every other candidate: about as long as its collection or
// its own trimming takes to make room.
const fullRetry = 10 * time.Minute

// A usageCounter is a local store that counts what it holds (blocks/disk
// and blocks/mem are).
type usageCounter interface {
	Usage(ctx context.Context) (n, size int64, err error)
}

// recount counts the bytes the local store holds. Bytes put while it
// counts are added to the count, whether the count saw them or not, so
// that the count errs high, on the side of refusing, until the next.
// A local store that cannot count keeps the bytes put since the start.
func (s *Store) recount(ctx context.Context) error {
	u, ok := s.local.(usageCounter)
	if !ok {
		return nil
	}
	s.countMu.Lock()
	defer s.countMu.Unlock()
	s.mu.Lock()
	s.putSince = 0
	s.mu.Unlock()
	_, size, err := u.Usage(ctx)
	if err != nil {
		return fmt.Errorf("counting the blocks held here: %w", err)
	}
	s.mu.Lock()
	s.held = size + s.putSince
	s.mu.Unlock()
	return nil
}

// addHeld counts n bytes put into the local store.
func (s *Store) addHeld(n int64) {
	s.mu.Lock()
	s.held += n
	s.putSince += n
	s.mu.Unlock()
}

// admit decides whether a copy of ref, n bytes, that another node pushes
// may be stored here, and if so counts it as held. A block held already
// is always admitted, since storing it again takes no room.
func (s *Store) admit(ctx context.Context, ref spindle.Ref, n int64) error {
	s.mu.Lock()
	if s.held+n <= s.cfg.HoldLimit {
		s.held += n
		s.putSince += n
		s.mu.Unlock()
		return nil
	}
	held := s.held
	s.mu.Unlock()
	if ok, _ := blocks.Holds(ctx, s.local, ref); ok {
		return nil
	}
	s.mu.Lock()
	s.refused++
	s.full++
	s.mu.Unlock()
	return spindle.E(spindle.Full, fmt.Sprintf("block %s, %d bytes: this node holds %d bytes of blocks and takes copies from other nodes only up to %d", ref, n, held, s.cfg.HoldLimit))
}

// unadmit takes back the count of a copy admitted but not stored.
func (s *Store) unadmit(n int64) {
	s.mu.Lock()
	s.held -= n
	s.mu.Unlock()
}

// markFull records that p refused a push as full.
func (s *Store) markFull(p peer.ID) {
	s.mu.Lock()
	s.fullPeer[p] = time.Now()
	s.pushFull++
	s.mu.Unlock()
}

// fullLast returns peers, those that refused a push as full within
// fullRetry moved to the end, the order otherwise kept.
func (s *Store) fullLast(peers []peer.ID) []peer.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.fullPeer) == 0 {
		return peers
	}
	now := time.Now()
	out := make([]peer.ID, 0, len(peers))
	var full []peer.ID
	for _, p := range peers {
		at, ok := s.fullPeer[p]
		switch {
		case ok && now.Sub(at) < fullRetry:
			full = append(full, p)
		case ok:
			delete(s.fullPeer, p)
			out = append(out, p)
		default:
			out = append(out, p)
		}
	}
	return append(out, full...)
}
