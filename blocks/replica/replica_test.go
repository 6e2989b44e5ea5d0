package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	kad "github.com/libp2p/go-libp2p-kad-dht"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// A node is one member of a test network: a loopback host, its DHT, its
// local store and the replicated store in front of it.
type node struct {
	h       host.Host
	d       *kad.IpfsDHT
	local   spindle.BlockStore
	store   *replica.Store
	cancel  context.CancelFunc
	corrupt atomic.Bool  // Serve wrong bytes to other nodes.
	hang    atomic.Bool  // Answer no get from other nodes.
	gone    atomic.Bool  // Answer every get from other nodes as if nothing were held.
	hung    atomic.Int64 // Gets left unanswered while hung.
	served  atomic.Int64 // Gets served while corrupt.
	users   sync.Map     // Of peer.ID: the node's signed-in users.
	stopped bool
}

// stop shuts the node down as if its machine were switched off.
func (n *node) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	n.cancel()
	n.store.Close()
	n.d.Close()
	n.h.Close()
}

// has reports whether the node holds ref in its local store.
func (n *node) has(ref spindle.Ref) bool {
	_, err := n.local.Get(context.Background(), ref)
	return err == nil
}

// corruptStore serves the node's blocks, flipping a byte of each block it
// returns while the node is set to be corrupt.
type corruptStore struct {
	spindle.BlockStore
	n *node
}

func (c corruptStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	if c.n.gone.Load() {
		return nil, spindle.E(spindle.NotExist, "gone")
	}
	if c.n.hang.Load() {
		c.n.hung.Add(1)
		<-ctx.Done()
		return nil, spindle.E(spindle.Transient, ctx.Err())
	}
	data, err := c.BlockStore.Get(ctx, ref)
	if err == nil && c.n.corrupt.Load() && len(data) > 0 {
		c.n.served.Add(1)
		data[len(data)/2] ^= 0x40
	}
	return data, err
}

// newNet starts n loopback nodes, each with its own DHT joined through
// node 0 and a memory store, and waits until every routing table holds
// every other node.
func newNet(t testing.TB, n int, cfg replica.Config) []*node {
	t.Helper()
	return newNetWith(t, n, cfg, func() spindle.BlockStore { return new(mem.Store) })
}

// newNetWith is newNet with the local stores that newStore makes.
func newNetWith(t testing.TB, n int, cfg replica.Config, newStore func() spindle.BlockStore) []*node {
	t.Helper()
	return newNetEach(t, n, func(int) replica.Config { return cfg }, func(int) spindle.BlockStore { return newStore() })
}

// newNetEach is newNet with node i configured by cfgOf(i) and holding
// its blocks in storeOf(i).
func newNetEach(t testing.TB, n int, cfgOf func(i int) replica.Config, storeOf func(i int) spindle.BlockStore) []*node {
	t.Helper()
	return newNetMembers(t, n, cfgOf, storeOf, nil)
}

// newNetMembers is newNetEach; if members is not nil, the network admits
// only its members, and each node is made one as it starts.
func newNetMembers(t testing.TB, n int, cfgOf func(i int) replica.Config, storeOf func(i int) spindle.BlockStore, members *memberSet) []*node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var nodes []*node
	var boot []spindle.PeerAddr
	for i := range n {
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Memory: 256 << 20})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			boot = p2p.Addrs(h)
		}
		var opts []kad.Option
		cfg := cfgOf(i)
		if members != nil {
			members.add(h.ID())
			opts = dht.MembersOnly(members.has)
			cfg.Member = members.has
		}
		d, err := dht.New(ctx, h, boot, opts...)
		if err != nil {
			h.Close()
			t.Fatal(err)
		}
		local := storeOf(i)
		s, err := replica.New(h, d, local, cfg)
		if err != nil {
			d.Close()
			h.Close()
			t.Fatal(err)
		}
		sctx, scancel := context.WithCancel(context.Background())
		nd := &node{h: h, d: d, local: local, store: s, cancel: scancel}
		srv, scfg := s.Server(func(p peer.ID) bool { _, ok := nd.users.Load(p); return ok }, nil)
		p2p.ServeBlocks(sctx, h, corruptStore{srv, nd}, scfg)
		nodes = append(nodes, nd)
		t.Cleanup(nd.stop)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, nd := range nodes {
		for nd.d.RoutingTable().Size() < n-1 {
			if time.Now().After(deadline) {
				t.Fatalf("routing table of %s holds %d of %d peers", nd.h.ID(), nd.d.RoutingTable().Size(), n-1)
			}
			// A lookup of our own ID fills the table faster than waiting
			// for the next refresh.
			lctx, lcancel := context.WithTimeout(ctx, time.Second)
			nd.d.GetClosestPeers(lctx, string(nd.h.ID()))
			lcancel()
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nodes
}

func randomBlock(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// holders returns the indexes of the nodes that hold ref.
func holders(nodes []*node, ref spindle.Ref) []int {
	var out []int
	for i, nd := range nodes {
		if !nd.stopped && nd.has(ref) {
			out = append(out, i)
		}
	}
	return out
}

// nearest returns the indexes of the k nodes other than skip nearest to
// the DHT key of ref, nearest first.
func nearest(t testing.TB, nodes []*node, ref spindle.Ref, skip, k int) []int {
	t.Helper()
	c, err := cid.Decode(string(ref))
	if err != nil {
		t.Fatal(err)
	}
	index := make(map[peer.ID]int)
	var ids []peer.ID
	for i, nd := range nodes {
		if i != skip {
			ids = append(ids, nd.h.ID())
			index[nd.h.ID()] = i
		}
	}
	var out []int
	for _, p := range kb.SortClosestPeers(ids, kb.ConvertKey(string(c.Hash())))[:k] {
		out = append(out, index[p])
	}
	return out
}

// waitProviders waits until node from finds at least want providers of ref.
func waitProviders(t testing.TB, from *node, ref spindle.Ref, want int) {
	t.Helper()
	c, err := cid.Decode(string(ref))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		provs, err := from.d.FindProviders(ctx, c)
		cancel()
		if err == nil && len(provs) >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s finds %d providers of %s, want %d (err %v)", from.h.ID(), len(provs), ref, want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Put through node A makes exactly r copies: on A and on the r−1 other
// nodes nearest to the block's key. The holders announce themselves, and
// a node holding nothing gets the block through the DHT.
func TestPutNearestAndGetThroughAnyNode(t *testing.T) {
	nodes := newNet(t, 12, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(1, 2))
	a, z := 0, len(nodes)-1
	var refs []spindle.Ref
	var datas [][]byte
	for i := range 6 {
		data := randomBlock(rnd, 1000+i*70000)
		ref, err := nodes[a].store.Put(ctx, data)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		want := append([]int{a}, nearest(t, nodes, ref, a, 2)...)
		slices.Sort(want)
		if got := holders(nodes, ref); !slices.Equal(got, want) {
			t.Fatalf("block %d held by nodes %v, want %v (A and the 2 nearest to its key)", i, got, want)
		}
		refs, datas = append(refs, ref), append(datas, data)
	}
	for i, ref := range refs {
		if nodes[z].has(ref) {
			continue // Z is one of the holders of this block: not a test of fetching.
		}
		waitProviders(t, nodes[z], ref, 3)
		got, err := nodes[z].store.Get(ctx, ref)
		if err != nil {
			t.Fatalf("Get of block %d through Z: %v", i, err)
		}
		if !bytes.Equal(got, datas[i]) {
			t.Fatalf("Get of block %d through Z returned other bytes", i)
		}
		if nodes[z].has(ref) {
			t.Fatalf("Get through Z stored block %d in Z's own store; it belongs in the cache", i)
		}
	}
	if st := nodes[z].store.Stats(); st.CachedBlocks == 0 {
		t.Errorf("Z cached no fetched block: %+v", st)
	}
}

// With fewer nodes than r, Put makes a copy on each and says how many.
func TestPutFewerNodes(t *testing.T) {
	nodes := newNet(t, 2, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second})
	ctx := context.Background()
	data := []byte("only two machines are switched on")
	ref, err := nodes[0].store.Put(ctx, data)
	var w *spindle.Warning
	if !errors.As(err, &w) {
		t.Fatalf("Put on a network of 2 with r=3: err %v, want a *spindle.Warning", err)
	}
	if ref != blocks.RefOf(data) {
		t.Fatalf("Put returned ref %q with its warning, want %q", ref, blocks.RefOf(data))
	}
	if got := holders(nodes, ref); len(got) != 2 {
		t.Fatalf("block held by %v, want both nodes", got)
	}
	_, copies, err := nodes[1].store.PutCopies(ctx, []byte("another block"))
	if err != nil || copies != 2 {
		t.Fatalf("PutCopies = %d copies, %v; want 2, nil", copies, err)
	}
}

// With r copies, stopping the writer and r−2 more holders (r−1 nodes in
// all) leaves a copy that a node holding nothing still finds.
func TestGetAfterHoldersStop(t *testing.T) {
	nodes := newNet(t, 12, replica.Config{Replicas: 3, BaseTimeout: 3 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(3, 4))
	var refs []spindle.Ref
	var datas [][]byte
	for range 8 {
		data := randomBlock(rnd, 50000)
		ref, err := nodes[0].store.Put(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		refs, datas = append(refs, ref), append(datas, data)
	}
	for _, ref := range refs {
		waitProviders(t, nodes[len(nodes)-1], ref, 3)
	}
	// Stop the writer and another holder of block 0: every block keeps
	// at least one of its three copies.
	other := holders(nodes, refs[0])[1]
	nodes[0].stop()
	nodes[other].stop()
	// A reader that holds none of the blocks.
	z := -1
	for i := len(nodes) - 1; i > 0; i-- {
		if nodes[i].stopped {
			continue
		}
		if !slices.ContainsFunc(refs, nodes[i].has) {
			z = i
			break
		}
	}
	if z < 0 {
		t.Skip("every running node holds one of the blocks")
	}
	err := nodes[z].store.GetMany(ctx, refs, func(i int, data []byte) error {
		if !bytes.Equal(data, datas[i]) {
			return fmt.Errorf("block %d: other bytes", i)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("GetMany through node %d after stopping nodes 0 and %d: %v", z, other, err)
	}
}

// A holder that serves corrupted bytes is detected by the hash check,
// dropped for the rest of the fetch (and asked last from then on), and
// the block comes from an honest holder.
func TestCorruptHolderBypassed(t *testing.T) {
	nodes := newNet(t, 10, replica.Config{Replicas: 3, Parallel: 1, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Put every block on the same three holders (0, 1, 2), each with
	// r=1, so that two of them can lie about all the blocks.
	rnd := rand.New(rand.NewPCG(5, 6))
	var refs []spindle.Ref
	var datas [][]byte
	for range 8 {
		data := randomBlock(rnd, 30000)
		for i := range 3 {
			if _, err := nodes[i].local.Put(ctx, data); err != nil {
				t.Fatal(err)
			}
		}
		ref := blocks.RefOf(data)
		refs, datas = append(refs, ref), append(datas, data)
	}
	// The holders announce what they held when they started, but these
	// came later.
	for i := range 3 {
		if err := nodes[i].store.Announce(refs...); err != nil {
			t.Fatal(err)
		}
	}
	nodes[0].corrupt.Store(true)
	nodes[1].corrupt.Store(true)
	// A reader asks first the holders that served it well, so one that
	// happens to ask the honest holder first is never lied to. Fresh
	// readers ask until one has met a liar (each does with odds 2/3).
	var lies int64
	for _, z := range nodes[3:] {
		for _, ref := range refs {
			if z.has(ref) {
				t.Fatal("the reader holds a block")
			}
			waitProviders(t, z, ref, 3)
		}
		before0, before1 := nodes[0].served.Load(), nodes[1].served.Load()
		err := z.store.GetMany(ctx, refs, func(i int, data []byte) error {
			if !bytes.Equal(data, datas[i]) {
				return fmt.Errorf("block %d: other bytes", i)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("GetMany with two of three holders lying: %v", err)
		}
		lies0, lies1 := nodes[0].served.Load()-before0, nodes[1].served.Load()-before1
		if lies0 > 1 || lies1 > 1 {
			t.Fatalf("lying holders were asked %d and %d times; each should be dropped after its first lie", lies0, lies1)
		}
		if lies = lies0 + lies1; lies > 0 {
			break
		}
	}
	if lies == 0 {
		t.Fatal("no lying holder was asked: the test did not exercise the check")
	}
	// A single Get also gets around them.
	got, err := nodes[len(nodes)-2].store.Get(ctx, refs[0])
	if err != nil || !bytes.Equal(got, datas[0]) {
		t.Fatalf("Get with two of three holders lying: %v", err)
	}
}

// A holder that never answers is given time in proportion to what was
// asked of it, then passed over for another.
func TestHungHolderBypassed(t *testing.T) {
	const base = 300 * time.Millisecond
	nodes := newNet(t, 6, replica.Config{Replicas: 3, Parallel: 2, BaseTimeout: base, MinRate: 1 << 40})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(10, 11))
	var refs []spindle.Ref
	var datas [][]byte
	for range 4 {
		data := randomBlock(rnd, 20000)
		for i := range 3 {
			if _, err := nodes[i].local.Put(ctx, data); err != nil {
				t.Fatal(err)
			}
		}
		refs, datas = append(refs, blocks.RefOf(data)), append(datas, data)
	}
	for i := range 3 {
		if err := nodes[i].store.Announce(refs...); err != nil {
			t.Fatal(err)
		}
	}
	z := nodes[len(nodes)-1]
	for _, ref := range refs {
		waitProviders(t, z, ref, 3)
	}
	nodes[0].hang.Store(true)
	nodes[1].hang.Store(true)
	start := time.Now()
	err := z.store.GetMany(ctx, refs, func(i int, data []byte) error {
		if !bytes.Equal(data, datas[i]) {
			return fmt.Errorf("block %d: other bytes", i)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("GetMany with two of three holders hung: %v", err)
	}
	// At worst every block waits once for each hung holder.
	if d := time.Since(start); d > 4*2*(base+time.Second) {
		t.Fatalf("GetMany took %v", d)
	}
}

// Through the block protocol, a node's users put blocks r-fold and get
// blocks that other nodes hold; any other peer gets only what the node
// holds itself.
func TestServerUsers(t *testing.T) {
	nodes := newNet(t, 8, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := func() (host.Host, *p2p.RemoteStore) {
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if _, err := p2p.Connect(ctx, h, p2p.Addrs(nodes[0].h)[0]); err != nil {
			t.Fatal(err)
		}
		r := p2p.NewRemoteStore(h, nodes[0].h.ID())
		t.Cleanup(func() { r.Close() })
		return h, r
	}
	user, ur := client()
	nodes[0].users.Store(user.ID(), true)
	_, stranger := client()

	data := []byte("put by a user through node 0")
	ref, err := ur.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := holders(nodes, ref); len(got) != 3 || got[0] != 0 {
		t.Fatalf("a user's block is held by nodes %v, want node 0 and 2 others", got)
	}

	// Blocks that only the last node holds.
	far := nodes[len(nodes)-1]
	x, y := []byte("block x, held far away"), []byte("block y, held far away")
	for _, b := range [][]byte{x, y} {
		if _, err := far.local.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	rx, ry := blocks.RefOf(x), blocks.RefOf(y)
	if err := far.store.Announce(rx, ry); err != nil {
		t.Fatal(err)
	}
	waitProviders(t, nodes[0], rx, 1)
	waitProviders(t, nodes[0], ry, 1)
	if got, err := ur.Get(ctx, rx); err != nil || !bytes.Equal(got, x) {
		t.Fatalf("a user's Get of a block held by another node: %v", err)
	}
	if _, err := stranger.Get(ctx, ry); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("a stranger's Get of a block node 0 does not hold: %v, want NotExist", err)
	}
	// What node 0 fetched for its user is in its cache once checked (off
	// the user's path: TestClientGetUncheckedCachesOnlySound), which it
	// serves.
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := stranger.Get(ctx, rx)
		if err == nil && bytes.Equal(got, x) {
			break
		}
		if !errors.Is(err, spindle.NotExist) || time.Now().After(deadline) {
			t.Fatalf("a stranger's Get of a block node 0 has cached: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A holder whose local copy has gone bad fetches a good one from another
// holder, returns it, and holds it again.
func TestDamagedCopyHealed(t *testing.T) {
	nodes := newNetWith(t, 4, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second}, func() spindle.BlockStore {
		s, err := disk.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	data := randomBlock(rand.New(rand.NewPCG(12, 13)), 300000) // A file of its own.
	ref, err := nodes[0].store.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	name := nodes[0].local.(*disk.Store).Path(d)
	onDisk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	onDisk[1000] ^= 0x40
	if err := os.WriteFile(name, onDisk, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := nodes[0].store.Get(ctx, ref)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get of a block whose local copy is damaged: %v", err)
	}
	if got, err := nodes[0].local.Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the damaged local copy was not replaced: %v", err)
	}
}

// Concurrent gets and puts through several nodes, for the race detector.
func TestConcurrent(t *testing.T) {
	nodes := newNet(t, 6, replica.Config{Replicas: 3, CacheBytes: 200 << 10, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var mu sync.Mutex
	var refs []spindle.Ref
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 9))
			for range 6 {
				data := randomBlock(rnd, 20000)
				ref, err := nodes[w].store.Put(ctx, data)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				refs = append(refs, ref)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, z := range nodes[4:] {
		wg.Go(func() {
			if err := z.store.GetMany(ctx, refs, func(int, []byte) error { return nil }); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}
