// Package model is an event-driven model of a Spindle network, without
// libp2p, for sizes one process cannot run with the real code (10^4 and
// 10^5 nodes). It models what the real code does and no more:
//
//   - churn: machines that come and go with heavy-tailed (Weibull)
//     session lengths, blocks placed on the writer and the r−1 nodes
//     nearest to their key, and repair rounds that, like
//     blocks/replica's, count a block's live holders and push copies to
//     the nearest live nodes lacking it until r are live;
//   - lookup: Kademlia's iterative provider lookup as go-libp2p-kad-dht
//     runs it (k = 20, α = 10), over routing tables of k peers a bucket.
//
// The same seed gives the same results. The churn schedule is shared
// with the real-code scenario (package sim), so that both run the same
// sessions at the sizes where both fit.
package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// Churn describes how machines come and go.
type Churn struct {
	Availability float64 // Long-run fraction of time a machine is online.
	Shape        float64 // Weibull shape of session lengths (< 1: heavy tailed).
	MeanOnline   float64 // Mean online session, hours.
	// MeanLifetime is the mean time, in hours, until a machine leaves
	// for good (its disk is gone) and a new, empty one takes its place;
	// 0 means never.
	MeanLifetime float64
}

// An Event is a change of a machine at a time (hours).
type Event struct {
	At     float64
	Node   int
	Online bool // The machine comes online (true) or goes offline.
	Gone   bool // The machine leaves for good: its blocks are lost.
}

// weibull draws a Weibull variate with the given shape and mean.
func weibull(rng *rand.Rand, shape, mean float64) float64 {
	scale := mean / math.Gamma(1+1/shape)
	return scale * math.Pow(-math.Log(1-rng.Float64()), 1/shape)
}

// Schedule returns, for n machines over hours, whether each is online at
// time 0 and the events that follow, in time order. The same seed gives
// the same schedule.
func Schedule(n int, hours float64, c Churn, seed uint64) (start []bool, events []Event) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a7))
	meanOff := c.MeanOnline * (1 - c.Availability) / c.Availability
	start = make([]bool, n)
	for i := range n {
		on := rng.Float64() < c.Availability
		start[i] = on
		t := 0.0
		for {
			mean := meanOff
			if on {
				mean = c.MeanOnline
			}
			// The first session is a residual one: uniform in a full one.
			d := weibull(rng, c.Shape, mean)
			if t == 0 {
				d *= rng.Float64()
			}
			t += d
			if t >= hours {
				break
			}
			on = !on
			events = append(events, Event{At: t, Node: i, Online: on})
		}
		if c.MeanLifetime > 0 {
			t := 0.0
			for {
				t += rng.ExpFloat64() * c.MeanLifetime
				if t >= hours {
					break
				}
				events = append(events, Event{At: t, Node: i, Gone: true})
			}
		}
	}
	slices.SortStableFunc(events, func(a, b Event) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return a.Node - b.Node
	})
	return start, events
}

// DurabilityConfig is one churn-durability run of the model.
type DurabilityConfig struct {
	Nodes    int
	Files    int
	Blocks   int     // Blocks per file.
	Replicas int     // r.
	Hours    float64 // T.
	Repair   float64 // Hours between repair rounds; 0 means no repair.
	Churn    Churn
	Seed     uint64
}

// DurabilityResult is what a run found at time T.
type DurabilityResult struct {
	Readable  float64 // Fraction of files with every block on an online machine.
	Surviving float64 // Fraction of files with every block on some machine.
	Pushed    int64   // Copies repair pushed.
	Holders   float64 // Mean holders (online or not) per block at T.
}

// Durability runs the model: files written at time 0 (each block on a
// random online writer and the r−1 online nodes nearest to its key),
// then the churn schedule, with a repair round every cfg.Repair hours in
// which every online holder of each block counts its online holders and,
// if fewer than r, pushes copies to the nearest online nodes without
// one. Nearness is the order of nodes along a ring of random positions
// after the block's key, which ranks nodes as XOR distance does.
func Durability(cfg DurabilityConfig) (DurabilityResult, error) {
	if cfg.Nodes < cfg.Replicas || cfg.Replicas < 1 || cfg.Files < 1 || cfg.Blocks < 1 {
		return DurabilityResult{}, fmt.Errorf("model: %d nodes, %d files of %d blocks, r = %d: need files, blocks, r ≥ 1 and nodes ≥ r", cfg.Nodes, cfg.Files, cfg.Blocks, cfg.Replicas)
	}
	start, events := Schedule(cfg.Nodes, cfg.Hours, cfg.Churn, cfg.Seed)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xb10c))
	online := slices.Clone(start)
	nearest := newRing(cfg.Nodes, rng).nearest
	nb := cfg.Files * cfg.Blocks
	key := make([]uint64, nb)
	holders := make([][]int32, nb)     // Nodes holding each block, online or not.
	held := make([][]int32, cfg.Nodes) // Blocks each node holds.
	has := func(b int, node int) bool { return slices.Contains(holders[b], int32(node)) }
	// place puts block b on the nearest online nodes without it until it
	// has want online holders, and returns the copies made.
	place := func(b, want int) int {
		live := 0
		for _, h := range holders[b] {
			if online[h] {
				live++
			}
		}
		made := 0
		if live >= want {
			return 0
		}
		nearest(key[b], func(n int) bool {
			if online[n] && !has(b, n) {
				holders[b] = append(holders[b], int32(n))
				held[n] = append(held[n], int32(b))
				live++
				made++
			}
			return live < want
		})
		return made
	}
	var up []int
	for i, on := range online {
		if on {
			up = append(up, i)
		}
	}
	if len(up) == 0 {
		return DurabilityResult{}, fmt.Errorf("model: no node is online at the start (seed %d)", cfg.Seed)
	}
	for b := range nb {
		key[b] = rng.Uint64()
		w := up[rng.IntN(len(up))]
		holders[b] = []int32{int32(w)}
		held[w] = append(held[w], int32(b))
		place(b, cfg.Replicas)
	}
	var res DurabilityResult
	repairAt := math.Inf(1)
	if cfg.Repair > 0 {
		repairAt = cfg.Repair
	}
	for _, ev := range events {
		for repairAt <= ev.At {
			for b := range nb {
				// Only a block with an online holder can be repaired.
				if slices.ContainsFunc(holders[b], func(h int32) bool { return online[h] }) {
					res.Pushed += int64(place(b, cfg.Replicas))
				}
			}
			repairAt += cfg.Repair
		}
		switch {
		case ev.Gone:
			for _, b := range held[ev.Node] {
				holders[b] = slices.DeleteFunc(holders[b], func(h int32) bool { return int(h) == ev.Node })
			}
			held[ev.Node] = nil
		default:
			online[ev.Node] = ev.Online
		}
	}
	var readable, surviving, copies int
	for f := range cfg.Files {
		r, s := true, true
		for b := f * cfg.Blocks; b < (f+1)*cfg.Blocks; b++ {
			copies += len(holders[b])
			if len(holders[b]) == 0 {
				s = false
			}
			if !slices.ContainsFunc(holders[b], func(h int32) bool { return online[h] }) {
				r = false
			}
		}
		if r {
			readable++
		}
		if s {
			surviving++
		}
	}
	res.Readable = float64(readable) / float64(cfg.Files)
	res.Surviving = float64(surviving) / float64(cfg.Files)
	res.Holders = float64(copies) / float64(nb)
	return res, nil
}

// A ring places nodes at random positions; the nodes after a key, in ring
// order, rank as XOR distance ranks them.
type ring struct {
	pos   []uint64 // Node i sits at pos[i].
	byPos []int    // The nodes in ring order.
}

// newRing places n nodes with rng.
func newRing(n int, rng *rand.Rand) *ring {
	r := &ring{pos: make([]uint64, n), byPos: make([]int, n)}
	for i := range r.pos {
		r.pos[i] = rng.Uint64()
	}
	for i := range r.byPos {
		r.byPos[i] = i
	}
	slices.SortFunc(r.byPos, func(a, b int) int {
		if r.pos[a] < r.pos[b] {
			return -1
		}
		return 1
	})
	return r
}

// nearest calls fn with the nodes after key k on the ring, nearest first,
// until fn returns false.
func (r *ring) nearest(k uint64, fn func(node int) bool) {
	i, _ := slices.BinarySearchFunc(r.byPos, k, func(n int, k uint64) int {
		if r.pos[n] < k {
			return -1
		}
		return 1
	})
	for step := range len(r.byPos) {
		if !fn(r.byPos[(i+step)%len(r.byPos)]) {
			return
		}
	}
}
