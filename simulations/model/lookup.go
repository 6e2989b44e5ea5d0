package model

import (
	"fmt"
	"math/rand/v2"
	"slices"
)

// Kademlia parameters of go-libp2p-kad-dht (amino defaults).
const (
	BucketSize  = 20 // k: peers a bucket holds, and holders of a provider record.
	Concurrency = 10 // α: peers queried at once.
)

// LookupConfig is one lookup run of the model.
type LookupConfig struct {
	Nodes   int
	Lookups int
	Seed    uint64
}

// LookupResult summarises the lookups of a run.
type LookupResult struct {
	Found   int
	Hops    []int // Rounds of queries until the provider was found, per lookup.
	Queried []int // Peers that answered before one held the record, per lookup.
}

// kad is a Kademlia network of random 64-bit IDs with routing tables
// built on demand.
type kad struct {
	rng    *rand.Rand
	ids    []uint64 // Sorted.
	tables map[int][]int
}

// table returns the routing table of node u (index into ids): for each
// bucket (common prefix length i), up to k random nodes of that bucket.
// The nodes sharing exactly i leading bits with u form one contiguous
// range of the sorted IDs.
func (n *kad) table(u int) []int {
	if t, ok := n.tables[u]; ok {
		return t
	}
	var t []int
	id := n.ids[u]
	for i := range 64 {
		// IDs with the first i bits of id and bit i flipped.
		prefix := (id >> (63 - i)) ^ 1
		lo := prefix << (63 - i)
		var hi uint64
		if i == 63 {
			hi = lo
		} else {
			hi = lo | (1<<(63-i) - 1)
		}
		a, _ := slices.BinarySearch(n.ids, lo)
		b, found := slices.BinarySearch(n.ids, hi)
		if found {
			b++
		}
		if b <= a {
			continue
		}
		if b-a <= BucketSize {
			for j := a; j < b; j++ {
				t = append(t, j)
			}
			continue
		}
		picked := make(map[int]bool, BucketSize)
		for len(picked) < BucketSize {
			j := a + n.rng.IntN(b-a)
			if !picked[j] {
				picked[j] = true
				t = append(t, j)
			}
		}
	}
	n.tables[u] = t
	return t
}

// closest returns the k nodes of cand nearest to key by XOR.
func (n *kad) closest(cand []int, key uint64, k int) []int {
	out := slices.Clone(cand)
	slices.SortFunc(out, func(a, b int) int {
		da, db := n.ids[a]^key, n.ids[b]^key
		switch {
		case da < db:
			return -1
		case da > db:
			return 1
		}
		return 0
	})
	return out[:min(k, len(out))]
}

// Lookup runs provider lookups in the model: a key held by its k nearest
// nodes (as a provider record is after Provide), looked up from a random
// node. Each round queries the α nearest known peers not yet queried;
// each answers with the k nearest to the key in its table, or with the
// record if it holds one, which ends the lookup. Answers within a round
// arrive in random order, and Queried counts those before the first
// holder's.
func Lookup(cfg LookupConfig) (LookupResult, error) {
	if cfg.Nodes < BucketSize+1 {
		return LookupResult{}, fmt.Errorf("model: lookup needs more than %d nodes, not %d", BucketSize, cfg.Nodes)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x100c))
	n := &kad{rng: rng, tables: make(map[int][]int)}
	seen := make(map[uint64]bool, cfg.Nodes)
	for len(n.ids) < cfg.Nodes {
		id := rng.Uint64()
		if !seen[id] {
			seen[id] = true
			n.ids = append(n.ids, id)
		}
	}
	slices.Sort(n.ids)
	all := make([]int, cfg.Nodes)
	for i := range all {
		all[i] = i
	}
	var res LookupResult
	for range cfg.Lookups {
		key := rng.Uint64()
		holders := map[int]bool{}
		for _, h := range n.nearestAll(key) {
			holders[h] = true
		}
		from := rng.IntN(cfg.Nodes)
		if holders[from] {
			// The record is in the node's own store.
			res.Found++
			res.Hops = append(res.Hops, 0)
			res.Queried = append(res.Queried, 0)
			continue
		}
		queried := map[int]bool{from: true}
		known := n.closest(n.table(from), key, BucketSize)
		answered := 0
		found := false
		for hop := 1; hop <= 64 && !found; hop++ {
			var round []int
			for _, p := range known {
				if !queried[p] {
					round = append(round, p)
					if len(round) == Concurrency {
						break
					}
				}
			}
			if len(round) == 0 {
				break
			}
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
			var next []int
			for _, p := range round {
				queried[p] = true
				answered++
				if holders[p] {
					found = true
					res.Found++
					res.Hops = append(res.Hops, hop)
					res.Queried = append(res.Queried, answered)
					break
				}
				next = append(next, n.closest(n.table(p), key, BucketSize)...)
			}
			known = n.closest(dedup(append(known, next...)), key, 3*BucketSize)
		}
	}
	return res, nil
}

// nearestAll returns the k nodes of the whole network nearest to key:
// they share the longest prefix with it, so they lie near its place in
// the sorted IDs (within the range of the widest prefix holding k).
func (n *kad) nearestAll(key uint64) []int {
	for l := 64; l >= 0; l-- {
		var lo, hi uint64
		if l == 0 {
			lo, hi = 0, ^uint64(0)
		} else {
			lo = key >> (64 - l) << (64 - l)
			hi = lo | (^uint64(0) >> l)
		}
		a, _ := slices.BinarySearch(n.ids, lo)
		b, found := slices.BinarySearch(n.ids, hi)
		if found {
			b++
		}
		if b-a >= BucketSize {
			r := make([]int, 0, b-a)
			for j := a; j < b; j++ {
				r = append(r, j)
			}
			return n.closest(r, key, BucketSize)
		}
	}
	return nil
}

func dedup(s []int) []int {
	slices.Sort(s)
	return slices.Compact(s)
}

// MeanInt returns the mean of s.
func MeanInt(s []int) float64 {
	if len(s) == 0 {
		return 0
	}
	t := 0
	for _, v := range s {
		t += v
	}
	return float64(t) / float64(len(s))
}
