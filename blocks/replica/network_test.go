package replica_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// A memberSet is the member nodes of a network that admits only its
// members, as a node learns them from the key cluster.
type memberSet struct{ m sync.Map }

func (ms *memberSet) add(p peer.ID)      { ms.m.Store(p, true) }
func (ms *memberSet) remove(p peer.ID)   { ms.m.Delete(p) }
func (ms *memberSet) has(p peer.ID) bool { _, ok := ms.m.Load(p); return ok }

// Ten sybil sinks join a network of five member nodes. In a network that
// admits only its members, no sink gets into a routing table, no node
// stores or uses a sink's provider record, strangers' replica pushes are
// refused, every copy a put counts is held by a member that passes a
// challenge, and after the writer's node stops every block reads. The
// same network left open lets the sinks into the routing tables and the
// provider records (challenges and hedged reads then carry the load), so
// the checks of the members-only network would fail there.
func TestSybilSinksRefusedByMembersNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 10 sink processes twice; skipped with -short")
	}
	flood := filepath.Join(t.TempDir(), "replicaflood")
	if out, err := exec.Command("go", "build", "-o", flood, "spindle.dev/simulations/hostile/replicaflood").CombinedOutput(); err != nil {
		t.Fatalf("go build replicaflood: %v\n%s", err, out)
	}
	for _, membersOnly := range []bool{true, false} {
		name := map[bool]string{true: "members", false: "open"}[membersOnly]
		t.Run(name, func(t *testing.T) { testSinksAgainstNetwork(t, membersOnly, flood) })
	}
}

func testSinksAgainstNetwork(t *testing.T, membersOnly bool, flood string) {
	const (
		nHonest = 5
		nSinks  = 10
		nBlocks = 4
		size    = 64 << 10
	)
	var members *memberSet
	if membersOnly {
		members = new(memberSet)
	}
	nodes := newNetMembers(t, nHonest, func(int) replica.Config { return repairConfig() }, diskStores(t), members)
	sinks := startSinks(t, nSinks, p2p.Addrs(nodes[0].h)[0])
	isSink := make(map[peer.ID]bool)
	for _, s := range sinks {
		isSink[s.id] = true
	}
	sinksIn := func(ids []peer.ID) (n int) {
		for _, p := range ids {
			if isSink[p] {
				n++
			}
		}
		return n
	}

	// Lookups from every node, which in an open network fill each
	// routing table with the sinks.
	if !membersOnly {
		waitRoutingTables(t, nodes, nHonest+nSinks-1)
	} else {
		for range 20 {
			for _, nd := range nodes {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				nd.d.GetClosestPeers(ctx, string(nd.h.ID()))
				cancel()
			}
		}
		// The situation arose: the first node is connected to every sink
		// and knows it serves the DHT.
		for _, s := range sinks {
			ok, err := nodes[0].h.Peerstore().SupportsProtocols(s.id, p2p.DHTProtocol)
			if err != nil || len(ok) == 0 {
				t.Fatalf("node 0 does not know that sink %s serves the DHT", s.id)
			}
		}
		for i, nd := range nodes {
			if n := sinksIn(nd.d.RoutingTable().ListPeers()); n != 0 {
				t.Errorf("node %d's routing table holds %d sinks in a network of members", i, n)
			}
			if got := nd.d.RoutingTable().Size(); got != nHonest-1 {
				t.Errorf("node %d's routing table holds %d peers, want the %d other members", i, got, nHonest-1)
			}
		}
	}

	// Strangers' pushes.
	f := runReplicaFlood(t, flood, nodes[1], "-ids", "2", "-blocks", "4", "-size", "4096")
	if membersOnly && f.stored != 0 {
		t.Errorf("strangers stored %d bytes on a member:\n%s", f.stored, f.out)
	}
	if !membersOnly && f.stored == 0 {
		t.Errorf("strangers stored nothing on a node of an open network, which takes pushes from any DHT server:\n%s", f.out)
	}

	rnd := rand.New(rand.NewPCG(27, 1))
	datas := make([][]byte, nBlocks)
	refs := make([]spindle.Ref, nBlocks)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	writer := nodes[0]
	for i := range datas {
		datas[i] = randomBlock(rnd, size)
		ref, copies, err := writer.store.PutCopies(ctx, datas[i])
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		refs[i] = ref
		have := holders(nodes, ref)
		if copies != 3 || copies > len(have) {
			t.Errorf("block %d: put counted %d copies; members %v hold it; want 3, each held", i, copies, have)
		}
		for _, h := range have[1:] {
			if err := challenge(nodes, nodes[h].h.ID(), ref, datas[i]); err != nil {
				t.Errorf("block %d: holder %d fails a challenge: %v", i, h, err)
			}
		}
	}

	// The sinks announce every block. In an open network their records
	// are found; in a network of members no node stores one.
	for _, s := range sinks {
		s.provide(t, refs)
	}
	if !membersOnly {
		for _, ref := range refs {
			waitProviders(t, nodes[1], ref, nSinks)
		}
	} else {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			for i, ref := range refs {
				c, err := cid.Decode(string(ref))
				if err != nil {
					t.Fatal(err)
				}
				fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
				provs, _ := nodes[1].d.FindProviders(fctx, c)
				fcancel()
				var ids []peer.ID
				for _, ai := range provs {
					ids = append(ids, ai.ID)
				}
				if n := sinksIn(ids); n != 0 {
					t.Fatalf("block %d: a lookup finds %d sinks among its providers", i, n)
				}
				for j, nd := range nodes {
					stored, err := nd.d.ProviderStore().GetProviders(ctx, c.Hash())
					if err != nil {
						t.Fatal(err)
					}
					ids = ids[:0]
					for _, ai := range stored {
						ids = append(ids, ai.ID)
					}
					if n := sinksIn(ids); n != 0 {
						t.Fatalf("block %d: node %d stores the provider records of %d sinks", i, j, n)
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	writer.stop()
	readAfterWriterStopped(ctx, t, nodes, nHonest, refs, datas)
	t.Logf("%s network: strangers stored %d bytes; %s", map[bool]string{true: "members", false: "open"}[membersOnly], f.stored, fmt.Sprint(routingSinks(nodes[1:], sinksIn)))
}

// routingSinks describes how many sinks the routing tables of nodes hold.
func routingSinks(nodes []*node, sinksIn func([]peer.ID) int) string {
	n := 0
	for _, nd := range nodes {
		n += sinksIn(nd.d.RoutingTable().ListPeers())
	}
	return fmt.Sprintf("sinks in %d routing tables: %d", len(nodes), n)
}

// A node taken out of a network of members no longer counts: its pushes
// are refused, a repair counts its copy out and makes another on a member
// (not on it), and a block only it announced is not fetched from it. Once
// the routing tables are brought in line (dht.Restrict) it is in none;
// admitted again, it is back.
func TestRemovedMemberNeitherHoldsNorCounts(t *testing.T) {
	members := new(memberSet)
	nodes := newNetMembers(t, 6, func(int) replica.Config { return repairConfig() }, func(int) spindle.BlockStore { return new(mem.Store) }, members)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ids []peer.ID
	for _, nd := range nodes {
		ids = append(ids, nd.h.ID())
	}
	rnd := rand.New(rand.NewPCG(27, 7))

	// A block whose copies are on nodes 0 (the writer) and two others.
	data := randomBlock(rnd, 5000)
	ref, copies, err := nodes[0].store.PutCopies(ctx, data)
	if err != nil || copies != 3 {
		t.Fatalf("Put: %d copies, %v; want 3", copies, err)
	}
	have := holders(nodes, ref)
	xi := have[1]
	x := nodes[xi]

	// A push from x, to the node nearest to a block's key, is taken
	// while x is a member and refused once it is none.
	pushFromX := func(seed uint64) error {
		b := pickBlocks(t, rand.New(rand.NewPCG(27, seed)), ids, 1, 3000, func(near []peer.ID) bool {
			return near[0] != x.h.ID() && near[0] != nodes[0].h.ID()
		})[0]
		d, _ := blocks.ParseRef(blocks.RefOf(b))
		to := kb.SortClosestPeers(ids, kb.ConvertKey(string(d.Multihash())))[0]
		r := p2p.NewRemoteStore(x.h, to)
		defer r.Close()
		_, err := r.Put(ctx, b)
		return err
	}
	if err := pushFromX(8); err != nil {
		t.Fatalf("a push from a member: %v", err)
	}
	// A block only x holds and announces.
	only := randomBlock(rnd, 4000)
	onlyRef, err := x.local.Put(ctx, only)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.store.Announce(onlyRef); err != nil {
		t.Fatal(err)
	}
	waitProviders(t, nodes[0], onlyRef, 1)

	members.remove(x.h.ID())
	if err := pushFromX(9); !errors.Is(err, spindle.Permission) {
		t.Errorf("a push from a node taken out: %v, want Permission", err)
	}
	reader := nodes[0]
	if xi == 0 {
		reader = nodes[1]
	}
	gctx, gcancel := context.WithTimeout(ctx, 5*time.Second)
	if _, err := reader.store.Get(gctx, onlyRef); err == nil {
		t.Errorf("a block only a node taken out holds was fetched from it")
	}
	gcancel()
	res, err := nodes[0].store.Repair(ctx)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	var onMembers []int
	for _, i := range holders(nodes, ref) {
		if i != xi {
			onMembers = append(onMembers, i)
		}
	}
	if len(onMembers) != 3 {
		t.Errorf("after repair, members %v hold the block (the node taken out is %d; repair %+v); want 3", onMembers, xi, res)
	}

	for i, nd := range nodes {
		if i == xi {
			continue
		}
		dht.Restrict(nd.d, members.has)
		if nd.d.RoutingTable().Find(x.h.ID()) != "" {
			t.Errorf("node %d's routing table holds the node taken out", i)
		}
	}
	members.add(x.h.ID())
	for i, nd := range nodes {
		if i == xi {
			continue
		}
		// Restrict adds connected peers: on a loaded machine the
		// connection to the node taken out may have gone meanwhile, as
		// a node's would, so connect again until it is back.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			nd.h.Connect(cctx, peer.AddrInfo{ID: x.h.ID(), Addrs: x.h.Addrs()})
			cancel()
			dht.Restrict(nd.d, members.has)
			if nd.d.RoutingTable().Find(x.h.ID()) != "" {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("node %d: the node admitted again is not back in its routing table", i)
				break
			}
		}
	}
}
