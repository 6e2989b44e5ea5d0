package replica_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// restart starts node i again, as after a reboot: the same peer ID,
// listen addresses and disk, joined through every other running node
// (as a node rejoins through the peers it remembers).
func restart(t *testing.T, nodes []*node, i int, cfg replica.Config) {
	t.Helper()
	old := nodes[i]
	key := old.h.Peerstore().PrivKey(old.h.ID())
	var listen []string
	for _, a := range old.h.Addrs() {
		listen = append(listen, a.String())
	}
	dir := old.local.(*disk.Store).Dir()
	old.stop()
	old.local.(*disk.Store).Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local, err := disk.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	h, err := p2p.NewHost(ctx, p2p.Config{Key: key, ListenAddrs: listen, Memory: 256 << 20})
	if err != nil {
		t.Fatalf("restarting node %d: %v", i, err)
	}
	var boot []spindle.PeerAddr
	for j, nd := range nodes {
		if j != i && !nd.stopped {
			boot = append(boot, p2p.Addrs(nd.h)...)
		}
	}
	d, err := dht.New(ctx, h, boot)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	s, err := replica.New(h, d, local, cfg)
	if err != nil {
		d.Close()
		h.Close()
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	nd := &node{h: h, d: d, local: local, store: s, cancel: scancel}
	srv, scfg := s.Server(func(peer.ID) bool { return false }, nil)
	p2p.ServeBlocks(sctx, h, srv, scfg)
	nodes[i] = nd
	t.Cleanup(nd.stop)
}

// home returns the indexes of the r = 3 nodes nearest to ref, sorted.
func home(t *testing.T, nodes []*node, ref spindle.Ref) []int {
	h := nearest(t, nodes, ref, -1, 3)
	slices.Sort(h)
	return h
}

// A node that was off while blocks were written is handed, once it is
// back, every block of which it is among the r nearest nodes, without a
// repair round; and then repair rounds trim the copies that were placed
// beyond those r nodes meanwhile, never leaving a block with fewer than r,
// and keeping a block that its holder's own dir host leases.
func TestReturnedNodeHoldsItsShare(t *testing.T) {
	const away = 2
	var kept sync.Map // Of spindle.Ref: blocks node 0 keeps as if leased.
	cfgOf := func(i int) replica.Config {
		cfg := replica.Config{Replicas: 3, BaseTimeout: 3 * time.Second, RepairInterval: -1, TrimGrace: 200 * time.Millisecond}
		if i == 0 {
			cfg.Keep = func(ref spindle.Ref) bool { _, ok := kept.Load(ref); return ok }
		}
		return cfg
	}
	nodes := newNetEach(t, 5, cfgOf, diskStores(t))
	before := putBlocks(t, nodes, []int{0, 1}, 6, 20000, 11)

	nodes[away].stop()
	refs := putBlocks(t, nodes, []int{0, 1, 3}, 24, 20000, 12)
	var share []spindle.Ref // Blocks written while away of which node 2 is home.
	for _, ref := range refs {
		if slices.Contains(home(t, nodes, ref), away) {
			share = append(share, ref)
		}
	}
	if len(share) == 0 {
		t.Fatal("node 2 is home to none of the blocks written while it was away")
	}
	for _, ref := range share {
		if nodes[away].has(ref) {
			t.Fatalf("node 2 holds block %s, written while it was away", ref)
		}
	}
	// A block node 0 holds beyond its home, kept as its dir host would.
	var keep spindle.Ref
	for _, ref := range refs {
		if nodes[0].has(ref) && !slices.Contains(home(t, nodes, ref), 0) {
			keep = ref
			kept.Store(ref, true)
			break
		}
	}
	if keep == "" {
		t.Log("node 0 holds no block beyond its home: the check of Keep is skipped")
	}

	restart(t, nodes, away, cfgOf(away))
	all := append(before, refs...)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var missing []spindle.Ref
		for _, ref := range all {
			if slices.Contains(home(t, nodes, ref), away) && !nodes[away].has(ref) {
				missing = append(missing, ref)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after its restart node 2 lacks %d of the %d blocks it is home to (%d written while it was away)", len(missing), len(missing)+len(held(nodes, away, all)), len(share))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for pushed := int64(0); pushed < int64(len(share)); {
		pushed = 0
		for _, nd := range nodes {
			pushed += nd.store.Stats().HomePushed
		}
		if time.Now().After(deadline) {
			t.Fatalf("the holders count %d copies pushed home, want at least %d", pushed, len(share))
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Rounds a grace apart on every node trim the copies beyond each
	// block's home, one at a time, never below r. (A copy is trimmed in
	// the round after the one that found it beyond its home.)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// balanced reports whether every block has r copies (r+1 for the
	// one kept) and node 2 holds those it is home to.
	balanced := func(report bool) bool {
		ok := true
		for _, ref := range all {
			got, h := holders(nodes, ref), home(t, nodes, ref)
			want := 3
			if ref == keep {
				if !slices.Contains(got, 0) {
					t.Errorf("block %s, which node 0 keeps, was trimmed from it", ref)
				}
				if !slices.Contains(got, h[0]) || !slices.Contains(got, h[1]) || !slices.Contains(got, h[2]) {
					want = 3 // Its home lacks it: node 0's copy is one of the r.
				} else {
					want = 4
				}
			}
			if len(got) != want || slices.Contains(h, away) && !slices.Contains(got, away) {
				ok = false
				if report {
					t.Errorf("block %s held by %v after trimming, want %d copies (its home is %v)", ref, got, want, h)
				}
			}
		}
		return ok
	}
	trimmed := 0
	for round := 0; round < 2 || round < 6 && !balanced(false); round++ {
		if round > 0 {
			time.Sleep(300 * time.Millisecond)
		}
		for i, nd := range nodes {
			res, err := nd.store.Repair(ctx)
			if err != nil {
				t.Fatalf("round %d on node %d: %v", round, i, err)
			}
			if round == 0 && res.Trimmed > 0 {
				t.Errorf("round 0 on node %d trimmed %d copies before the grace", i, res.Trimmed)
			}
			trimmed += res.Trimmed
			for _, ref := range all {
				if got := holders(nodes, ref); len(got) < 3 {
					t.Fatalf("after round %d on node %d, block %s is held by %v only", round, i, ref, got)
				}
			}
		}
	}
	if trimmed == 0 {
		t.Error("no copy was trimmed")
	}
	// A block put through a node outside its home may keep r copies
	// there: the writer's and the r−1 nearest others'; the writer's goes
	// once the whole home holds the block, as after node 2 came back.
	balanced(true)
	var n int64
	for i, nd := range nodes {
		st := nd.store.Stats()
		n += st.Trimmed
		if st.RepairBacklog != 0 || st.RepairMissing != 0 {
			t.Errorf("node %d: backlog %d blocks, %d copies missing, want none", i, st.RepairBacklog, st.RepairMissing)
		}
	}
	if n != int64(trimmed) {
		t.Errorf("stats count %d copies trimmed, rounds %d", n, trimmed)
	}
}
