package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// A Code is how a block is stored: Replicas whole copies, or, when
// Replicas is 0, a stripe of K data and M parity shards held once each.
type Code struct {
	Replicas int
	K, M     int
}

// ParseCode parses "r3" (three whole copies) or "4+2" (a stripe of 4
// data and 2 parity shards).
func ParseCode(s string) (Code, error) {
	if r, ok := strings.CutPrefix(s, "r"); ok {
		n, err := strconv.Atoi(r)
		if err != nil || n < 1 {
			return Code{}, fmt.Errorf("model: bad code %q: want rN with N ≥ 1 or K+M", s)
		}
		return Code{Replicas: n}, nil
	}
	ks, ms, ok := strings.Cut(s, "+")
	k, kerr := strconv.Atoi(ks)
	m, merr := strconv.Atoi(ms)
	if !ok || kerr != nil || merr != nil || k < 1 || m < 0 {
		return Code{}, fmt.Errorf("model: bad code %q: want rN or K+M with K ≥ 1", s)
	}
	return Code{K: k, M: m}, nil
}

func (c Code) String() string {
	if c.Striped() {
		return fmt.Sprintf("%d+%d", c.K, c.M)
	}
	return fmt.Sprintf("r%d", c.Replicas)
}

// Striped reports whether c stores stripes rather than copies.
func (c Code) Striped() bool { return c.Replicas == 0 }

// pieces is the number of distinct pieces of a block: 1 for copies (the
// block itself), K+M shards for a stripe.
func (c Code) pieces() int {
	if c.Striped() {
		return c.K + c.M
	}
	return 1
}

// need is how many pieces with a live holder make a block readable.
func (c Code) need() int {
	if c.Striped() {
		return c.K
	}
	return 1
}

// Disk is the bytes stored per byte of data when every piece is held
// once (copies: r; stripes: (K+M)/K).
func (c Code) Disk() float64 {
	if c.Striped() {
		return float64(c.K+c.M) / float64(c.K)
	}
	return float64(c.Replicas)
}

// CodedConfig is one run of the model under a code.
type CodedConfig struct {
	Nodes  int
	Files  int
	Blocks int // Blocks per file.
	Code   Code
	Hours  float64 // T.
	Repair float64 // Hours between repair rounds; 0 means no repair.
	Churn  Churn
	Seed   uint64
}

// CodedResult is what a run under a code found.
type CodedResult struct {
	Readable    float64 // Fraction of files readable at T.
	MinReadable float64 // Least fraction readable at time 0 and at each whole hour up to T.
	Lost        int     // Files with a block lost for good at T.
	// Repair is the bytes repair moved over the run, in blocks: for
	// copies, one block per copy pushed; for a stripe, K shards read
	// (one block) and one shard written per shard rebuilt.
	Repair float64
	// RepairFetchAll is Repair counted as blocks/replica's RepairStripe
	// moves bytes: it fetches every shard it can find, not only K. The
	// same as Repair for copies.
	RepairFetchAll float64
	Disk           float64 // Bytes held (online or not) per byte of data at T.
}

// Coded runs the model under cfg.Code. Copies are placed and repaired as
// in [Durability], with the same random draws, so the two agree. A
// stripe places shard i on the online node nearest to shard i's own key
// that holds no earlier shard of the stripe, as blocks/replica's
// PutStripe does (the writer's node is a candidate like any other and
// keeps no whole copy). A stripe is readable while K of its shards have
// an online holder, and lost for good once fewer than K have a holder
// not gone. A repair round rebuilds, for each stripe with at least K
// shards live, every shard with no online holder from K of them and
// places it on the online node nearest its key that holds no shard of
// the stripe. The churn schedule depends only on the seed, nodes, hours
// and churn, so runs of different codes see the same sessions.
func Coded(cfg CodedConfig) (CodedResult, error) {
	c := cfg.Code
	n := c.pieces()
	if c.Striped() && (c.K < 1 || c.M < 0) || !c.Striped() && c.Replicas < 1 {
		return CodedResult{}, fmt.Errorf("model: bad code %v", c)
	}
	width := max(c.Replicas, n)
	if cfg.Nodes < width || cfg.Files < 1 || cfg.Blocks < 1 {
		return CodedResult{}, fmt.Errorf("model: %d nodes, %d files of %d blocks, code %v: need files, blocks ≥ 1 and nodes ≥ %d", cfg.Nodes, cfg.Files, cfg.Blocks, c, width)
	}
	start, events := Schedule(cfg.Nodes, cfg.Hours, cfg.Churn, cfg.Seed)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xb10c))
	online := slices.Clone(start)
	nearest := newRing(cfg.Nodes, rng).nearest
	nb := cfg.Files * cfg.Blocks
	// Piece p = b*n + i is piece i of block b.
	key := make([]uint64, nb*n)
	holders := make([][]int32, nb*n)   // Nodes holding each piece, online or not.
	held := make([][]int32, cfg.Nodes) // Pieces each node holds.
	hold := func(p, node int) {
		holders[p] = append(holders[p], int32(node))
		held[node] = append(held[node], int32(p))
	}
	liveHolder := func(p int) bool {
		return slices.ContainsFunc(holders[p], func(h int32) bool { return online[h] })
	}
	// stripeHas reports whether node holds some piece of block b.
	stripeHas := func(b, node int) bool {
		for p := b * n; p < (b+1)*n; p++ {
			if slices.Contains(holders[p], int32(node)) {
				return true
			}
		}
		return false
	}
	// putPiece puts piece p of block b on the online node nearest its key
	// that holds no piece of b, and reports whether one was found.
	putPiece := func(b, p int) bool {
		done := false
		nearest(key[p], func(node int) bool {
			if online[node] && !stripeHas(b, node) {
				hold(p, node)
				done = true
			}
			return !done
		})
		return done
	}
	// copies puts block b (piece b) on the nearest online nodes without
	// it until it has r online holders, and returns the copies made; as
	// place in Durability.
	copies := func(b int) int {
		live := 0
		for _, h := range holders[b] {
			if online[h] {
				live++
			}
		}
		made := 0
		if live >= c.Replicas {
			return 0
		}
		nearest(key[b], func(node int) bool {
			if online[node] && !slices.Contains(holders[b], int32(node)) {
				hold(b, node)
				live++
				made++
			}
			return live < c.Replicas
		})
		return made
	}
	var up []int
	for i, on := range online {
		if on {
			up = append(up, i)
		}
	}
	if len(up) < width {
		return CodedResult{}, fmt.Errorf("model: %d nodes online at the start, code %v needs %d (seed %d)", len(up), c, width, cfg.Seed)
	}
	for b := range nb {
		if !c.Striped() {
			key[b] = rng.Uint64()
			w := up[rng.IntN(len(up))]
			hold(b, w)
			copies(b)
			continue
		}
		// Each block's shard keys come from a stream of its own, so that
		// K+M and K+M+1 share the keys of their first K+M shards.
		brng := rand.New(rand.NewPCG(cfg.Seed, 0x5a4d0000+uint64(b)))
		for p := b * n; p < (b+1)*n; p++ {
			key[p] = brng.Uint64()
			putPiece(b, p)
		}
	}
	// live counts the pieces of block b with an online holder, and those
	// with any holder.
	live := func(b int) (online, any int) {
		for p := b * n; p < (b+1)*n; p++ {
			if len(holders[p]) > 0 {
				any++
				if liveHolder(p) {
					online++
				}
			}
		}
		return online, any
	}
	readable := func() (files, lost int) {
		for f := range cfg.Files {
			r, l := true, false
			for b := f * cfg.Blocks; b < (f+1)*cfg.Blocks; b++ {
				on, any := live(b)
				r = r && on >= c.need()
				l = l || any < c.need()
			}
			if r {
				files++
			}
			if l {
				lost++
			}
		}
		return files, lost
	}
	var res CodedResult
	var pushed, rebuilt, read, readAll int64
	repair := func() {
		for b := range nb {
			if !c.Striped() {
				if liveHolder(b) {
					pushed += int64(copies(b))
				}
				continue
			}
			on, _ := live(b)
			if on < c.K || on == n {
				continue
			}
			made := 0
			for p := b * n; p < (b+1)*n; p++ {
				if !liveHolder(p) && putPiece(b, p) {
					made++
				}
			}
			if made > 0 {
				rebuilt += int64(made)
				read += int64(c.K)
				readAll += int64(on)
			}
		}
	}
	first, _ := readable()
	res.MinReadable = float64(first) / float64(cfg.Files)
	sample := func() {
		r, _ := readable()
		res.MinReadable = min(res.MinReadable, float64(r)/float64(cfg.Files))
	}
	repairAt, sampleAt := math.Inf(1), 1.0
	if cfg.Repair > 0 {
		repairAt = cfg.Repair
	}
	// catchUp runs the samples and repair rounds due by t, a sample
	// before a repair round at the same time.
	catchUp := func(t float64) {
		for sampleAt <= t || repairAt <= t {
			if sampleAt <= repairAt {
				sample()
				sampleAt++
			} else {
				repair()
				repairAt += cfg.Repair
			}
		}
	}
	for _, ev := range events {
		catchUp(ev.At)
		switch {
		case ev.Gone:
			for _, p := range held[ev.Node] {
				holders[p] = slices.DeleteFunc(holders[p], func(h int32) bool { return int(h) == ev.Node })
			}
			held[ev.Node] = nil
		default:
			online[ev.Node] = ev.Online
		}
	}
	// The samples up to T; no repair round after the last event, as in
	// Durability.
	repairAt = math.Inf(1)
	catchUp(cfg.Hours)
	r, lost := readable()
	res.Readable = float64(r) / float64(cfg.Files)
	res.MinReadable = min(res.MinReadable, res.Readable)
	res.Lost = lost
	var total int
	for _, h := range holders {
		total += len(h)
	}
	if c.Striped() {
		k := float64(c.K)
		res.Repair = float64(read)/k + float64(rebuilt)/k
		res.RepairFetchAll = float64(readAll)/k + float64(rebuilt)/k
		res.Disk = float64(total) / k / float64(nb)
	} else {
		res.Repair = float64(pushed)
		res.RepairFetchAll = res.Repair
		res.Disk = float64(total) / float64(nb)
	}
	res.Repair /= float64(nb)
	res.RepairFetchAll /= float64(nb)
	return res, nil
}
