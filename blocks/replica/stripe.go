package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
)

// Erasure-coded blocks: stripes of K+M shards.
//
// A block may be stored as a stripe instead of r whole copies (see
// package blocks/shard): [Store.PutStripe] splits it into K data and M
// parity shards, each a block with its own ref, and places them on K+M
// distinct nodes: shard i on the node nearest to its own key (this node
// among the candidates) that holds no shard of the stripe placed before
// it, moving on to the next nearest when a push fails. Each holder
// announces its shard and keeps it as one copy: the repair rounds of
// [Store.Repair] pass shards over (a header in the bytes says what they
// are), since a second copy of a shard would cost what the code saves.
//
// [Store.GetStripe] asks for every shard at once and decodes from the
// first K that arrive, each checked against its ref on arrival (a holder
// that sends other bytes only loses its shard to the count), and checks
// the decoded block against the block's ref, which the writer signed.
// [Store.RepairStripe] rebuilds the shards that no live node holds from
// any K and places each on the nearest node that holds no shard of the
// stripe. Whoever knows the stripe's refs (the writer's entry records
// them) may run it; shard holders alone do not know their siblings.

// PutStripe stores block as a stripe under scheme s and returns the refs
// of its shards, in order. If fewer than K+M shards could be placed but
// at least K were, the block can be read and PutStripe returns the refs
// with a *[spindle.Warning] saying how many are held; with fewer than K,
// it returns an error.
func (s *Store) PutStripe(ctx context.Context, block []byte, sc shard.Scheme) ([]spindle.Ref, error) {
	const op spindle.Op = "replica.PutStripe"
	shards, err := shard.Split(block, sc)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	refs := make([]spindle.Ref, len(shards))
	keys := make([]mh.Multihash, len(shards))
	for i, sh := range shards {
		refs[i] = blocks.RefOf(sh)
		if keys[i], err = keyOf(refs[i]); err != nil {
			return nil, spindle.E(op, err)
		}
	}
	// The candidates for each shard, nearest to its key first, this node
	// among them.
	cands := make([][]peer.ID, len(shards))
	var wg sync.WaitGroup
	for i := range shards {
		wg.Go(func() {
			near, _ := s.closestPeers(ctx, keys[i])
			cands[i] = kb.SortClosestPeers(append(near, s.h.ID()), kb.ConvertKey(string(keys[i])))
		})
	}
	wg.Wait()
	// Each shard claims its node in order, so that shard i goes to the
	// node nearest its key that no earlier shard took; then all are
	// pushed at once, a failed push moving on to the next free node.
	pl := newPlacement()
	first := make([]peer.ID, len(shards))
	for i := range shards {
		first[i], _ = pl.take(i, cands[i], nil, nil)
	}
	errs := make([]error, len(shards))
	for i := range shards {
		wg.Go(func() { _, errs[i] = s.place(ctx, pl, i, refs[i], shards[i], cands[i], nil, first[i]) })
	}
	wg.Wait()
	placed := 0
	var problems []error
	for i, err := range errs {
		if err == nil {
			placed++
		} else {
			problems = append(problems, fmt.Errorf("shard %d: %w", i, err))
		}
	}
	if placed < sc.K {
		return nil, spindle.E(op, spindle.Transient, fmt.Sprintf("%d of %d shards placed, %d needed to read the block: %v", placed, sc.N(), sc.K, errors.Join(problems...)))
	}
	if placed < sc.N() {
		return refs, &spindle.Warning{Problems: []error{spindle.E(op, spindle.Transient, fmt.Sprintf("%d of %d shards placed: %v", placed, sc.N(), errors.Join(problems...)))}}
	}
	return refs, nil
}

// A placement is the nodes that hold a shard of one stripe, or are being
// pushed one: no node takes two shards of a stripe, and a shard put again
// goes where it went before.
type placement struct {
	mu   sync.Mutex
	used map[peer.ID]bool // Nodes claimed by a shard of the stripe.
	to   map[int]peer.ID  // The node each shard was claimed for, by index.
	at   time.Time        // When the first shard was placed (PutShard).
}

func newPlacement() *placement {
	return &placement{used: make(map[peer.ID]bool), to: make(map[int]peer.ID), at: time.Now()}
}

// take claims a node for shard i: the node it was claimed for before,
// unless tried already in this placement of it, else the first of cands
// that is neither used nor tried nor skipped.
func (pl *placement) take(i int, cands []peer.ID, tried map[peer.ID]bool, skip func(peer.ID) bool) (peer.ID, bool) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if p, ok := pl.to[i]; ok && !tried[p] {
		return p, true
	}
	for _, p := range cands {
		if !pl.used[p] && !tried[p] && (skip == nil || !skip(p)) {
			pl.used[p] = true
			pl.to[i] = p
			return p, true
		}
	}
	return "", false
}

// place stores shard i, whose ref is ref, on first if it is set, else on
// the node the placement claims for it (see take), moving on to the next
// free candidate, nearest first, when a push fails, and returns the node
// that took it. A node skip reports is passed over.
func (s *Store) place(ctx context.Context, pl *placement, i int, ref spindle.Ref, data []byte, cands []peer.ID, skip func(peer.ID) bool, first peer.ID) (peer.ID, error) {
	ch := blocks.NewChallenge(data)
	var problems []error
	tried := make(map[peer.ID]bool)
	for {
		p, ok := first, first != ""
		first = ""
		if !ok {
			p, ok = pl.take(i, cands, tried, skip)
		}
		if ok {
			tried[p] = true
		}
		if !ok {
			if len(problems) == 0 {
				return "", spindle.E(spindle.Transient, "the network has no more nodes that can hold a shard")
			}
			return "", errors.Join(problems...)
		}
		var err error
		if p == s.h.ID() {
			err = s.putLocal(ctx, data)
		} else if !s.isUnproven(p) {
			err = s.pushTo(ctx, p, ref, data, ch)
			if errors.Is(err, spindle.Full) {
				s.markFull(p)
			}
		} else {
			err = fmt.Errorf("node %s lately failed to prove it holds a block", p)
		}
		if err == nil {
			if p != s.h.ID() {
				s.countMoved(int64(len(data)))
			}
			return p, nil
		}
		problems = append(problems, err)
	}
}

// putLocal stores data in the local store and announces it.
func (s *Store) putLocal(ctx context.Context, data []byte) error {
	ref, err := s.local.Put(ctx, data)
	if err != nil {
		return err
	}
	s.addHeld(int64(len(data)))
	k, err := keyOf(ref)
	if err != nil {
		return err
	}
	s.announce(k)
	return nil
}

// countMoved counts bytes of shards sent to or fetched from other nodes
// by stripe operations.
func (s *Store) countMoved(n int64) {
	s.mu.Lock()
	s.stripeMoved += n
	s.mu.Unlock()
}

// checkStripe checks that refs are the refs of a stripe of block: K+M of
// them, within the limits of package shard.
func checkStripe(block spindle.Ref, refs []spindle.Ref) (blocks.Digest, error) {
	d, err := blocks.ParseRef(block)
	if err != nil {
		return d, err
	}
	if len(refs) < 2 || len(refs) > shard.MaxData+shard.MaxParity {
		return d, spindle.E(spindle.Invalid, fmt.Sprintf("a stripe of %d shards", len(refs)))
	}
	return d, nil
}

// GetStripe returns the block whose ref is block from its stripe, whose
// shard refs are refs, in order: it fetches every shard at once and
// decodes from the first K that arrive (see [shard.Gather]). Each shard
// is checked against its ref as it arrives, and the block against its
// ref. Error kinds: NotExist when fewer than K shards can be had,
// Integrity when K shards that match their refs decode to another block
// (refs that do not belong to block).
func (s *Store) GetStripe(ctx context.Context, block spindle.Ref, refs []spindle.Ref) ([]byte, error) {
	const op spindle.Op = "replica.GetStripe"
	want, err := checkStripe(block, refs)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	f := newFetch()
	data, err := shard.Gather(ctx, want, refs, func(ctx context.Context, ref spindle.Ref) ([]byte, error) {
		return s.getShard(ctx, ref, f)
	})
	if err != nil {
		return nil, spindle.E(op, fmt.Errorf("block %s: %w", block, err))
	}
	return data, nil
}

// getShard fetches one shard, retrying a fetch that timed out as GetMany
// does, and counts the bytes that came from other nodes.
func (s *Store) getShard(ctx context.Context, ref spindle.Ref, f *fetch) ([]byte, error) {
	local, err := s.local.Get(ctx, ref)
	if err == nil {
		return local, nil
	}
	data, err := s.get(ctx, ref, f)
	for try := 1; err != nil && try < getTries && errors.Is(err, spindle.Transient) && ctx.Err() == nil; try++ {
		data, err = s.get(ctx, ref, f)
	}
	if err == nil {
		s.countMoved(int64(len(data)))
	}
	return data, err
}

// StripeRepair counts what [Store.RepairStripe] did.
type StripeRepair struct {
	Held    int   // Shards found on live nodes.
	Rebuilt int   // Shards rebuilt and placed on another node.
	Failed  int   // Shards missing and not placed.
	Fetched int64 // Bytes of shards fetched from other nodes.
	Pushed  int64 // Bytes of shards pushed to other nodes.
}

// RepairStripe restores the stripe of block, whose shard refs are refs:
// it finds which shards live nodes hold (each holder must prove it), and
// rebuilds each missing shard from K that it fetches and places it on
// the node nearest to the shard's key that holds no other shard of the
// stripe. A rebuilt shard is the very bytes of the lost one, so its ref
// and the writer's entry stay as they were. Fewer than K shards held is
// NotExist: the block is lost.
func (s *Store) RepairStripe(ctx context.Context, block spindle.Ref, refs []spindle.Ref) (StripeRepair, error) {
	const op spindle.Op = "replica.RepairStripe"
	var res StripeRepair
	want, err := checkStripe(block, refs)
	if err != nil {
		return res, spindle.E(op, err)
	}
	// Fetch what can be fetched: a shard's bytes are what its holders
	// must prove they hold.
	type shardState struct {
		data    []byte
		holders map[peer.ID]bool
	}
	states := make([]shardState, len(refs))
	live := newLiveness(s)
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	f := newFetch()
	for i, ref := range refs {
		wg.Go(func() {
			holders := make(map[peer.ID]bool)
			data, err := s.local.Get(ctx, ref)
			if err == nil {
				holders[s.h.ID()] = true
			} else if data, err = s.get(ctx, ref, f); err == nil {
				mu.Lock()
				res.Fetched += int64(len(data))
				mu.Unlock()
			}
			if err != nil {
				states[i] = shardState{holders: holders}
				return
			}
			if h, _, err := shard.Parse(data); err != nil || h.Index != i || h.Block != want {
				states[i] = shardState{holders: holders}
				return
			}
			k, _ := keyOf(ref)
			ch := blocks.NewChallenge(data)
			others, _ := s.liveHolders(ctx, ref, k, ch, live, len(refs))
			for p := range others {
				holders[p] = true
			}
			// A shard placed lately counts before its holder's
			// announcement lands, as in Repair.
			for _, p := range s.recentlyPushed(ref) {
				if !holders[p] && live.proves(ctx, p, ref, ch) {
					holders[p] = true
				}
			}
			states[i] = shardState{data: data, holders: holders}
		})
	}
	wg.Wait()
	s.countMoved(res.Fetched)
	shards := make([][]byte, len(refs))
	pl := newPlacement()
	var missing []int
	for i, st := range states {
		shards[i] = st.data
		for p := range st.holders {
			pl.used[p] = true
		}
		if len(st.holders) > 0 {
			res.Held++
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return res, nil
	}
	var problems []error
	for _, i := range missing {
		data, err := shard.Rebuild(shards, i)
		if err != nil {
			res.Failed += len(missing)
			return res, spindle.E(op, fmt.Errorf("block %s: %w", block, err))
		}
		k, _ := keyOf(refs[i])
		near, err := s.closestPeers(ctx, k)
		if err != nil {
			res.Failed++
			problems = append(problems, err)
			continue
		}
		cands := kb.SortClosestPeers(append(near, s.h.ID()), kb.ConvertKey(string(k)))
		p, err := s.place(ctx, pl, i, refs[i], data, cands, live.down, "")
		if err != nil {
			res.Failed++
			problems = append(problems, fmt.Errorf("shard %d: %w", i, err))
			continue
		}
		if p != s.h.ID() {
			res.Pushed += int64(len(data))
			s.notePush(refs[i], []peer.ID{p})
		}
		res.Rebuilt++
	}
	if res.Failed > 0 {
		return res, spindle.E(op, spindle.Transient, fmt.Errorf("block %s: %w", block, errors.Join(problems...)))
	}
	return res, nil
}

// stripeTTL is how long the placement of a stripe whose shards a client
// puts one by one is remembered: far longer than a put of one block's
// shards takes.
const stripeTTL = 10 * time.Minute

// PutShard stores one shard, which a signed-in user's client split from
// a block and puts through this node's server one by one: on the node
// nearest to the shard's key that holds no other shard of its stripe put
// through this node in the last stripeTTL, moving on to the next nearest
// when a push fails. An error means the shard is held nowhere.
func (s *Store) PutShard(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "replica.PutShard"
	h, _, err := shard.Parse(data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	ref := blocks.RefOf(data)
	k, err := keyOf(ref)
	if err != nil {
		return "", spindle.E(op, err)
	}
	near, _ := s.closestPeers(ctx, k)
	cands := kb.SortClosestPeers(append(near, s.h.ID()), kb.ConvertKey(string(k)))
	if _, err := s.place(ctx, s.stripePlacement(h.Block), h.Index, ref, data, cands, nil, ""); err != nil {
		return "", spindle.E(op, err)
	}
	return ref, nil
}

// stripePlacement returns the placement of the stripe of the block whose
// SHA-256 is block, forgetting those older than stripeTTL.
func (s *Store) stripePlacement(block [32]byte) *placement {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.stripes == nil {
		s.stripes = make(map[[32]byte]*placement)
	}
	for b, pl := range s.stripes {
		if now.Sub(pl.at) > stripeTTL {
			delete(s.stripes, b)
		}
	}
	pl := s.stripes[block]
	if pl == nil {
		pl = newPlacement()
		s.stripes[block] = pl
	}
	return pl
}

// StripeShort reports whether some shard of a stripe, whose shard refs
// are refs, has no holder that answers: neither this node nor a provider
// the DHT names that is connected or can be dialled. It moves no shard
// and asks no proof, so it is cheap enough to run over every stripe a dir
// host leases; RepairStripe, which it is the trigger for, has each
// holder prove what it holds.
func (s *Store) StripeShort(ctx context.Context, refs []spindle.Ref) (bool, error) {
	const op spindle.Op = "replica.StripeShort"
	live := make(map[peer.ID]bool)
	for _, ref := range refs {
		if _, err := s.local.Get(ctx, ref); err == nil {
			continue
		}
		k, err := keyOf(ref)
		if err != nil {
			return false, spindle.E(op, err)
		}
		held, complete := s.anyLive(ctx, k, live)
		if !held {
			if !complete {
				return false, spindle.E(op, spindle.Transient, fmt.Sprintf("the lookup of shard %s did not finish", ref))
			}
			return true, nil
		}
	}
	return false, nil
}

// anyLive reports whether a provider of key k other than this node
// answers: connected, or dialled within BaseTimeout. live remembers the
// answers of one call. complete is false if the lookup ran out of time.
func (s *Store) anyLive(ctx context.Context, k mh.Multihash, live map[peer.ID]bool) (held, complete bool) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.BaseTimeout)
	defer cancel()
	for ai := range s.dht.FindProvidersAsync(lctx, cid.NewCidV1(cid.Raw, k), 0) {
		if ai.ID == s.h.ID() || !s.admitted(ai.ID) {
			continue
		}
		up, ok := live[ai.ID]
		if !ok {
			up = s.h.Network().Connectedness(ai.ID) == network.Connected
			if !up {
				if len(ai.Addrs) > 0 {
					s.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
				}
				dctx, dcancel := context.WithTimeout(lctx, s.cfg.BaseTimeout)
				up = s.h.Connect(dctx, peer.AddrInfo{ID: ai.ID}) == nil
				dcancel()
			}
			live[ai.ID] = up
		}
		if up {
			return true, true
		}
	}
	return false, lctx.Err() == nil
}
