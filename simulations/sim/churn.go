package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ipfs/go-cid"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
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
	Hours     float64
	Churn     model.Churn
	Seed      uint64
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
			row, err := churnOnce(ctx, cfg, r, rep)
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

type churnRow struct {
	copies           float64
	readable, readOK float64
	pushes           int64
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

func churnOnce(ctx context.Context, cfg ChurnConfig, r int, repairHours float64) (churnRow, error) {
	t0 := time.Now()
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
	refs := make([][]spindle.Ref, cfg.Files)
	writers := make([]int, cfg.Files*cfg.Blocks)
	for i := range writers {
		writers[i] = up[rng.IntN(len(up))]
	}
	copies := make([]int, len(writers))
	for f := range refs {
		refs[f] = make([]spindle.Ref, cfg.Blocks)
	}
	err = parallel(ctx, 8, len(writers), func(i int) error {
		f, b := i/cfg.Blocks, i%cfg.Blocks
		ref, n, err := net.Nodes[writers[i]].Store.PutCopies(ctx, blockData(cfg.Seed, f, b, cfg.BlockSize))
		if err != nil {
			return fmt.Errorf("node %d puts block %d of file %d: %w", writers[i], b, f, err)
		}
		refs[f][b], copies[i] = ref, n
		return nil
	})
	if err != nil {
		return churnRow{}, err
	}
	// Let the announcements land before the clock starts: repair
	// counts holders by their provider records.
	if err := waitAnnounced(ctx, net, refs, writers, copies, cfg.Blocks); err != nil {
		return churnRow{}, err
	}
	repairAt := cfg.Hours + 1
	if repairHours > 0 {
		repairAt = repairHours
	}
	order := rand.New(rand.NewPCG(cfg.Seed, 0x4e9a))
	round := func() {
		var online []int
		for i := range net.Nodes {
			if net.Online(i) {
				online = append(online, i)
			}
		}
		// One node after another, in random order: in a real network
		// rounds are spread over the interval (±25 %), not simultaneous.
		order.Shuffle(len(online), func(i, j int) { online[i], online[j] = online[j], online[i] })
		for _, i := range online {
			net.Nodes[i].Store.Repair(ctx)
		}
	}
	for _, ev := range events {
		for repairAt <= ev.At {
			round()
			repairAt += repairHours
		}
		if ev.Gone {
			wipe(ctx, net.Nodes[ev.Node])
			continue
		}
		if err := net.SetOnline(ctx, ev.Node, ev.Online); err != nil {
			return churnRow{}, err
		}
	}
	for repairAt <= cfg.Hours {
		round()
		repairAt += repairHours
	}
	var row churnRow
	for _, c := range copies {
		row.copies += float64(c)
	}
	row.copies /= float64(len(copies))
	var online []int
	for i := range net.Nodes {
		if net.Online(i) {
			online = append(online, i)
		}
	}
	readable, readOK := 0, 0
	for f := range refs {
		ok := true
		for _, ref := range refs[f] {
			if !slices.ContainsFunc(online, func(i int) bool { return net.Nodes[i].has(ctx, ref) }) {
				ok = false
			}
		}
		if ok {
			readable++
		}
	}
	reader := rand.New(rand.NewPCG(cfg.Seed, 0x4ead))
	readers := make([]int, len(refs))
	for f := range readers {
		readers[f] = online[reader.IntN(len(online))]
	}
	got := make([]bool, len(refs))
	parallel(ctx, 8, len(refs), func(f int) error {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for _, ref := range refs[f] {
			if _, err := net.Nodes[readers[f]].Store.Get(gctx, ref); err != nil {
				return nil
			}
		}
		got[f] = true
		return nil
	})
	for _, g := range got {
		if g {
			readOK++
		}
	}
	for _, nd := range net.Nodes {
		row.pushes += nd.Store.Stats().RepairPushed
	}
	row.readable = 100 * float64(readable) / float64(len(refs))
	row.readOK = 100 * float64(readOK) / float64(len(refs))
	row.wall = time.Since(t0)
	return row, ctx.Err()
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

// waitAnnounced waits until a lookup from each block's writer finds as
// many providers as the block has copies, or a minute has passed.
func waitAnnounced(ctx context.Context, net *Net, refs [][]spindle.Ref, writers, copies []int, blocks int) error {
	deadline := time.Now().Add(time.Minute)
	return parallel(ctx, 8, len(writers), func(i int) error {
		ref := refs[i/blocks][i%blocks]
		k, err := cidOf(ref)
		if err != nil {
			return err
		}
		for time.Now().Before(deadline) {
			lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			n := 0
			for range net.Nodes[writers[i]].DHT.FindProvidersAsync(lctx, k, 0) {
				n++
			}
			cancel()
			if n >= copies[i]-1 { // Without the writer's own record.
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
