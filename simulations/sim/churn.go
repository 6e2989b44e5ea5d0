package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
	"spindle.dev/blocks/shard"
	"spindle.dev/simulations/model"
	"spindle.dev/simulations/report"
)

// ChurnConfig is the churn scenario: files written at the start, then
// machines leave and come back on the schedule of [model.Schedule], in
// simulated hours; every Repair hours each online node runs one repair
// round of its real replicated store. After Hours, it counts the files
// whose every block is on an online machine, and reads each file from
// an online node.
type ChurnConfig struct {
	Nodes     int
	Files     int
	Blocks    int // Blocks per file.
	BlockSize int
	Replicas  []int     // One run per r…
	Repair    []float64 // …and per repair interval in hours (0: none).
	// Codes, for ChurnCodes: one run per code (r whole copies or K+M
	// stripes) and repair interval.
	Codes []model.Code
	Hours float64
	Churn model.Churn
	Seed  uint64
}

// ChurnTable returns an empty table of the churn scenario.
func ChurnTable() *report.Table {
	return &report.Table{
		Title: "churn: files readable after T hours of churn (real code, mocknet)",
		Cols:  []string{"nodes", "files", "r", "repair_h", "hours", "put_copies_mean", "readable_pct", "read_ok_pct", "model_readable_pct", "repair_pushes", "model_pushes", "repair_mb", "wall_s"},
	}
}

// Churn runs the scenario for every r and repair interval, adding a row
// for each, beside the model's figure for the same schedule.
func Churn(ctx context.Context, cfg ChurnConfig, t *report.Table) error {
	for _, rep := range cfg.Repair {
		for _, r := range cfg.Replicas {
			row, err := churnOnce(ctx, cfg, model.Code{Replicas: r}, rep)
			if err != nil {
				return fmt.Errorf("churn with r = %d, repair every %vh (seed %d): %w", r, rep, cfg.Seed, err)
			}
			m, err := model.Durability(model.DurabilityConfig{
				Nodes: cfg.Nodes, Files: cfg.Files, Blocks: cfg.Blocks, Replicas: r,
				Hours: cfg.Hours, Repair: rep, Churn: cfg.Churn, Seed: cfg.Seed,
			})
			if err != nil {
				return err
			}
			t.Add(cfg.Nodes, cfg.Files, r, rep, cfg.Hours, row.copies, row.readable, row.readOK,
				100*m.Readable, row.pushes, m.Pushed, float64(row.pushes*int64(cfg.BlockSize))/1e6, float64(row.wall.Round(time.Second)/time.Second))
		}
	}
	return nil
}

// ChurnCodesTable returns an empty table of the churn scenario run
// under codes, whole copies against stripes.
func ChurnCodesTable() *report.Table {
	return &report.Table{
		Title: "churn: copies against stripes on one churn schedule (real code, mocknet), beside model.Coded",
		Cols: []string{"nodes", "files", "avail", "code", "repair_h", "hours", "placed_mean",
			"readable_pct", "read_ok_pct", "min_readable_pct", "lost_files", "repair_x", "disk_end_x",
			"model_readable_pct", "model_min_readable_pct", "model_lost_files", "model_repair_x", "model_disk_end_x", "wall_s"},
	}
}

// ChurnCodes runs the scenario for every code and repair interval of
// cfg, adding a row for each beside model.Coded's figures for the same
// schedule, nodes, files and code. placed_mean is the copies or shards
// the put placed per block; min_readable_pct the least readable at time
// 0 and at each whole hour, before that hour's repair round; repair_x
// the bytes repair moved per byte of data (copies pushed by Repair and
// handed back to home nodes that returned; shards fetched and pushed by
// RepairStripe, which the model counts as repair_fetchall_x); disk_end_x
// the bytes all nodes hold, online or not, per byte of data at the end
// (shards with their headers). The model's repair figure is
// repair_fetchall_x, counted as RepairStripe moves bytes.
func ChurnCodes(ctx context.Context, cfg ChurnConfig, t *report.Table) error {
	data := float64(cfg.Files * cfg.Blocks * cfg.BlockSize)
	for _, rep := range cfg.Repair {
		for _, c := range cfg.Codes {
			row, err := churnOnce(ctx, cfg, c, rep)
			if err != nil {
				return fmt.Errorf("churn with %v, repair every %vh (seed %d): %w", c, rep, cfg.Seed, err)
			}
			m, err := model.Coded(model.CodedConfig{
				Nodes: cfg.Nodes, Files: cfg.Files, Blocks: cfg.Blocks, Code: c,
				Hours: cfg.Hours, Repair: rep, Churn: cfg.Churn, Seed: cfg.Seed,
			})
			if err != nil {
				return err
			}
			t.Add(cfg.Nodes, cfg.Files, cfg.Churn.Availability, c.String(), rep, cfg.Hours, row.copies,
				row.readable, row.readOK, row.minReadable, row.lost,
				float64(row.repairBytes)/data, float64(row.diskBytes)/data,
				100*m.Readable, 100*m.MinReadable, m.Lost, m.RepairFetchAll, m.Disk,
				float64(row.wall.Round(time.Second)/time.Second))
		}
	}
	return nil
}

type churnRow struct {
	copies           float64 // Copies or shards placed per block by the put.
	readable, readOK float64
	minReadable      float64 // Least readable_pct at time 0 and each whole hour.
	lost             int     // Files with a block held (online or not) too few times to read.
	pushes           int64   // Copies pushed by Repair (copies only).
	repairBytes      int64   // Bytes repair moved: copies pushed by Repair and to returning home nodes, or shards fetched and pushed by RepairStripe.
	diskBytes        int64   // Bytes held by all nodes, online or not, at the end.
	wall             time.Duration
}

// blockData returns the deterministic contents of block b of file f.
func blockData(seed uint64, f, b, size int) []byte {
	var s [32]byte
	binary.BigEndian.PutUint64(s[:], seed)
	binary.BigEndian.PutUint64(s[8:], uint64(f))
	binary.BigEndian.PutUint64(s[16:], uint64(b))
	s[31] = 0xda
	data := make([]byte, size)
	rand.NewChaCha8(s).Read(data)
	return data
}

// churnOnce runs the scenario once under code c: r whole copies put with
// PutCopies and repaired by every online node's Store.Repair, or stripes
// put with PutStripe and repaired, as a dir host does after renewing its
// leases (node.RepairStripes), with StripeShort and RepairStripe.
func churnOnce(ctx context.Context, cfg ChurnConfig, c model.Code, repairHours float64) (churnRow, error) {
	t0 := time.Now()
	r := c.Replicas
	if c.Striped() {
		// A node whose clients put stripes keeps its default r: no
		// whole copies are made of shards, but a node takes a pushed
		// shard only if it is among the 2r+2 nearest to its key.
		r = replica.DefaultReplicas
	}
	net, err := NewNet(ctx, NetConfig{
		Nodes: cfg.Nodes, Seed: cfg.Seed,
		Replica: replica.Config{
			Replicas:       r,
			RepairInterval: -1, // Rounds run on the simulated clock below.
			BaseTimeout:    5 * time.Second,
			CacheBytes:     -1,
		},
	})
	if err != nil {
		return churnRow{}, err
	}
	defer net.Close()
	start, events := model.Schedule(cfg.Nodes, cfg.Hours, cfg.Churn, cfg.Seed)
	for i, on := range start {
		if !on {
			net.SetOnline(ctx, i, false)
		}
	}
	var up []int
	for i, on := range start {
		if on {
			up = append(up, i)
		}
	}
	if len(up) < 2 {
		return churnRow{}, fmt.Errorf("only %d nodes online at the start", len(up))
	}
	// Write the files from random online nodes.
	rng := rand.New(rand.NewPCG(cfg.Seed, 0xf11e))
	nb := cfg.Files * cfg.Blocks
	refs := make([]spindle.Ref, nb)      // Block i is block i%Blocks of file i/Blocks.
	stripes := make([][]spindle.Ref, nb) // Its shards' refs, for stripes.
	writers := make([]int, nb)
	for i := range writers {
		writers[i] = up[rng.IntN(len(up))]
	}
	copies := make([]int, nb)
	err = parallel(ctx, 8, nb, func(i int) error {
		f, b := i/cfg.Blocks, i%cfg.Blocks
		data := blockData(cfg.Seed, f, b, cfg.BlockSize)
		st := net.Nodes[writers[i]].Store
		if !c.Striped() {
			ref, n, err := st.PutCopies(ctx, data)
			if err != nil {
				return fmt.Errorf("node %d puts block %d of file %d: %w", writers[i], b, f, err)
			}
			refs[i], copies[i] = ref, n
			return nil
		}
		srefs, err := st.PutStripe(ctx, data, shard.Scheme{K: c.K, M: c.M})
		if w := (*spindle.Warning)(nil); err != nil && !errors.As(err, &w) {
			return fmt.Errorf("node %d puts block %d of file %d as %v: %w", writers[i], b, f, c, err)
		}
		refs[i], stripes[i] = blocks.RefOf(data), srefs
		return nil
	})
	if err != nil {
		return churnRow{}, err
	}
	// What to wait for: each copy's or shard's holders other than the
	// writer announced.
	var ann []announced
	if c.Striped() {
		held := holdings(ctx, net)
		for i, srefs := range stripes {
			for _, ref := range srefs {
				hs := held[ref]
				copies[i] += len(hs)
				ann = append(ann, announced{ref, writers[i], len(hs) - btoi(slices.Contains(hs, writers[i]))})
			}
		}
	} else {
		for i, ref := range refs {
			ann = append(ann, announced{ref, writers[i], copies[i] - 1})
		}
	}
	// Let the announcements land before the clock starts: repair
	// counts holders by their provider records.
	if err := waitAnnounced(ctx, net, ann); err != nil {
		return churnRow{}, err
	}
	var row churnRow
	// readableNow counts, from what each node holds, the files whose
	// every block has a copy, or K shards, on online nodes, and the
	// files with a block held too few times on any node.
	readableNow := func() (readable, lost int) {
		held := holdings(ctx, net)
		count := func(i int) (on, any int) {
			pieces := []spindle.Ref{refs[i]}
			if c.Striped() {
				pieces = stripes[i]
			}
			for _, ref := range pieces {
				hs := held[ref]
				if len(hs) > 0 {
					any++
				}
				if slices.ContainsFunc(hs, net.Online) {
					on++
				}
			}
			return on, any
		}
		need := 1
		if c.Striped() {
			need = c.K
		}
		for f := range cfg.Files {
			ok, gone := true, false
			for i := f * cfg.Blocks; i < (f+1)*cfg.Blocks; i++ {
				on, any := count(i)
				ok = ok && on >= need
				gone = gone || any < need
			}
			readable += btoi(ok)
			lost += btoi(gone)
		}
		return readable, lost
	}
	order := rand.New(rand.NewPCG(cfg.Seed, 0x4e9a))
	var stripeBytes atomic.Int64
	round := func() {
		var online []int
		for i := range net.Nodes {
			if net.Online(i) {
				online = append(online, i)
			}
		}
		if c.Striped() {
			if len(online) == 0 {
				return
			}
			// One online node is the files' dir host this round: the
			// model assumes one always is (dir hosts are mirrored).
			host := net.Nodes[online[order.IntN(len(online))]].Store
			parallel(ctx, 8, nb, func(i int) error {
				if short, err := host.StripeShort(ctx, stripes[i]); err != nil || !short {
					return nil
				}
				res, _ := host.RepairStripe(ctx, refs[i], stripes[i])
				stripeBytes.Add(res.Fetched + res.Pushed)
				return nil
			})
			return
		}
		// One node after another, in random order: in a real network
		// rounds are spread over the interval (±25 %), not simultaneous.
		order.Shuffle(len(online), func(i, j int) { online[i], online[j] = online[j], online[i] })
		for _, i := range online {
			net.Nodes[i].Store.Repair(ctx)
		}
	}
	first, _ := readableNow()
	row.minReadable = float64(first)
	repairAt, sampleAt := math.Inf(1), 1.0
	if repairHours > 0 {
		repairAt = repairHours
	}
	// catchUp runs the samples and repair rounds due by t, a sample
	// before a repair round at the same time, as model.Coded does.
	catchUp := func(t float64) {
		for sampleAt <= t || repairAt <= t {
			if sampleAt <= repairAt {
				n, _ := readableNow()
				row.minReadable = min(row.minReadable, float64(n))
				sampleAt++
			} else {
				round()
				repairAt += repairHours
			}
		}
	}
	for _, ev := range events {
		catchUp(ev.At)
		if ev.Gone {
			wipe(ctx, net.Nodes[ev.Node])
			continue
		}
		if err := net.SetOnline(ctx, ev.Node, ev.Online); err != nil {
			return churnRow{}, err
		}
	}
	catchUp(cfg.Hours)
	for _, n := range copies {
		row.copies += float64(n)
	}
	row.copies /= float64(len(copies))
	var online []int
	for i := range net.Nodes {
		if net.Online(i) {
			online = append(online, i)
		}
	}
	readable, lost := readableNow()
	row.minReadable = min(row.minReadable, float64(readable))
	row.lost = lost
	reader := rand.New(rand.NewPCG(cfg.Seed, 0x4ead))
	readers := make([]int, cfg.Files)
	for f := range readers {
		readers[f] = online[reader.IntN(len(online))]
	}
	got := make([]bool, cfg.Files)
	parallel(ctx, 8, cfg.Files, func(f int) error {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		st := net.Nodes[readers[f]].Store
		for i := f * cfg.Blocks; i < (f+1)*cfg.Blocks; i++ {
			var err error
			if c.Striped() {
				_, err = st.GetStripe(gctx, refs[i], stripes[i])
			} else {
				_, err = st.Get(gctx, refs[i])
			}
			if err != nil {
				return nil
			}
		}
		got[f] = true
		return nil
	})
	readOK := 0
	for _, g := range got {
		readOK += btoi(g)
	}
	var homed int64
	for _, nd := range net.Nodes {
		st := nd.Store.Stats()
		row.pushes += st.RepairPushed
		homed += st.HomePushed
		_, size, _ := nd.Local.Usage(ctx)
		row.diskBytes += size
	}
	// Copies handed back to home nodes that returned are repair
	// traffic too; the model has no such step.
	row.repairBytes = (row.pushes+homed)*int64(cfg.BlockSize) + stripeBytes.Load()
	row.readable = 100 * float64(readable) / float64(cfg.Files)
	row.readOK = 100 * float64(readOK) / float64(cfg.Files)
	row.minReadable = 100 * row.minReadable / float64(cfg.Files)
	row.wall = time.Since(t0)
	return row, ctx.Err()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// holdings returns the nodes, online or not, whose own store holds each
// ref.
func holdings(ctx context.Context, net *Net) map[spindle.Ref][]int {
	held := make(map[spindle.Ref][]int)
	for i, nd := range net.Nodes {
		nd.Local.List(ctx, func(ref spindle.Ref) error {
			held[ref] = append(held[ref], i)
			return nil
		})
	}
	return held
}

// has reports whether the node's own store holds ref.
func (nd *Node) has(ctx context.Context, ref spindle.Ref) bool {
	_, err := nd.Local.Get(ctx, ref)
	return err == nil
}

// wipe empties a node's store: its machine left for good and a new one
// took its place.
func wipe(ctx context.Context, nd *Node) {
	var refs []spindle.Ref
	nd.Local.List(ctx, func(ref spindle.Ref) error { refs = append(refs, ref); return nil })
	for _, ref := range refs {
		nd.Local.Delete(ctx, ref)
	}
}

// An announced is a block or shard whose holders other than the node
// that put it should be found by a lookup from that node.
type announced struct {
	ref  spindle.Ref
	from int
	want int
}

// waitAnnounced waits until a lookup from each block's or shard's writer
// finds as many providers as it has holders besides the writer, or a
// minute has passed.
func waitAnnounced(ctx context.Context, net *Net, ann []announced) error {
	deadline := time.Now().Add(time.Minute)
	return parallel(ctx, 8, len(ann), func(i int) error {
		a := ann[i]
		k, err := cidOf(a.ref)
		if err != nil {
			return err
		}
		for time.Now().Before(deadline) {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n := 0
			for range net.Nodes[a.from].DHT.FindProvidersAsync(lctx, k, 0) {
				n++
			}
			cancel()
			if n >= a.want {
				return nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil // Go on: repair will find fewer holders, as it would.
	})
}

// cidOf returns the DHT key of a block, as package replica announces it.
func cidOf(ref spindle.Ref) (cid.Cid, error) {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return cid.Undef, err
	}
	return d.CID(), nil
}
