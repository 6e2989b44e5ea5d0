package replica_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
	"spindle.dev/blocks/shard"
	"spindle.dev/p2p"
)

var fourTwo = shard.Scheme{K: 4, M: 2}

// stripeConfig has no cache of fetched blocks, so that every read of a
// stripe fetches its shards again, and no background repair rounds.
func stripeConfig() replica.Config {
	return replica.Config{Replicas: 3, BaseTimeout: 3 * time.Second, RepairInterval: -1, CacheBytes: -1}
}

// A stripe is a block put as shards, with what the tests need of it.
type stripe struct {
	data    []byte
	ref     spindle.Ref   // Of the block.
	shards  []spindle.Ref // Of its shards, in order.
	holders []int         // holders[i] is the node holding shard i.
}

// putStripes puts n random blocks of size bytes as 4+2 stripes through
// node w, checks that each shard is held by exactly one node and the
// shards of a stripe by distinct nodes, and waits until the last node
// finds the provider of every shard.
func putStripes(t *testing.T, nodes []*node, w, n, size int, seed uint64) []stripe {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(seed, 33))
	var out []stripe
	for range n {
		data := randomBlock(rnd, size)
		refs, err := nodes[w].store.PutStripe(ctx, data, fourTwo)
		if err != nil {
			t.Fatalf("PutStripe: %v", err)
		}
		st := stripe{data: data, ref: blocks.RefOf(data), shards: refs}
		for i, r := range refs {
			h := holders(nodes, r)
			if len(h) != 1 {
				t.Fatalf("shard %d held by nodes %v, want exactly one", i, h)
			}
			if slices.Contains(st.holders, h[0]) {
				t.Fatalf("node %d holds two shards of one stripe (holders %v, then %v)", h[0], st.holders, h)
			}
			st.holders = append(st.holders, h[0])
		}
		out = append(out, st)
	}
	for _, st := range out {
		for _, r := range st.shards {
			waitProviders(t, nodes[len(nodes)-1], r, 1)
		}
	}
	return out
}

// notHolding returns a running node that holds no shard of st.
func notHolding(t *testing.T, nodes []*node, st stripe) int {
	t.Helper()
	for i, nd := range nodes {
		if !nd.stopped && !slices.Contains(st.holders, i) {
			return i
		}
	}
	t.Fatal("every node holds a shard")
	return -1
}

// With 4+2 on 8 nodes, a block is read back whichever 2 holders of its
// shards are gone, and is NotExist with any 3 gone.
func TestStripeSurvivesTwoHoldersGoneNotThree(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	sts := putStripes(t, nodes, 0, 2, 300000, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for si, st := range sts {
		r := notHolding(t, nodes, st)
		n := len(st.holders)
		for a := range n {
			for b := a + 1; b < n; b++ {
				nodes[st.holders[a]].gone.Store(true)
				nodes[st.holders[b]].gone.Store(true)
				got, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
				if err != nil || !bytes.Equal(got, st.data) {
					t.Fatalf("stripe %d, holders of shards %d and %d gone: GetStripe through node %d: %v (same bytes %v)", si, a, b, r, err, bytes.Equal(got, st.data))
				}
				for c := b + 1; c < n && si == 0; c++ {
					nodes[st.holders[c]].gone.Store(true)
					_, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
					if !errors.Is(err, spindle.NotExist) {
						t.Fatalf("holders of shards %d, %d and %d gone: err %v, want NotExist", a, b, c, err)
					}
					nodes[st.holders[c]].gone.Store(false)
				}
				nodes[st.holders[a]].gone.Store(false)
				nodes[st.holders[b]].gone.Store(false)
			}
		}
	}
	// And with two holders switched off for real.
	st := sts[1]
	r := notHolding(t, nodes, st)
	stopped := 0
	for _, h := range st.holders {
		if h != 0 && h != r && stopped < 2 {
			nodes[h].stop()
			stopped++
		}
	}
	got, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
	if err != nil || !bytes.Equal(got, st.data) {
		t.Fatalf("two holders stopped: GetStripe: %v", err)
	}
}

// Holders that serve other bytes than their shards are passed over: the
// shard fails its hash and the block decodes from the others.
func TestStripeWrongShardBypassed(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	st := putStripes(t, nodes, 0, 1, 200000, 2)[0]
	r := notHolding(t, nodes, st)
	// Two liars leave exactly K honest holders: the get must use those.
	var liars []int
	for _, h := range st.holders {
		if h != r && len(liars) < 2 {
			nodes[h].corrupt.Store(true)
			liars = append(liars, h)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
		if err != nil || !bytes.Equal(got, st.data) {
			t.Fatalf("GetStripe with holders %v lying: %v", liars, err)
		}
		if nodes[liars[0]].served.Load() > 0 && nodes[liars[1]].served.Load() > 0 {
			break // Both liars were asked, and passed over.
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lying holders served %d and %d shards: the test did not test them", nodes[liars[0]].served.Load(), nodes[liars[1]].served.Load())
		}
	}
	// A stripe's refs that are not the block's are caught too.
	other := putStripes(t, nodes, 0, 1, 200000, 3)[0]
	if _, err := nodes[r].store.GetStripe(ctx, st.ref, other.shards); !errors.Is(err, spindle.NotExist) && !errors.Is(err, spindle.Integrity) {
		t.Fatalf("GetStripe with another block's shard refs: err %v, want NotExist or Integrity", err)
	}
}

// A get decodes from the first K shards while a holder hangs: it returns
// well within the time a hung fetch is given.
func TestStripeGetFromFastestK(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	st := putStripes(t, nodes, 0, 1, 500000, 4)[0]
	r := notHolding(t, nodes, st)
	hung := nodes[st.holders[0]]
	if st.holders[0] == r {
		hung = nodes[st.holders[1]]
	}
	hung.hang.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadline := time.Now().Add(20 * time.Second)
	for hung.hung.Load() == 0 {
		start := time.Now()
		got, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
		if err != nil || !bytes.Equal(got, st.data) {
			t.Fatalf("GetStripe with a holder hung: %v", err)
		}
		// A fetch from a hung holder is given BaseTimeout (3 s) and more.
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("GetStripe took %v with one holder hung: it waited for the slowest", d)
		}
		if time.Now().After(deadline) {
			t.Fatal("the hung holder was never asked: the test did not test it")
		}
	}
}

// After two holders vanish, RepairStripe rebuilds their shards from the
// others and places each on another node, so the stripe again has K+M
// shards on K+M distinct live nodes and survives two more losses. It
// moves the K shards it reads and the 2 it places, and nothing else.
func TestRepairStripeAfterTwoHoldersVanish(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	st := putStripes(t, nodes, 0, 1, 400000, 5)[0]
	var lost []int
	for i, h := range st.holders {
		if h != 0 && len(lost) < 2 {
			nodes[h].stop()
			lost = append(lost, i)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := nodes[0].store.Stats().StripeMoved
	res, err := nodes[0].store.RepairStripe(ctx, st.ref, st.shards)
	if err != nil {
		t.Fatalf("RepairStripe: %v (%+v)", err, res)
	}
	t.Logf("RepairStripe after 2 of 6 holders vanished: %+v", res)
	shardLen := int64(shard.HeaderSize + (len(st.data)+3)/4)
	if res.Held != 4 || res.Rebuilt != 2 || res.Failed != 0 {
		t.Fatalf("RepairStripe = %+v, want 4 held and 2 rebuilt", res)
	}
	// Node 0 fetches every shard left that it does not hold (K−1 would
	// do when it holds one, but it cannot tell which are left without
	// asking all) and pushes each rebuilt shard it does not keep.
	held0 := int64(0)
	if slices.Contains(st.holders, 0) {
		held0 = 1
	}
	kept0 := int64(0)
	for _, i := range lost {
		if nodes[0].has(st.shards[i]) {
			kept0++
		}
	}
	if res.Fetched != (4-held0)*shardLen || res.Pushed != (2-kept0)*shardLen {
		t.Errorf("RepairStripe moved %d bytes in and %d out, want %d and %d", res.Fetched, res.Pushed, (4-held0)*shardLen, (2-kept0)*shardLen)
	}
	if moved := nodes[0].store.Stats().StripeMoved - before; moved != res.Fetched+res.Pushed {
		t.Errorf("Stats.StripeMoved grew by %d, want %d", moved, res.Fetched+res.Pushed)
	}
	var now []int
	for i, r := range st.shards {
		h := holders(nodes, r)
		if len(h) != 1 {
			t.Fatalf("after repair, shard %d is held by running nodes %v, want one", i, h)
		}
		if slices.Contains(now, h[0]) {
			t.Fatalf("after repair, node %d holds two shards", h[0])
		}
		now = append(now, h[0])
	}
	// Two more holders gone: the stripe still reads. Every running node
	// holds a shard now; node 0 reads its own and fetches the others.
	r := 0
	n := 0
	for _, h := range now {
		if h != r && n < 2 {
			nodes[h].gone.Store(true)
			n++
		}
	}
	for i := range st.shards {
		waitProviders(t, nodes[r], st.shards[i], 1)
	}
	got, err := nodes[r].store.GetStripe(ctx, st.ref, st.shards)
	if err != nil || !bytes.Equal(got, st.data) {
		t.Fatalf("after repair and two more holders gone: GetStripe: %v", err)
	}
	// Nothing to do a second time.
	for _, nd := range nodes {
		nd.gone.Store(false)
	}
	if res, err := nodes[0].store.RepairStripe(ctx, st.ref, st.shards); err != nil || res.Rebuilt != 0 {
		t.Fatalf("second RepairStripe = %+v, %v; want nothing rebuilt", res, err)
	}
}

// A file of 4+2 stripes takes 1.5 times its size on disk, within 10 %,
// and the repair rounds of the holders do not copy shards as they copy
// blocks.
func TestStripeDiskUse(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	const size = 1 << 20
	sts := putStripes(t, nodes, 0, 8, size, 6) // An 8 MiB file.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, nd := range nodes {
		if _, err := nd.store.Repair(ctx); err != nil {
			t.Fatalf("Repair: %v", err)
		}
	}
	var stored int64
	for _, nd := range nodes {
		l := nd.local.(spindle.BlockLister)
		l.List(ctx, func(ref spindle.Ref) error {
			data, err := nd.local.Get(ctx, ref)
			stored += int64(len(data))
			return err
		})
	}
	file := int64(len(sts) * size)
	ratio := float64(stored) / float64(file)
	t.Logf("file %d bytes, stored %d bytes on 8 nodes: %.4fx (4+2)", file, stored, ratio)
	if ratio < 1.5*0.9 || ratio > 1.5*1.1 {
		t.Fatalf("stored %.3fx the file, want 1.5x within 10%%", ratio)
	}
}

// A client that splits a block itself and puts its shards one by one
// through its node, as a signed-in user, gets each shard held once, by
// K+M distinct nodes, also when it puts them all again, and reads the
// block back through the node from any K (shard.Gather over the node's
// block protocol).
func TestUserShardsPlacedApart(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := p2p.Connect(ctx, h, p2p.Addrs(nodes[0].h)[0]); err != nil {
		t.Fatal(err)
	}
	ur := p2p.NewRemoteStore(h, nodes[0].h.ID())
	t.Cleanup(func() { ur.Close() })
	nodes[0].users.Store(h.ID(), true)

	data := randomBlock(rand.New(rand.NewPCG(8, 8)), 700000)
	shards, err := shard.Split(data, fourTwo)
	if err != nil {
		t.Fatal(err)
	}
	refs := make([]spindle.Ref, len(shards))
	errs := make([]error, len(shards))
	var wg sync.WaitGroup
	for i, sh := range shards {
		wg.Go(func() { refs[i], errs[i] = ur.Put(ctx, sh) })
	}
	wg.Wait()
	var seen []int
	for i := range shards {
		if errs[i] != nil {
			t.Fatalf("shard %d: %v", i, errs[i])
		}
		h := holders(nodes, refs[i])
		if len(h) != 1 || slices.Contains(seen, h[0]) {
			t.Fatalf("shard %d held by %v (earlier shards by %v), want one node of its own", i, h, seen)
		}
		seen = append(seen, h[0])
	}
	// The same shards again (a retried put): each goes where it went.
	for i, sh := range shards {
		wg.Go(func() { _, errs[i] = ur.Put(ctx, sh) })
	}
	wg.Wait()
	for i := range shards {
		if errs[i] != nil {
			t.Fatalf("shard %d put again: %v", i, errs[i])
		}
		if h := holders(nodes, refs[i]); !slices.Equal(h, seen[i:i+1]) {
			t.Fatalf("shard %d put again is held by %v, want node %d alone", i, h, seen[i])
		}
	}
	for _, h := range seen[:2] {
		if h != 0 {
			nodes[h].gone.Store(true)
		}
	}
	for _, r := range refs {
		waitProviders(t, nodes[0], r, 1)
	}
	got, err := shard.Gather(ctx, sha256.Sum256(data), refs, ur.Get)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Gather through the node: %v", err)
	}
}

// A node that drains hands each shard it holds to one other node, not
// to r: the shard is still held once when the node has left, and the
// stripe still reads.
func TestDrainHandsShardToOneNode(t *testing.T) {
	nodes := newNet(t, 8, stripeConfig())
	st := putStripes(t, nodes, 0, 1, 100000, 9)[0]
	leaver, idx := st.holders[0], 0
	if leaver == 0 {
		leaver, idx = st.holders[1], 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := nodes[leaver].store.Drain(ctx)
	if err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if res.Blocks != 1 || res.Handed != 1 || res.Pushed != 1 {
		t.Fatalf("Drain of node %d holding one shard: %+v, want it handed to one node", leaver, res)
	}
	nodes[leaver].stop()
	if h := holders(nodes, st.shards[idx]); len(h) != 1 {
		t.Fatalf("after node %d drained and left, its shard is held by %v, want one node", leaver, h)
	}
	got, err := nodes[0].store.GetStripe(ctx, st.ref, st.shards)
	if err != nil || !bytes.Equal(got, st.data) {
		t.Fatalf("GetStripe after a holder drained: %v", err)
	}
}
