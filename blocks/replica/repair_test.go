package replica_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
)

// repairConfig is the configuration of the repair tests: no background
// rounds unless a test asks for them.
func repairConfig() replica.Config {
	return replica.Config{Replicas: 3, BaseTimeout: 3 * time.Second, RepairInterval: -1}
}

// putBlocks puts n random blocks of size bytes, block i through node
// writers[i%len(writers)], and waits until the last node finds 3
// providers of each.
func putBlocks(t *testing.T, nodes []*node, writers []int, n, size int, seed uint64) []spindle.Ref {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(seed, 77))
	var refs []spindle.Ref
	for i := range n {
		ref, err := nodes[writers[i%len(writers)]].store.Put(ctx, randomBlock(rnd, size))
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		refs = append(refs, ref)
	}
	for _, ref := range refs {
		waitProviders(t, nodes[len(nodes)-1], ref, 3)
	}
	return refs
}

// nearestRunning returns the indexes of the k running nodes other than
// skip nearest to the DHT key of ref, sorted.
func nearestRunning(t *testing.T, nodes []*node, ref spindle.Ref, skip, k int) []int {
	t.Helper()
	c, err := cid.Decode(string(ref))
	if err != nil {
		t.Fatal(err)
	}
	index := make(map[peer.ID]int)
	var ids []peer.ID
	for i, nd := range nodes {
		if i != skip && !nd.stopped {
			ids = append(ids, nd.h.ID())
			index[nd.h.ID()] = i
		}
	}
	var out []int
	for _, p := range kb.SortClosestPeers(ids, kb.ConvertKey(string(c.Hash())))[:k] {
		out = append(out, index[p])
	}
	slices.Sort(out)
	return out
}

// held returns the blocks of refs that node i holds.
func held(nodes []*node, i int, refs []spindle.Ref) []spindle.Ref {
	var out []spindle.Ref
	for _, ref := range refs {
		if nodes[i].has(ref) {
			out = append(out, ref)
		}
	}
	return out
}

// mostHeld returns the node other than skip that holds the most blocks
// of refs, and those blocks.
func mostHeld(nodes []*node, refs []spindle.Ref, skip int) (int, []spindle.Ref) {
	best, most := -1, []spindle.Ref(nil)
	for i := range nodes {
		if h := held(nodes, i, refs); i != skip && len(h) > len(most) {
			best, most = i, h
		}
	}
	return best, most
}

// Killing a holder leaves its blocks with two copies; one repair round on
// a surviving holder brings each back to three, the new copy on the
// nearest running node that lacked it, and pushes nothing else.
func TestRepairAfterHolderDies(t *testing.T) {
	nodes := newNet(t, 10, repairConfig())
	refs := putBlocks(t, nodes, []int{0}, 8, 20000, 1)
	dead, lost := mostHeld(nodes, refs, 0)
	nodes[dead].stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := nodes[0].store.Repair(ctx)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	want := replica.RepairResult{Checked: len(refs), Short: len(lost), Pushed: len(lost), Fixed: len(lost)}
	if res != want {
		t.Fatalf("Repair after node %d died holding %d of %d blocks: %+v, want %+v", dead, len(lost), len(refs), res, want)
	}
	for i, ref := range refs {
		got := holders(nodes, ref)
		if want := append([]int{0}, nearestRunning(t, nodes, ref, 0, 2)...); !slices.Equal(got, want) {
			t.Errorf("block %d held by running nodes %v after repair, want %v (the writer and the 2 nearest)", i, got, want)
		}
	}
	st := nodes[0].store.Stats()
	if st.RepairBacklog != 0 || st.RepairRounds != 1 || st.RepairPushed != int64(len(lost)) || st.LastRepair.IsZero() {
		t.Errorf("stats after the round: %+v", st)
	}
	// A second round finds nothing to do.
	res, err = nodes[0].store.Repair(ctx)
	if err != nil || res.Pushed != 0 || res.Short != 0 {
		t.Errorf("second round: %+v, %v; want nothing pushed", res, err)
	}
}

// A round checks at most RepairBlocks blocks and pushes at most
// RepairBytes (but always one block); what it finds short and cannot push
// is the backlog, which later rounds clear.
func TestRepairBudget(t *testing.T) {
	cfg := repairConfig()
	cfg.RepairBlocks = 5
	cfg.RepairBytes = 1 // One block per round.
	nodes := newNet(t, 8, cfg)
	refs := putBlocks(t, nodes, []int{0}, 10, 10000, 2)
	dead, lost := mostHeld(nodes, refs, 0)
	if len(lost) < 2 {
		t.Skipf("no node but the writer holds two blocks")
	}
	nodes[dead].stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var total replica.RepairResult
	swept := false // Every block checked at least once.
	for round := 1; round <= 10; round++ {
		res, err := nodes[0].store.Repair(ctx)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if res.Checked > cfg.RepairBlocks || res.Pushed > 1 {
			t.Fatalf("round %d checked %d blocks and pushed %d copies; the budget is 5 blocks and one push", round, res.Checked, res.Pushed)
		}
		total.Checked += res.Checked
		total.Pushed += res.Pushed
		total.Deferred += res.Deferred
		st := nodes[0].store.Stats()
		short := 0
		for _, ref := range refs {
			if len(holders(nodes, ref)) < 3 {
				short++
			}
		}
		swept = swept || st.RepairSweepLeft == 0
		if swept && st.RepairBacklog != short {
			t.Fatalf("round %d: backlog %d, but %d blocks are short of copies", round, st.RepairBacklog, short)
		}
		if short == 0 && swept {
			break
		}
	}
	if total.Pushed != len(lost) {
		t.Errorf("pushed %d copies in all for %d lost, want one each", total.Pushed, len(lost))
	}
	if total.Deferred == 0 {
		t.Errorf("no block was deferred by the bytes budget")
	}
	for i, ref := range refs {
		if got := holders(nodes, ref); len(got) != 3 {
			t.Errorf("block %d held by %v after the rounds, want 3 nodes", i, got)
		}
	}
}

// When every block has r live copies, repair rounds on every node push
// nothing: no node accepts a byte of replicas.
func TestRepairNothingToDo(t *testing.T) {
	nodes := newNet(t, 10, repairConfig())
	refs := putBlocks(t, nodes, []int{0, 3, 6, 9}, 12, 5000, 3)
	accepted := func() int64 {
		var n int64
		for _, nd := range nodes {
			n += nd.store.Stats().HeldBytes
		}
		return n
	}
	before := accepted()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, nd := range nodes {
		res, err := nd.store.Repair(ctx)
		if err != nil {
			t.Fatalf("Repair on node %d: %v", i, err)
		}
		want := replica.RepairResult{Checked: len(held(nodes, i, refs))}
		if res != want {
			t.Errorf("Repair on node %d: %+v, want %+v", i, res, want)
		}
	}
	if after := accepted(); after != before {
		t.Errorf("nodes accepted %d bytes of replicas during the rounds, want none", after-before)
	}
	for i, ref := range refs {
		if got := holders(nodes, ref); len(got) != 3 {
			t.Errorf("block %d held by %v, want 3 nodes", i, got)
		}
	}
}

// A node that drains before it closes leaves r copies of each of its
// blocks on the other nodes, and takes no replicas meanwhile.
func TestDrain(t *testing.T) {
	nodes := newNet(t, 10, repairConfig())
	refs := putBlocks(t, nodes, []int{0, 1, 2, 3, 4}, 15, 8000, 4)
	leaver, mine := mostHeld(nodes, refs, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := nodes[leaver].store.Drain(ctx)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	want := replica.DrainResult{Blocks: len(mine), Handed: len(mine), Pushed: len(mine)}
	if res != want {
		t.Fatalf("Drain of node %d holding %d blocks: %+v, want %+v (one copy handed on for each)", leaver, len(mine), res, want)
	}
	if _, err := nodes[leaver].store.Repair(ctx); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Repair on a draining store: %v, want Invalid", err)
	}
	if st := nodes[leaver].store.Stats(); !st.Draining {
		t.Errorf("stats of a draining store: %+v", st)
	}
	// Another node's put does not place a copy on the leaving node.
	other := (leaver + 1) % len(nodes)
	for i := range 6 {
		ref, err := nodes[other].store.Put(ctx, randomBlock(rand.New(rand.NewPCG(uint64(i), 5)), 3000))
		if err != nil {
			t.Fatalf("Put while node %d drains: %v", leaver, err)
		}
		if nodes[leaver].has(ref) {
			t.Fatalf("a draining node took a replica")
		}
	}
	nodes[leaver].stop()
	for _, ref := range mine {
		if got := holders(nodes, ref); len(got) != 3 {
			t.Errorf("block %s held by %v after node %d drained and left, want 3 nodes", ref, got, leaver)
		}
	}
}

// The background rounds restore r copies of a dead holder's blocks
// without being asked, within a few repair intervals.
func TestRepairLoop(t *testing.T) {
	cfg := repairConfig()
	cfg.RepairInterval = 300 * time.Millisecond
	nodes := newNet(t, 6, cfg)
	refs := putBlocks(t, nodes, []int{0, 1}, 6, 4000, 5)
	dead := holders(nodes, refs[0])[1]
	nodes[dead].stop()
	deadline := time.Now().Add(15 * time.Second)
	for {
		short := 0
		for _, ref := range refs {
			if len(holders(nodes, ref)) < 3 {
				short++
			}
		}
		if short == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d blocks still short of copies 15 s after a holder died", short)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A holder whose own copy has gone bad still repairs the block: it
// fetches a good copy from the surviving holder, holds it again and
// pushes it on.
func TestRepairDamagedLocalCopy(t *testing.T) {
	nodes := newNetWith(t, 6, repairConfig(), func() spindle.BlockStore {
		s, err := disk.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
	refs := putBlocks(t, nodes, []int{0}, 1, 300000, 6) // A file of its own.
	ref := refs[0]
	dead := holders(nodes, ref)[1]
	nodes[dead].stop()
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	name := nodes[0].local.(*disk.Store).Path(d)
	onDisk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	onDisk[len(onDisk)/2] ^= 0x40
	if err := os.WriteFile(name, onDisk, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := nodes[0].store.Repair(ctx)
	if err != nil || res.Fixed != 1 {
		t.Fatalf("Repair with a damaged local copy: %+v, %v; want the block fixed", res, err)
	}
	if got := holders(nodes, ref); len(got) != 3 || got[0] != 0 {
		t.Fatalf("block held by %v after repair, want node 0 and 2 others", got)
	}
}

// Repair and Drain need a local store that can list its blocks.
func TestRepairNeedsLister(t *testing.T) {
	nodes := newNetWith(t, 2, repairConfig(), func() spindle.BlockStore {
		return struct{ spindle.BlockStore }{new(mem.Store)}
	})
	ctx := context.Background()
	if _, err := nodes[0].store.Repair(ctx); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Repair over a store that cannot list: %v, want Invalid", err)
	}
	if _, err := nodes[1].store.Drain(ctx); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Drain over a store that cannot list: %v, want Invalid", err)
	}
}

// A holder that lost its copy still has its provider record in the DHT
// (for up to 48 hours), and still answers pings; repair asks it whether
// it holds the block, counts it out, and pushes a new copy (to the
// nearest node that lacks it: the loser itself).
func TestRepairHolderLostCopy(t *testing.T) {
	nodes := newNet(t, 10, repairConfig())
	refs := putBlocks(t, nodes, []int{0}, 4, 20000, 3)
	ref := refs[0]
	var loser int
	for _, i := range holders(nodes, ref) {
		if i != 0 {
			loser = i
			break
		}
	}
	if err := nodes[loser].local.(*mem.Store).Delete(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := nodes[0].store.Repair(ctx)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	want := replica.RepairResult{Checked: len(refs), Short: 1, Pushed: 1, Fixed: 1}
	if res != want {
		t.Fatalf("Repair after node %d lost its copy of a block: %+v, want %+v", loser, res, want)
	}
	// The loser is among the nearest nodes, so it holds the new copy.
	if got, want := holders(nodes, ref), append([]int{0}, nearestRunning(t, nodes, ref, 0, 2)...); !slices.Equal(got, want) {
		t.Fatalf("block held by %v after repair, want %v (the writer and the 2 nearest)", got, want)
	}
}
