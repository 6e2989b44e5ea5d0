package node

// Limits an operator sets on a home node: how much each writer may store
// (Config.Quotas, Config.DefaultQuota) and how fast blocks may leave and
// arrive (Config.RateUp, Config.RateDown).
//
// A writer's usage is the sum of the sizes of the files in their tree as
// this node hosts it (dirlog.Tree.Bytes), plus the bytes of the blocks
// they have put through the node since their tree last changed: those
// of a file being written, whose entry is not in the tree yet. A block
// put that would take the writer past the quota is refused before it is
// stored, with a Full error that says what the usage and the quota are,
// so a put over quota stores nothing of the file and adds no entry (the
// blocks of the file put before it are unreferenced, and are collected
// as every failed put's are). A delete frees its bytes at once. A
// writer whose tree another node hosts is counted by the blocks put
// here in the last quotaWindow. The bound is exact but for files written
// at the same time by two clients of one writer: a change of the tree
// by one starts the other's count again.

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
)

// quotaWindow is how long blocks put by a writer whose tree this node
// does not host count towards their quota.
const quotaWindow = 24 * time.Hour

// A quotas tracks the blocks writers put that their trees do not count
// yet.
type quotas struct {
	mu      sync.Mutex
	pending map[spindle.UserName]*pendingPuts
}

// pendingPuts are the blocks a writer put since their tree's sequence
// number was seq (or, for a tree hosted elsewhere, since since).
type pendingPuts struct {
	seq   int64
	since time.Time
	bytes int64
	refs  map[spindle.Ref]bool
}

// quotaOf returns the quota of user, 0 for none.
func (n *Node) quotaOf(user spindle.UserName) int64 {
	if q, ok := n.cfg.Quotas[user]; ok {
		return q
	}
	return n.cfg.DefaultQuota
}

// pendingFor returns user's pending puts, started again if the tree
// changed (or the window passed) since they were counted. n.quota.mu is
// held.
func (n *Node) pendingFor(user spindle.UserName) (p *pendingPuts, treeBytes int64, hosted bool) {
	treeBytes, seq, hosted := n.dir.Usage(user)
	p = n.quota.pending[user]
	now := time.Now()
	if p == nil || hosted && p.seq != seq || !hosted && now.Sub(p.since) > quotaWindow {
		p = &pendingPuts{seq: seq, since: now, refs: make(map[spindle.Ref]bool)}
		if n.quota.pending == nil {
			n.quota.pending = make(map[spindle.UserName]*pendingPuts)
		}
		n.quota.pending[user] = p
	}
	return p, treeBytes, hosted
}

// chargeQuota counts a block of size bytes with ref that user puts, or
// refuses it with Full if it would take them past their quota.
func (n *Node) chargeQuota(user spindle.UserName, ref spindle.Ref, size int64) error {
	limit := n.quotaOf(user)
	if limit <= 0 {
		return nil
	}
	n.quota.mu.Lock()
	defer n.quota.mu.Unlock()
	p, treeBytes, hosted := n.pendingFor(user)
	if p.refs[ref] {
		return nil // Put again: counted once.
	}
	if used := treeBytes + p.bytes; used+size > limit {
		where := "the files in your tree and those being written"
		if !hosted {
			where = fmt.Sprintf("the blocks you put through it in the last %v", quotaWindow)
		}
		return spindle.E(spindle.Op("node.Quota"), spindle.Full, user, fmt.Errorf(
			"this node's quota for %s is %s, and %s take %s: a %s block does not fit; delete files (spin rm) or ask the node's operator for more (spin node -quota %s=SIZE)",
			user, spindle.FormatBytes(limit), where, spindle.FormatBytes(used), spindle.FormatBytes(size), user))
	}
	p.refs[ref] = true
	p.bytes += size
	return nil
}

// limitedBlocks is the block store the node serves over the block
// protocol, with the writers' quotas and, to peers over the network, the
// rates.
type limitedBlocks struct {
	spindle.BlockStore
	n        *Node
	up, down *rate.Limiter // Nil for no limit (and on the local socket).
}

// newRateLimiter returns a limiter of bytesPerSec, nil for none. Its burst
// is a second's worth, and at least a block, so that any block passes.
func newRateLimiter(bytesPerSec int64) *rate.Limiter {
	if bytesPerSec <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(bytesPerSec), int(max(bytesPerSec, spindle.MaxBlockSize+64<<10)))
}

// wait waits until l lets size bytes pass.
func wait(ctx context.Context, l *rate.Limiter, size int) error {
	if l == nil {
		return nil
	}
	if err := l.WaitN(ctx, size); err != nil {
		return spindle.E(spindle.Transient, fmt.Errorf("the node's bandwidth limit: %w", err))
	}
	return nil
}

func (l limitedBlocks) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, err := l.BlockStore.Get(ctx, ref)
	if err == nil {
		if werr := wait(ctx, l.up, len(data)); werr != nil {
			return nil, werr
		}
	}
	return data, err
}

// Recycle implements [blocks.Recycler] for the store it wraps, if that
// lends its buffers.
func (l limitedBlocks) Recycle(block []byte) { recycle(l.BlockStore, block) }

// recycle hands block back to store if it is a [blocks.Recycler].
func recycle(store spindle.BlockStore, block []byte) {
	if r, ok := store.(blocks.Recycler); ok {
		r.Recycle(block)
	}
}

func (l limitedBlocks) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	if err := wait(ctx, l.down, len(data)); err != nil {
		return "", err
	}
	if p, ok := p2p.BlockPeer(ctx); ok {
		// Only a writer with a quota pays for the block's hash here (the
		// store hashes it again): this is every put's path.
		if user := l.n.session(p); user != "" && l.n.quotaOf(user) > 0 && l.n.writers.admits(user) {
			ref := blocks.RefOf(data)
			if err := l.n.chargeQuota(user, ref, int64(len(data))); err != nil {
				return "", err
			}
		}
	}
	return l.BlockStore.Put(ctx, data)
}
