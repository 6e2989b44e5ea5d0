package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/lease"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
)

// LeaseProtocol carries lease renewals from dir hosts to block holders
// (see package blocks/lease).
const LeaseProtocol = "/spindle/lease/1"

// Defaults of the lease settings of Config. Leases live
// lease.DefaultTerm, and blocks without one wait lease.DefaultGrace.
const (
	DefaultLeaseRenew      = 6 * time.Hour
	DefaultCollectInterval = time.Hour
)

const (
	// leaseSlack is how many nodes beyond r nearest to a block's key a
	// dir host leases it with: routing tables differ, and repair may
	// have moved a copy one node further out.
	leaseSlack = 2
	// leaseLookups bounds the DHT lookups of one renewal round, which
	// look for the holders of blocks new in the trees (the node a client
	// wrote through, when it is not among the nearest).
	leaseLookups = 4096
	// leaseWorkers is how many holders a round talks to at once, and
	// how many lookups it runs at once.
	leaseWorkers = 8
	// maxRegions bounds the lookups of the nodes nearest to keyspace
	// regions in one round; enough for a network of some 50 000 nodes.
	maxRegions = 4096
)

// The node's side of leases: as a dir host it renews leases on the
// blocks its trees reference; as a holder it keeps the leases others
// renew and collects the blocks none keeps.
type leases struct {
	table *lease.Table
	coll  *lease.Collector
	term  time.Duration

	roundMu sync.Mutex // Held by a renewal round.
	// refs lists the blocks each hosted tree references: the dir
	// logs' Refs, or a benchmark's made-up trees.
	refs func(context.Context, func(spindle.UserName, []spindle.Ref) error) ([]spindle.UserName, error)

	mu    sync.Mutex                  // Guards what follows.
	extra map[blocks.Digest][]peer.ID // Holders found through the DHT, beyond the nearest.
	last  RenewResult
}

// RenewResult counts what a renewal round did.
type RenewResult struct {
	Users    int           // Users whose trees reference blocks.
	Blocks   int           // Blocks referenced (once per user).
	Holders  int           // Other nodes sent leases.
	Leases   int           // Leases granted, here and by other nodes.
	Refused  int           // Leases other nodes refused (a quota).
	Failed   int           // Nodes that could not be reached.
	Lookups  int           // Blocks whose holders were looked up in the DHT.
	Regions  int           // DHT lookups of the nodes nearest to a keyspace region.
	Damaged  int           // Users whose damaged logs this node cannot read: their blocks are not leased.
	Took     time.Duration // The round's duration.
	At       time.Time     // When it ended.
	LastFail string        // The last failure, if any.
}

// openLeases opens the lease table (Home/leases/journal, or in memory)
// and the collector of the local store.
func (n *Node) openLeases() error {
	cfg := lease.Config{MaxTerm: max(n.cfg.LeaseTerm, lease.DefaultMaxTerm), Now: n.cfg.now, Own: n.host.ID().String()}
	var t *lease.Table
	if n.cfg.Home == "" {
		t = lease.NewTable(cfg)
	} else {
		var err error
		if t, err = lease.OpenTable(filepath.Join(n.cfg.Home, "leases", "journal"), cfg); err != nil {
			return err
		}
		if err := t.Damage(); err != nil {
			n.log.Warn("lease journal damaged; collection paused", "err", err, "until", t.PausedUntil())
		}
	}
	store, ok := n.store.(lease.Store)
	if !ok {
		t.Close()
		return spindle.E(spindle.Internal, "the block store cannot list and delete blocks")
	}
	term := n.cfg.LeaseTerm
	if term <= 0 {
		term = lease.DefaultTerm
	}
	n.leases = &leases{table: t, term: term, coll: lease.NewCollector(t, store, n.cfg.LeaseGrace, n.cfg.now), extra: make(map[blocks.Digest][]peer.ID), refs: n.dir.Refs}
	return nil
}

// leasesOwn reports whether this node, as a dir host, leases the block
// ref: such a block is never trimmed from its store (see
// replica.Config.Keep), whatever its copies elsewhere.
func (n *Node) leasesOwn(ref spindle.Ref) bool {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return true
	}
	return n.leases.table.LiveFrom(d, n.host.ID().String())
}

// startLeases serves the lease protocol and starts the renewal and
// collection loops, unless their intervals are negative.
func (n *Node) startLeases() {
	n.leases.coll.OnCollect = func(refs []spindle.Ref) {
		if err := n.replica.Forget(refs...); err != nil {
			n.log.Warn("lease: stop announcing collected blocks", "err", err)
		}
	}
	p2p.Handle(n.ctx, n.host, protocol.ID(LeaseProtocol), lease.MaxMessage, n.serveLease)
	renew := n.cfg.LeaseRenew
	if renew == 0 {
		renew = DefaultLeaseRenew
	}
	if renew > 0 {
		n.bg.Go(func() {
			// The first round soon after the start, then every interval.
			n.every(min(renew, time.Minute), renew, func() {
				res, err := n.RenewLeases(n.ctx)
				switch {
				case err != nil && n.ctx.Err() == nil:
					n.log.Warn("lease renewal", "err", err)
				case res.Failed > 0 || res.Refused > 0:
					n.log.Warn("leases renewed, some not", "blocks", res.Blocks, "leases", res.Leases, "holders", res.Holders, "unreachable", res.Failed, "refused", res.Refused, "took", res.Took, "last", res.LastFail)
				default:
					n.log.Info("leases renewed", "blocks", res.Blocks, "leases", res.Leases, "holders", res.Holders, "took", res.Took)
				}
				sr, err := n.RepairStripes(n.ctx)
				switch {
				case err != nil && n.ctx.Err() == nil:
					n.log.Warn("stripe repair", "files", sr.Files, "stripes", sr.Stripes, "short", sr.Short, "rebuilt", sr.Rebuilt, "failed", sr.Failed, "moved", sr.Moved, "err", err)
				case sr.Short > 0:
					n.log.Info("stripes repaired", "files", sr.Files, "stripes", sr.Stripes, "short", sr.Short, "rebuilt", sr.Rebuilt, "moved", sr.Moved)
				}
			})
		})
	}
	collect := n.cfg.CollectInterval
	if collect == 0 {
		collect = DefaultCollectInterval
	}
	if collect > 0 {
		n.bg.Go(func() {
			n.every(collect, collect, func() {
				if _, err := n.CollectBlocks(n.ctx); err != nil && n.ctx.Err() == nil {
					n.log.Warn("block collection", "err", err)
				}
			})
		})
	}
}

// every calls fn after first, then every interval (±10 % at random),
// until the node closes.
func (n *Node) every(first, interval time.Duration, fn func()) {
	d := first
	for {
		t := time.NewTimer(d * time.Duration(90+rand.IntN(21)) / 100)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		fn()
		d = interval
	}
}

// CollectBlocks runs one collection pass over the blocks held here (see
// lease.Collector.Pass): it deletes those no live lease keeps that have
// been here without one for the grace period.
func (n *Node) CollectBlocks(ctx context.Context) (lease.PassResult, error) {
	res, err := n.leases.coll.Pass(ctx)
	if res.Collected > 0 || res.Failed > 0 {
		n.log.Info("blocks collected", "collected", res.Collected, "failed", res.Failed, "leased", res.Leased, "waiting", res.Waiting)
	}
	return res, err
}

// RenewLeases runs one renewal round: for every block the trees hosted
// here reference, it renews this node's lease with the nodes that may
// hold it (the r+2 nearest to its key in the routing table, the holders
// found through the DHT when the block first appeared, and this node).
// Rounds do not overlap.
func (n *Node) RenewLeases(ctx context.Context) (RenewResult, error) {
	const op spindle.Op = "node.RenewLeases"
	l := n.leases
	l.roundMu.Lock()
	defer l.roundMu.Unlock()
	start := time.Now()
	self := n.host.ID()
	var res RenewResult

	// The blocks each hosted tree references.
	byUser := make(map[spindle.UserName][]blocks.Digest)
	referenced := make(map[blocks.Digest]bool)
	var all []blocks.Digest
	damaged, err := l.refs(ctx, func(u spindle.UserName, refs []spindle.Ref) error {
		res.Users++
		ds := make([]blocks.Digest, 0, len(refs))
		for _, ref := range refs {
			d, err := blocks.ParseRef(ref)
			if err != nil {
				continue // Not a block anyone can hold.
			}
			ds = append(ds, d)
			if !referenced[d] {
				referenced[d] = true
				all = append(all, d)
			}
		}
		res.Blocks += len(ds)
		byUser[u] = ds
		return nil
	})
	if err != nil {
		return res, spindle.E(op, err)
	}
	res.Damaged = len(damaged)
	if len(damaged) > 0 {
		n.log.Warn("lease: damaged directory logs; the blocks they reference are not leased until they are repaired (spin node -repair)", "users", fmt.Sprint(damaged))
	}

	// This node's own leases, whether it holds the blocks or not: a
	// block pushed here later is then kept too.
	if len(all) > 0 {
		// Grant splits its journal records at lease.MaxDigests itself,
		// and syncs them once.
		granted, err := l.table.Grant(self.String(), l.term, all)
		res.Leases += granted
		if err != nil {
			res.LastFail = err.Error()
		}
	}

	// Holders of blocks new in the trees, found through the DHT, for
	// the copy on the node a client wrote through: remembered for as
	// long as the block stays referenced.
	l.mu.Lock()
	extra := make(map[blocks.Digest][]peer.ID, len(referenced))
	var fresh []blocks.Digest
	for _, d := range all {
		if ps, ok := l.extra[d]; ok {
			extra[d] = ps
		} else {
			fresh = append(fresh, d)
		}
	}
	l.mu.Unlock()
	for d, ps := range n.lookupHolders(ctx, fresh, &res) {
		if len(ps) > 0 {
			extra[d] = ps
		} // Else nothing announced it yet: look again next round.
	}

	// Each block goes to the nodes nearest to its key in the network
	// and to those found holding it.
	r := n.cfg.Replicas
	if r <= 0 {
		r = replica.DefaultReplicas
	}
	nearest := n.nearestNodes(ctx, all, r+leaseSlack, &res)
	byHolder := make(map[peer.ID]map[spindle.UserName][]blocks.Digest)
	add := func(p peer.ID, u spindle.UserName, d blocks.Digest) {
		m := byHolder[p]
		if m == nil {
			m = make(map[spindle.UserName][]blocks.Digest)
			byHolder[p] = m
		}
		m[u] = append(m[u], d)
	}
	for u, ds := range byUser {
		for _, d := range ds {
			near := nearest[d]
			for _, p := range near {
				add(p, u, d)
			}
			for _, p := range extra[d] {
				if p != self && !slices.Contains(near, p) {
					add(p, u, d)
				}
			}
		}
	}
	failures, down := n.sendLeases(ctx, byHolder, &res)
	if len(failures) > 0 {
		res.LastFail = errors.Join(failures...).Error()
	}
	// A holder found through the DHT that cannot be reached is
	// forgotten, so that rounds do not wait for it again; if it comes
	// back holding the block, the next lookup finds it.
	if len(down) > 0 {
		for d, ps := range extra {
			keep := slices.DeleteFunc(slices.Clone(ps), func(p peer.ID) bool { return down[p] })
			if len(keep) == 0 {
				delete(extra, d)
			} else {
				extra[d] = keep
			}
		}
	}
	res.Took = time.Since(start)
	res.At = time.Now()
	l.mu.Lock()
	l.extra = extra
	l.last = res
	l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return res, spindle.E(op, spindle.Transient, err)
	}
	return res, nil
}

// lookupHolders finds, through the DHT, the other nodes that hold each of
// up to leaseLookups of the blocks fresh, leaseWorkers at once.
func (n *Node) lookupHolders(ctx context.Context, fresh []blocks.Digest, res *RenewResult) map[blocks.Digest][]peer.ID {
	fresh = fresh[:min(len(fresh), leaseLookups)]
	found := make(map[blocks.Digest][]peer.ID, len(fresh))
	if len(fresh) == 0 || n.DHT().RoutingTable().Size() == 0 {
		return found
	}
	self := n.host.ID()
	var mu sync.Mutex
	next := make(chan blocks.Digest)
	var wg sync.WaitGroup
	for range min(leaseWorkers, len(fresh)) {
		wg.Go(func() {
			for d := range next {
				var holders []peer.ID
				for _, p := range n.providersOf(ctx, d) {
					if p != self && !slices.Contains(holders, p) {
						holders = append(holders, p)
					}
				}
				mu.Lock()
				res.Lookups++
				found[d] = holders
				mu.Unlock()
			}
		})
	}
feed:
	for _, d := range fresh {
		select {
		case next <- d:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return found
}

// nearestNodes returns, for each block of ds, the want other nodes
// nearest to its key in the network: where Put and repair place its
// copies. A node's routing table knows few of the nodes far from it in
// the keyspace, so the nodes are found by DHT lookups, one per keyspace
// region rather than one per block: the blocks are taken in key order,
// and a lookup's answer (the bucket-size nodes nearest to its target)
// serves every following block whose want nearest among them are
// provably nearer than any node the answer left out. A lookup that
// fails falls back on the routing table.
func (n *Node) nearestNodes(ctx context.Context, ds []blocks.Digest, want int, res *RenewResult) map[blocks.Digest][]peer.ID {
	d := n.DHT()
	lookup := func(k blocks.Digest) ([]peer.ID, error) {
		lctx, cancel := context.WithTimeout(ctx, replica.DefaultBaseTimeout)
		defer cancel()
		return d.GetClosestPeers(lctx, string(k.Multihash()))
	}
	out, lookups := nearestByRegion(ctx, ds, want, d.BucketSize(), n.host.ID(), lookup, d.RoutingTable().NearestPeers)
	res.Regions += lookups
	return out
}

// nearestByRegion is nearestNodes with the DHT as functions: lookup
// returns the bucket nodes nearest to a block's key (fewer if the
// network has fewer), and table the nodes of the routing table nearest
// to a key. It returns the lookups made.
func nearestByRegion(ctx context.Context, ds []blocks.Digest, want, bucket int, self peer.ID, lookupFn func(blocks.Digest) ([]peer.ID, error), table func(kb.ID, int) []peer.ID) (map[blocks.Digest][]peer.ID, int) {
	type item struct {
		d  blocks.Digest
		id kb.ID
	}
	items := make([]item, len(ds))
	for i, d := range ds {
		items[i] = item{d, kb.ConvertKey(string(d.Multihash()))}
	}
	slices.SortFunc(items, func(a, b item) int { return bytes.Compare(a.id, b.id) })
	out := make(map[blocks.Digest][]peer.ID, len(ds))
	lookups := 0
	var (
		cur      []peer.ID
		curIDs   []kb.ID
		target   kb.ID
		reach    *big.Int // The distance from target of the furthest node of cur.
		complete bool     // cur is every node of the network.
	)
	dist := func(a, b kb.ID) *big.Int { return new(big.Int).SetBytes(kb.Xor(a, b)) }
	nearestOf := func(id kb.ID) ([]peer.ID, *big.Int) {
		idx := make([]int, len(cur))
		ds := make([]kb.ID, len(cur))
		for i := range idx {
			idx[i], ds[i] = i, kb.Xor(curIDs[i], id)
		}
		slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(ds[a], ds[b]) })
		idx = idx[:min(want, len(idx))]
		near := make([]peer.ID, len(idx))
		for i, j := range idx {
			near[i] = cur[j]
		}
		if len(idx) == 0 {
			return near, nil
		}
		return near, dist(curIDs[idx[len(idx)-1]], id)
	}
	lookup := func(it item) {
		target = it.id
		peers, err := lookupFn(it.d)
		lookups++
		complete = err == nil && len(peers) < bucket
		if err != nil && len(peers) == 0 {
			peers = table(it.id, bucket)
		}
		cur, curIDs = make([]peer.ID, 0, len(peers)), make([]kb.ID, 0, len(peers))
		reach = new(big.Int)
		for _, p := range peers {
			if p == self {
				continue
			}
			id := kb.ConvertPeerID(p)
			cur, curIDs = append(cur, p), append(curIDs, id)
			if d := dist(id, target); d.Cmp(reach) > 0 {
				reach = d
			}
		}
		// Fewer nodes than wanted: no later lookup finds more.
		complete = complete || len(cur) < want
	}
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		switch {
		case cur == nil:
			lookup(it)
		case complete:
		case lookups >= maxRegions:
			// Enough lookups for one round: the routing table it is.
			out[it.d] = table(it.id, want)
			continue
		default:
			if near, far := nearestOf(it.id); len(near) < want || !covered(far, dist(target, it.id), reach) {
				lookup(it)
			}
		}
		out[it.d], _ = nearestOf(it.id)
	}
	return out, lookups
}

// covered reports whether a node at distance far from a key, where the
// key is at distance off from a lookup's target, is nearer the key than
// any node that the lookup left out, all of which are further than reach
// from the target: such a node X has d(key, X) = d(target, X) xor off >
// reach − off.
func covered(far, off, reach *big.Int) bool {
	return far.Cmp(new(big.Int).Sub(reach, off)) <= 0
}

// providersOf returns the nodes that announce block d, as many as the
// DHT finds within replica.DefaultBaseTimeout.
func (n *Node) providersOf(ctx context.Context, d blocks.Digest) []peer.ID {
	ctx, cancel := context.WithTimeout(ctx, replica.DefaultBaseTimeout)
	defer cancel()
	var out []peer.ID
	for ai := range n.DHT().FindProvidersAsync(ctx, d.CID(), 2*(replica.DefaultReplicas+leaseSlack)) {
		if len(ai.Addrs) > 0 {
			n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
		}
		out = append(out, ai.ID)
	}
	return out
}

// sendLeases sends each holder its leases, leaseWorkers holders at once,
// and returns what failed and the holders that could not be reached.
func (n *Node) sendLeases(ctx context.Context, byHolder map[peer.ID]map[spindle.UserName][]blocks.Digest, res *RenewResult) ([]error, map[peer.ID]bool) {
	var mu sync.Mutex
	var failures []error
	down := make(map[peer.ID]bool)
	next := make(chan peer.ID)
	var wg sync.WaitGroup
	for range min(leaseWorkers, len(byHolder)) {
		wg.Go(func() {
			for p := range next {
				granted, refused, err := n.leaseWith(ctx, p, byHolder[p])
				mu.Lock()
				res.Holders++
				res.Leases += granted
				res.Refused += refused
				if err != nil {
					res.Failed++
					failures = append(failures, err)
					if granted == 0 {
						down[p] = true
					}
				}
				mu.Unlock()
			}
		})
	}
feed:
	for p := range byHolder {
		select {
		case next <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return failures, down
}

// leaseWith renews the leases of one holder, a message per user and
// lease.MaxDigests blocks.
func (n *Node) leaseWith(ctx context.Context, p peer.ID, m map[spindle.UserName][]blocks.Digest) (granted, refused int, err error) {
	for u, ds := range m {
		for len(ds) > 0 {
			k := min(len(ds), lease.MaxDigests)
			req := lease.Request{User: u, Term: n.leases.term, Digests: ds[:k]}
			n.findAddrs(ctx, p)
			ds = ds[k:]
			// Time for the message at the slowest rate a transfer is
			// given (see replica.Config.MinRate).
			cctx, cancel := context.WithTimeout(ctx, replica.DefaultBaseTimeout+time.Duration(k*32)*time.Second/replica.DefaultMinRate)
			resp, err := p2p.Call(cctx, n.host, p, protocol.ID(LeaseProtocol), req.Marshal(), lease.MaxMessage)
			cancel()
			if err != nil {
				return granted, refused, fmt.Errorf("leases with %s: %w", p, err)
			}
			rep, err := lease.UnmarshalReply(resp)
			if err != nil {
				return granted, refused, fmt.Errorf("leases with %s: %w", p, err)
			}
			granted += rep.Granted
			refused += rep.Refused
			if rep.Refused > 0 {
				n.log.Warn("lease: holder refused leases", "peer", p, "refused", rep.Refused, "reason", rep.Reason)
			}
		}
	}
	return granted, refused, nil
}

// findAddrs looks peer p up in the DHT if the node has no address for
// it and no connection to it.
func (n *Node) findAddrs(ctx context.Context, p peer.ID) {
	if len(n.host.Network().ConnsToPeer(p)) > 0 || len(n.host.Peerstore().Addrs(p)) > 0 {
		return
	}
	d := n.DHT()
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, replica.DefaultBaseTimeout)
	defer cancel()
	if ai, err := d.FindPeer(ctx, p); err == nil {
		n.host.Peerstore().AddAddrs(p, ai.Addrs, time.Hour)
	}
}

// serveLease grants the leases a dir host asks for, if it may ask (see
// leaseAllowed). Leases refused for a quota are counted in the reply,
// not an error, so that the dir host learns how many were granted.
func (n *Node) serveLease(ctx context.Context, remote peer.ID, b []byte) ([]byte, error) {
	const op spindle.Op = "node.Lease"
	req, err := lease.UnmarshalRequest(b)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	user, err := spindle.CleanUser(req.User)
	if err != nil || user != req.User {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("lease request for %q, not a clean user name", req.User))
	}
	if err := n.leaseAllowed(ctx, remote, user); err != nil {
		return nil, spindle.E(op, err)
	}
	granted, err := n.leases.table.Grant(remote.String(), req.Term, req.Digests)
	rep := lease.Reply{Granted: granted}
	if err != nil {
		if !errors.Is(err, spindle.Permission) {
			return nil, spindle.E(op, err)
		}
		rep.Refused = len(req.Digests) - granted
		rep.Reason = err.Error()
	}
	return rep.Marshal(), nil
}

// leaseAllowed reports whether peer p may lease blocks here for user's
// tree: if this node knows user's key record, p must be one of its dir
// hosts; if not (the node's key cluster does not hold every user), p
// must be a server of the private DHT that this node knows. Either way
// its leases are bounded by the table's quotas.
func (n *Node) leaseAllowed(ctx context.Context, p peer.ID, user spindle.UserName) error {
	u, err := n.kst().ks.Lookup(ctx, user)
	switch {
	case err == nil:
		for _, a := range u.DirHosts {
			if id, err := p2p.PeerID(a); err == nil && id == p {
				return nil
			}
		}
		return spindle.E(spindle.Permission, user, fmt.Sprintf("peer %s is not a dir host of %s", p, user))
	case errors.Is(err, spindle.NotExist):
		if n.DHT().RoutingTable().Find(p) == "" {
			return spindle.E(spindle.Permission, user, fmt.Sprintf("peer %s is neither a known dir host of %s nor a node of the network", p, user))
		}
		return nil
	default:
		return err
	}
}

// leaseStats fills the lease fields of a status.
func (n *Node) leaseStats() (held, blocksLeased, collectable, waiting int64, renewed int64, paused time.Time) {
	l := n.leases
	ts := l.table.Stats()
	last := l.coll.Last()
	l.mu.Lock()
	renewed = int64(l.last.Leases)
	l.mu.Unlock()
	return int64(ts.Leases), int64(ts.Blocks), int64(last.Collectable), int64(last.Waiting), renewed, ts.PausedUntil
}
