package replica

import (
	"context"
	"fmt"
	"slices"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
)

// Blocks come home, and copies beyond r go.
//
// The home of a block is the r nodes nearest to its key. A block written
// while one of them is away is placed on the next nearest node instead,
// which then holds a copy beyond the home; when the away node comes back
// (connects again, having been connected and then not since this Store
// started), every node that holds such a copy hands it over:
// for each block held here whose home includes the returning node, a
// holder outside the home (or, if none is, the home's nearest other
// member) challenges the node to prove it holds the block and pushes it if not
// ([Store.homecoming]). The scan starts homeDelay after the connection,
// so that the nodes returning at once are handled in one pass.
//
// A copy held outside its home is trimmed by a repair round once each of
// the r home nodes has proved, in that round, that it holds the block,
// and has been so for Config.TrimGrace: the copy is deleted and no longer
// announced. A node never trims a block that Config.Keep keeps (the
// blocks its own dir host leases), nor one of whose home it is part, so
// a block never goes below r copies that answered for themselves, even
// when several holders trim at once: each trims only on the word of r
// nodes nearer than itself, and the nearest of them trims nothing.
// (Their word is a proof: a sybil near a block's key that kept nothing
// would otherwise talk every holder out of its copy.)

// Defaults for the home settings of Config.
const (
	DefaultTrimGrace = time.Hour
	homeDelay        = time.Second
)

// home returns the r nodes nearest to key k among this node, the nodes
// of its routing table and also, nearest first.
func (s *Store) home(k mh.Multihash, also ...peer.ID) []peer.ID {
	key := kb.ConvertKey(string(k))
	peers := s.dht.RoutingTable().NearestPeers(key, s.cfg.Replicas)
	peers = append(peers, s.h.ID())
	for _, p := range also {
		if !slices.Contains(peers, p) {
			peers = append(peers, p)
		}
	}
	return nearest(k, peers, s.cfg.Replicas)
}

// nearest returns the r of peers nearest to key k, nearest first.
func nearest(k mh.Multihash, peers []peer.ID, r int) []peer.ID {
	peers = kb.SortClosestPeers(peers, kb.ConvertKey(string(k)))
	return peers[:min(len(peers), r)]
}

// Home returns the home of the block ref among the nodes peers (peer IDs):
// the r of them nearest to its address, where its copies belong, nearest
// first. It is for operators and tests that ask where a block should be.
func Home(ref spindle.Ref, peers []string, r int) ([]string, error) {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	ids := make([]peer.ID, len(peers))
	for i, p := range peers {
		if ids[i], err = peer.Decode(p); err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Sprintf("%q is not a peer ID: %v", p, err))
		}
	}
	var out []string
	for _, id := range nearest(d.Multihash(), ids, r) {
		out = append(out, id.String())
	}
	return out, nil
}

// watchPeers runs a homecoming scan for the nodes that connect again
// after they were gone, homeDelay after the first of a batch, one scan at
// a time, until the Store closes. Nodes met for the first time since the
// start are not scanned for: they are not coming back to anything here.
func (s *Store) watchPeers() {
	sub, err := s.h.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
	if err != nil {
		return
	}
	defer sub.Close()
	pending := make(map[peer.ID]bool)
	gone := make(map[peer.ID]bool)
	var timer <-chan time.Time
	busy := false
	done := make(chan struct{}, 1)
	for {
		select {
		case <-s.ctx.Done():
			return
		case e, ok := <-sub.Out():
			if !ok {
				return
			}
			ev := e.(event.EvtPeerConnectednessChanged)
			if ev.Peer == s.h.ID() {
				continue
			}
			if ev.Connectedness == network.NotConnected {
				gone[ev.Peer] = true
				continue
			}
			if ev.Connectedness != network.Connected || !gone[ev.Peer] {
				continue
			}
			delete(gone, ev.Peer)
			pending[ev.Peer] = true
			if timer == nil && !busy {
				timer = time.After(homeDelay)
			}
		case <-timer:
			timer = nil
			peers := make([]peer.ID, 0, len(pending))
			for p := range pending {
				peers = append(peers, p)
			}
			clear(pending)
			busy = true
			s.wg.Go(func() {
				s.homecoming(s.ctx, peers)
				done <- struct{}{}
			})
		case <-done:
			busy = false
			if len(pending) > 0 {
				timer = time.After(homeDelay)
			}
		}
	}
}

// homecoming hands the nodes peers, which have just connected, the
// blocks held here of whose home they are part and which they lack. Of
// the holders, those outside the home push, and the nearest other member
// of the home, so that a block with no copy beyond its home comes home
// too.
func (s *Store) homecoming(ctx context.Context, peers []peer.ID) {
	var members []peer.ID
	for _, p := range peers {
		if s.isMember(p) {
			members = append(members, p)
		}
	}
	if len(members) == 0 || s.draining() {
		return
	}
	refs, err := s.listLocal(ctx)
	if err != nil {
		return
	}
	self := s.h.ID()
	live := newLiveness(s)
	s.each(ctx, refs, func(ref spindle.Ref) {
		k, err := keyOf(ref)
		if err != nil {
			return
		}
		home := s.home(k, members...)
		var (
			data []byte
			ch   blocks.Challenge
		)
		for _, p := range members {
			if !slices.Contains(home, p) || !pushesHome(home, self, p) {
				continue
			}
			if data == nil {
				if data, err = s.localCopy(ctx, ref); err != nil {
					return
				}
				if shard.Is(data) {
					return // Held once, where it was placed (stripe.go).
				}
				ch = blocks.NewChallenge(data)
			}
			if live.proves(ctx, p, ref, ch) || live.down(p) {
				continue
			}
			if done, _ := s.push(ctx, ref, data, blocks.NewChallenge(data), []peer.ID{p}, 1); len(done) > 0 {
				s.notePush(ref, done)
				s.rmu.Lock()
				s.repair.homed++
				s.rmu.Unlock()
			}
		}
	})
	s.rmu.Lock()
	s.repair.homeScans++
	s.rmu.Unlock()
}

// pushesHome reports whether self, a holder of a block whose home is
// home, pushes it to the home's member p: if self is outside the home,
// or is the member nearest to the block other than p.
func pushesHome(home []peer.ID, self, p peer.ID) bool {
	if !slices.Contains(home, self) {
		return true
	}
	for _, q := range home {
		if q != p {
			return q == self
		}
	}
	return false
}

// notePush records that ref was pushed to the nodes to, so that repair
// counts those copies before their announcements land.
func (s *Store) notePush(ref spindle.Ref, to []peer.ID) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	r := s.repair.recent[ref]
	if time.Since(r.at) > recentTTL {
		r.to = nil
	}
	for _, p := range to {
		if !slices.Contains(r.to, p) {
			r.to = append(r.to, p)
		}
	}
	r.at = time.Now()
	s.repair.recent[ref] = r
}

// trim deletes the copy of ref held here if it is beyond the block's
// home: every home node proves that it holds the block, answering ch
// (holders are those known to), this node is not one of them, Config.Keep does not
// keep the block, and it has been so since at least Config.TrimGrace
// ago. It reports whether it deleted the copy.
func (s *Store) trim(ctx context.Context, ref spindle.Ref, k mh.Multihash, ch blocks.Challenge, holders map[peer.ID]bool, live *liveness) bool {
	if s.cfg.TrimGrace < 0 || s.cfg.Keep != nil && s.cfg.Keep(ref) {
		s.notExtra(ref)
		return false
	}
	home := s.home(k)
	if len(home) < s.cfg.Replicas || slices.Contains(home, s.h.ID()) {
		s.notExtra(ref)
		return false
	}
	for _, p := range home {
		if !holders[p] && !live.proves(ctx, p, ref, ch) {
			s.notExtra(ref)
			return false
		}
	}
	s.rmu.Lock()
	since, ok := s.repair.extra[ref]
	if !ok {
		s.repair.extra[ref] = time.Now()
	}
	s.rmu.Unlock()
	if !ok || time.Since(since) < s.cfg.TrimGrace {
		return false
	}
	l, ok := s.local.(spindle.BlockLister)
	if !ok || l.Delete(ctx, ref) != nil {
		return false
	}
	s.notExtra(ref)
	s.quota.release(ref)
	s.prov.StopProviding(k)
	return true
}

// notExtra forgets that ref was found beyond its home.
func (s *Store) notExtra(ref spindle.Ref) {
	s.rmu.Lock()
	delete(s.repair.extra, ref)
	s.rmu.Unlock()
}
