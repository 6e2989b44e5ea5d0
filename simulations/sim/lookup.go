package sim

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/routing"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev/simulations/report"
)

// LookupConfig is the lookup scenario: Keys blocks, each announced by one
// node, then Lookups provider lookups, each by a node other than the
// provider, over links with home-like latency.
type LookupConfig struct {
	Nodes   []int // One run per size.
	Seed    uint64
	Keys    int
	Lookups int
	// Timeout bounds one lookup.
	Timeout time.Duration
	// NoLatency runs over links without delay (for quick tests).
	NoLatency bool
}

// LookupTable returns an empty table of the lookup scenario.
func LookupTable() *report.Table {
	return &report.Table{
		Title: "lookup: provider lookups over the private DHT (real code, mocknet)",
		Cols:  []string{"nodes", "lookups", "found", "success_pct", "queried_mean", "lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "wall_s"},
	}
}

// LookupResult is one run of the lookup scenario.
type LookupResult struct {
	Nodes, Lookups, Found int
	Queried               []int           // Peers that answered, per found lookup.
	Latency               []time.Duration // Per found lookup, sorted.
	Wall                  time.Duration
}

// Lookup runs the scenario for each size and adds a row per size.
func Lookup(ctx context.Context, cfg LookupConfig, t *report.Table) error {
	for _, n := range cfg.Nodes {
		r, err := lookupOnce(ctx, cfg, n)
		if err != nil {
			return fmt.Errorf("lookup at %d nodes (seed %d): %w", n, cfg.Seed, err)
		}
		q := 0.0
		for _, v := range r.Queried {
			q += float64(v)
		}
		if len(r.Queried) > 0 {
			q /= float64(len(r.Queried))
		}
		t.Add(r.Nodes, r.Lookups, r.Found, 100*float64(r.Found)/float64(r.Lookups), q,
			ms(pct(r.Latency, 50)), ms(pct(r.Latency, 95)), ms(pct(r.Latency, 99)),
			float64(r.Wall.Round(time.Second)/time.Second))
	}
	return nil
}

func ms(d time.Duration) float64 {
	return float64(d.Round(time.Millisecond)) / float64(time.Millisecond)
}

// pct returns the p-th percentile of sorted durations (nearest rank).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := (p*len(sorted) + 99) / 100
	return sorted[max(i-1, 0)]
}

// KeyCID returns the CID of simulated block k of a seed: a raw CIDv1 of a
// SHA-256 that no real block has.
func KeyCID(seed uint64, k int) cid.Cid {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:], seed)
	binary.BigEndian.PutUint64(b[8:], uint64(k))
	sum := sha256.Sum256(b[:])
	m, _ := mh.Encode(sum[:], mh.SHA2_256)
	return cid.NewCidV1(cid.Raw, m)
}

func lookupOnce(ctx context.Context, cfg LookupConfig, nodes int) (LookupResult, error) {
	start := time.Now()
	nc := NetConfig{Nodes: nodes, Seed: cfg.Seed ^ uint64(nodes)}
	if !cfg.NoLatency {
		nc.RTT = HomeRTT
	}
	net, err := NewNet(ctx, nc)
	if err != nil {
		return LookupResult{}, err
	}
	defer net.Close()
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(nodes)))
	provider := make([]int, cfg.Keys)
	for k := range provider {
		provider[k] = rng.IntN(nodes)
	}
	type job struct{ key, from int }
	jobs := make([]job, cfg.Lookups)
	for i := range jobs {
		k := rng.IntN(cfg.Keys)
		from := rng.IntN(nodes - 1)
		if from >= provider[k] {
			from++
		}
		jobs[i] = job{k, from}
	}
	if err := parallel(ctx, 8, cfg.Keys, func(k int) error {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := net.Nodes[provider[k]].DHT.Provide(pctx, KeyCID(cfg.Seed, k), true); err != nil {
			return fmt.Errorf("node %d provides key %d: %w", provider[k], k, err)
		}
		return nil
	}); err != nil {
		return LookupResult{}, err
	}
	res := LookupResult{Nodes: nodes, Lookups: cfg.Lookups}
	var mu sync.Mutex
	parallel(ctx, 8, len(jobs), func(i int) error {
		j := jobs[i]
		want := net.Nodes[provider[j.key]].Host.ID()
		lctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
		qctx, events := routing.RegisterForQueryEvents(lctx)
		answered := 0
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ev := range events {
				if ev.Type == routing.PeerResponse {
					answered++
				}
			}
		}()
		t0 := time.Now()
		found := false
		for ai := range net.Nodes[j.from].DHT.FindProvidersAsync(qctx, KeyCID(cfg.Seed, j.key), 1) {
			if ai.ID == want {
				found = true
			}
		}
		took := time.Since(t0)
		cancel()
		<-done
		if found {
			mu.Lock()
			res.Found++
			res.Queried = append(res.Queried, answered)
			res.Latency = append(res.Latency, took)
			mu.Unlock()
		}
		return nil
	})
	slices.Sort(res.Latency)
	res.Wall = time.Since(start)
	return res, ctx.Err()
}

// parallel calls fn(0…n−1), width at a time, and returns the first error.
func parallel(ctx context.Context, width, n int, fn func(i int) error) error {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
