package replica

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
)

// Copies are counted only on proof.
//
// A node's word that it holds a block is not a copy: anyone can run a DHT
// server that acknowledges every push, answers every has request yes and
// keeps nothing. So every copy this Store counts, whether Put makes it
// or repair, drain and the homecoming scan find it, is of a node that
// has just answered a challenge ([p2p.RemoteStore.Prove]): a fresh random
// nonce, answered with a hash of the node's ID and of the nonce and the
// whole block, which the challenger works out from its own copy
// ([blocks.Challenge]). Put pushes and then challenges; repair reads its
// own copy of each block it checks and challenges each provider in place
// of asking whether it holds the block. One challenge serves every node
// asked about a block in one put or one check (each answers for its own
// ID), so the challenger hashes the block once. The proof shows that the node could read the block's bytes when
// asked, within the time allowed, which is what a copy is for.
//
// A node that answers wrongly, or speaks only version 1 of the block
// protocol and so cannot answer at all, is unproven for unprovenTTL: it
// is not pushed to, not counted as a holder, and does not count among the
// nodes nearest to a key when this node decides whether to take a push.
// A node that answers that it holds no copy, or a damaged one, is
// honest: it is not counted for that block, and its copy is made again
// elsewhere, as for a node that is gone.

// unprovenTTL is how long a node that failed a challenge is passed over.
const unprovenTTL = time.Hour

// noteProofFailure records that p answered a challenge wrongly or could
// not answer one (an old peer). Other failures say nothing about p's
// honesty.
func (s *Store) noteProofFailure(p peer.ID, err error) {
	if !errors.Is(err, p2p.ErrProofFailed) && !errors.Is(err, p2p.ErrNoProofs) {
		return
	}
	s.mu.Lock()
	s.unproven[p] = time.Now()
	s.failed++
	s.mu.Unlock()
}

// isUnproven reports whether p failed a challenge within unprovenTTL.
func (s *Store) isUnproven(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.unproven[p]
	if ok && time.Since(at) > unprovenTTL {
		delete(s.unproven, p)
		return false
	}
	return ok
}

// forgetUnproven drops the nodes unproven for longer than unprovenTTL.
func (s *Store) forgetUnproven() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, at := range s.unproven {
		if time.Since(at) > unprovenTTL {
			delete(s.unproven, p)
		}
	}
}

// unprovenCount returns the number of nodes lately unproven (some may
// have served their time).
func (s *Store) unprovenCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.unproven)
}

// withoutUnproven returns peers less those unproven, in a new slice.
func (s *Store) withoutUnproven(peers []peer.ID) []peer.ID {
	out := make([]peer.ID, 0, len(peers))
	for _, p := range peers {
		if !s.isUnproven(p) {
			out = append(out, p)
		}
	}
	return out
}

// proves reports whether p proves, within BaseTimeout, that it holds
// ref, answering the challenge ch made from the block. A peer that does not answer at all is down
// for the rest of the round; one that was found down, or is unproven, is
// not asked, and one that is not a member of a network that admits only
// its members is never counted.
func (l *liveness) proves(ctx context.Context, p peer.ID, ref spindle.Ref, ch blocks.Challenge) bool {
	if l.down(p) || l.s.isUnproven(p) || !l.s.admitted(p) {
		return false
	}
	r, err := l.s.remote(p)
	if err != nil {
		return false
	}
	pctx, cancel := context.WithTimeout(ctx, l.s.cfg.BaseTimeout)
	err = r.Prove(pctx, ref, ch)
	cancel()
	switch {
	case err == nil:
		l.mark(p, true)
		return true
	case errors.Is(err, p2p.ErrProofFailed), errors.Is(err, p2p.ErrNoProofs):
		l.s.noteProofFailure(p, err)
		l.mark(p, true)
	case errors.Is(err, spindle.NotExist), errors.Is(err, spindle.Integrity),
		errors.Is(err, spindle.Invalid), errors.Is(err, spindle.Permission):
		l.mark(p, true) // It answered: no copy, a damaged one, or a refusal.
	case ctx.Err() == nil:
		l.mark(p, false)
	}
	return false
}
