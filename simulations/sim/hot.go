package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/replica"
	"spindle.dev/simulations/report"
)

// HotConfig is the hot-file scenario: node 0 writes a file of Blocks
// blocks with r = 3, then every other node reads it at once, twice.
// It runs once with each reader's cache of fetched blocks and once
// without.
type HotConfig struct {
	Nodes     int
	Blocks    int
	BlockSize int
	Seed      uint64
	NoLatency bool
}

// HotTable returns an empty table of the hot-file scenario.
func HotTable() *report.Table {
	return &report.Table{
		Title: "hot: every node reads one file at once, twice (real code, mocknet)",
		Cols:  []string{"nodes", "readers", "blocks", "cache", "read_ok", "first_all_s", "first_p50_ms", "second_p50_ms", "holder_served_max", "holder_served_per_block", "others_served"},
	}
}

// Hot runs the scenario without and with the cache.
func Hot(ctx context.Context, cfg HotConfig, t *report.Table) error {
	for _, cache := range []bool{false, true} {
		if err := hotOnce(ctx, cfg, cache, t); err != nil {
			return fmt.Errorf("hot file with cache %v (seed %d): %w", cache, cfg.Seed, err)
		}
	}
	return nil
}

func hotOnce(ctx context.Context, cfg HotConfig, cache bool, t *report.Table) error {
	const r = 3
	rc := replica.Config{Replicas: r, RepairInterval: -1, CacheBytes: -1}
	if cache {
		rc.CacheBytes = 0 // The default.
	}
	nc := NetConfig{Nodes: cfg.Nodes, Seed: cfg.Seed, Replica: rc}
	if !cfg.NoLatency {
		nc.RTT = HomeRTT
	}
	net, err := NewNet(ctx, nc)
	if err != nil {
		return err
	}
	defer net.Close()
	refs := make([]spindle.Ref, cfg.Blocks)
	holders := map[int]bool{0: true}
	for b := range refs {
		ref, n, err := net.Nodes[0].Store.PutCopies(ctx, blockData(cfg.Seed, -1, b, cfg.BlockSize))
		if err != nil {
			return err
		}
		if n < r {
			return fmt.Errorf("block %d has %d of %d copies", b, n, r)
		}
		refs[b] = ref
		for _, nd := range net.Nodes {
			if nd.has(ctx, ref) {
				holders[nd.Index] = true
			}
		}
	}
	ann := make([]announced, len(refs))
	for i, ref := range refs {
		ann[i] = announced{ref: ref, from: 0, want: r - 1}
	}
	if err := waitAnnounced(ctx, net, ann); err != nil {
		return err
	}
	readers := cfg.Nodes - 1
	read := func() (ok int, took []time.Duration, all time.Duration) {
		took = make([]time.Duration, readers)
		good := make([]bool, readers)
		start := time.Now()
		parallel(ctx, readers, readers, func(i int) error {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			err := net.Nodes[i+1].Store.GetMany(rctx, refs, func(int, []byte) error { return nil })
			took[i] = time.Since(t0)
			good[i] = err == nil
			return nil
		})
		all = time.Since(start)
		for _, g := range good {
			if g {
				ok++
			}
		}
		slices.Sort(took)
		return ok, took, all
	}
	ok1, took1, all1 := read()
	ok2, took2, _ := read()
	var maxServed, holderServed, othersServed int64
	for _, nd := range net.Nodes {
		s := nd.Served.Load()
		if holders[nd.Index] {
			maxServed = max(maxServed, s)
			holderServed += s
		} else {
			othersServed += s
		}
	}
	t.Add(cfg.Nodes, readers, cfg.Blocks, cache, fmt.Sprintf("%d+%d", ok1, ok2), all1.Round(100*time.Millisecond).Seconds(),
		ms(pct(took1, 50)), ms(pct(took2, 50)), maxServed, float64(holderServed)/float64(cfg.Blocks), othersServed)
	return nil
}
