package lease

import (
	"context"
	"errors"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
)

// A Store is a block store a Collector can list and delete from.
type Store interface {
	spindle.BlockStore
	spindle.BlockLister
}

// A Collector deletes from a store the blocks that no live lease keeps
// (see the package doc). It is safe for concurrent use; passes do not
// overlap.
type Collector struct {
	table *Table
	store Store
	grace time.Duration
	now   func() time.Time
	// OnCollect, if set, is called with the blocks a pass deleted (the
	// node stops announcing them).
	OnCollect func([]spindle.Ref)

	passMu sync.Mutex   // Held by a pass.
	gate   sync.RWMutex // Read-held by Puts; held by a pass while it checks and deletes one block.

	mu   sync.Mutex // Guards seen and last.
	seen map[blocks.Digest]time.Time
	last PassResult
}

// NewCollector returns a collector of the blocks of store that the leases
// of table do not keep, grace (DefaultGrace if zero) after it first sees
// them without one. now may be nil (time.Now).
func NewCollector(table *Table, store Store, grace time.Duration, now func() time.Time) *Collector {
	if grace <= 0 {
		grace = DefaultGrace
	}
	if now == nil {
		now = time.Now
	}
	return &Collector{table: table, store: store, grace: grace, now: now, seen: make(map[blocks.Digest]time.Time)}
}

// PassResult counts what a collection pass found and did.
type PassResult struct {
	Blocks      int       // Blocks held when the pass listed them.
	Leased      int       // Kept by a live lease.
	Waiting     int       // Without a lease, within the grace.
	Collectable int       // Without a lease beyond the grace: deleted unless paused.
	Collected   int       // Deleted.
	Failed      int       // Deletes that failed.
	Paused      bool      // Collection was paused: nothing was deleted.
	At          time.Time // When the pass ended.
	Seq         int64     // The pass's number, from 1.
}

// Pass runs one collection pass: it prunes expired leases, lists the
// blocks held, and deletes each that has no live lease and has been
// without one, and not put, for the grace period, unless collection is
// paused. The error is non-nil only if listing failed or ctx ended.
func (c *Collector) Pass(ctx context.Context) (PassResult, error) {
	const op spindle.Op = "lease.Pass"
	c.passMu.Lock()
	defer c.passMu.Unlock()
	var res PassResult
	if err := c.table.Prune(); err != nil {
		return res, spindle.E(op, err)
	}
	now := c.now()
	var candidates []blocks.Digest
	listed := make(map[blocks.Digest]bool)
	err := c.store.List(ctx, func(ref spindle.Ref) error {
		d, err := blocks.ParseRef(ref)
		if err != nil {
			return nil // Not a block this package can name; never collected.
		}
		res.Blocks++
		listed[d] = true
		if c.table.Live(d) {
			res.Leased++
			c.mu.Lock()
			delete(c.seen, d)
			c.mu.Unlock()
			return nil
		}
		c.mu.Lock()
		first, ok := c.seen[d]
		if !ok {
			first = now
			c.seen[d] = now
		}
		c.mu.Unlock()
		if now.Sub(first) < c.grace {
			res.Waiting++
			return nil
		}
		res.Collectable++
		candidates = append(candidates, d)
		return nil
	})
	if err != nil {
		return res, spindle.E(op, err)
	}
	// Forget blocks no longer held, except those put lately: a Put may
	// have stored one after the listing passed it.
	c.mu.Lock()
	for d, t := range c.seen {
		if !listed[d] && now.Sub(t) >= c.grace {
			delete(c.seen, d)
		}
	}
	c.mu.Unlock()
	res.Paused = !c.table.PausedUntil().IsZero()
	var gone []spindle.Ref
	if !res.Paused {
		for _, d := range candidates {
			if ctx.Err() != nil {
				break
			}
			ok, err := c.collect(ctx, d)
			switch {
			case err != nil:
				res.Failed++
			case ok:
				res.Collected++
				gone = append(gone, d.Ref())
			}
		}
	}
	res.At = c.now()
	c.mu.Lock()
	res.Seq = c.last.Seq + 1
	c.last = res
	c.mu.Unlock()
	if len(gone) > 0 && c.OnCollect != nil {
		c.OnCollect(gone)
	}
	if err := ctx.Err(); err != nil {
		return res, spindle.E(op, spindle.Transient, err)
	}
	return res, nil
}

// collect deletes block d if it is still collectable, holding the gate
// so that no Put of it runs meanwhile.
func (c *Collector) collect(ctx context.Context, d blocks.Digest) (bool, error) {
	c.gate.Lock()
	defer c.gate.Unlock()
	if c.table.Live(d) || !c.table.PausedUntil().IsZero() {
		return false, nil
	}
	c.mu.Lock()
	first, ok := c.seen[d]
	c.mu.Unlock()
	if !ok || c.now().Sub(first) < c.grace {
		return false, nil // Put since the listing.
	}
	if err := c.store.Delete(ctx, d.Ref()); err != nil {
		return false, err
	}
	c.mu.Lock()
	delete(c.seen, d)
	c.mu.Unlock()
	return true, nil
}

// Last returns the result of the last pass.
func (c *Collector) Last() PassResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// touch restarts the grace of block d: it was just put.
func (c *Collector) touch(d blocks.Digest) {
	c.mu.Lock()
	c.seen[d] = c.now()
	c.mu.Unlock()
}

// Guard returns the collector's store as one whose Put restarts the
// grace of the block it stores, atomically with respect to collection:
// a block that Put stored (or found already stored) is not deleted
// within the grace after Put returns. Every Put into the store must go
// through the guard. The guard passes List, Delete and any Usage through.
func (c *Collector) Guard() Store { return &guarded{c: c} }

type guarded struct{ c *Collector }

// Get implements [spindle.BlockStore].
func (g *guarded) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	return g.c.store.Get(ctx, ref)
}

// Put implements [spindle.BlockStore].
func (g *guarded) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	g.c.gate.RLock()
	defer g.c.gate.RUnlock()
	ref, err := g.c.store.Put(ctx, data)
	if err != nil {
		return ref, err
	}
	if d, perr := blocks.ParseRef(ref); perr == nil {
		g.c.touch(d)
	}
	return ref, nil
}

// List implements [spindle.BlockLister].
func (g *guarded) List(ctx context.Context, fn func(spindle.Ref) error) error {
	return g.c.store.List(ctx, fn)
}

// Delete implements [spindle.BlockLister].
func (g *guarded) Delete(ctx context.Context, ref spindle.Ref) error {
	return g.c.store.Delete(ctx, ref)
}

// Usage passes through the store's count of what it holds, if it has one.
func (g *guarded) Usage(ctx context.Context) (n, size int64, err error) {
	u, ok := g.c.store.(interface {
		Usage(context.Context) (int64, int64, error)
	})
	if !ok {
		return 0, 0, spindle.E(spindle.Internal, errors.New("the block store does not count what it holds"))
	}
	return u.Usage(ctx)
}

// Recycle passes a lent buffer back to the store, if it lends them.
func (g *guarded) Recycle(b []byte) {
	if r, ok := g.c.store.(blocks.Recycler); ok {
		r.Recycle(b)
	}
}
