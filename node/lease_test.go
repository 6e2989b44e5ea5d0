package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/lease"
	"spindle.dev/p2p"
)

// leaseClock is the fake clock of the leases of a test's nodes, moved by
// hand, so that no test waits for a lease to run out.
type leaseClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *leaseClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *leaseClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const (
	testTerm  = time.Hour
	testGrace = 10 * time.Minute
)

// leaseNode starts a networked node whose leases last testTerm on clk,
// whose blocks without one wait testGrace, and which renews and collects
// only when the test says.
func leaseNode(t testing.TB, home string, boot []spindle.PeerAddr, clk *leaseClock) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boot, Writers: []string{"all"}, Logger: testLogger(t),
		Replicas: 2, LeaseTerm: testTerm, LeaseGrace: testGrace, LeaseRenew: -1, CollectInterval: -1, now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func digestOf(t testing.TB, ref spindle.Ref) blocks.Digest {
	t.Helper()
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func holds(n *Node, ref spindle.Ref) bool {
	_, err := n.store.Get(context.Background(), ref)
	return err == nil
}

// Blocks are collected only when no entry references them: six nodes,
// r = 2, leases of an hour on a fake clock. A referenced block stays on
// every node holding it through many passes and lease terms, also on the
// node a client wrote it through (which the dir host finds through the
// DHT) and after that node left; a deleted file's blocks go from every
// node once its leases ran out and the grace passed; a block shared by
// two files survives deleting one; and a holder restarted from its home
// still holds its leases.
func TestLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six networked nodes")
	}
	clk := &leaseClock{t: time.Unix(1_800_000_000, 0)}
	const count = 6
	homes := make([]string, count)
	for i := range homes {
		homes[i] = t.TempDir()
	}
	nodes := make([]*Node, count)
	nodes[0] = leaseNode(t, homes[0], nil, clk)
	boot := nodes[0].Addrs()
	var wg sync.WaitGroup
	for i := 1; i < count; i++ {
		wg.Go(func() { nodes[i] = leaseNode(t, homes[i], boot, clk) })
	}
	wg.Wait()
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	}()
	for _, n := range nodes {
		waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= count-1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := nodes[0] // Ann's dir host.
	ann := dialAs(t, dir, "ann@example.com")
	put := func(name string, data []byte, packing spindle.Packing) []spindle.Ref {
		t.Helper()
		if _, err := ann.Put(ctx, spindle.PathName("ann@example.com/"+name), bytes.NewReader(data), packing, nil); err != nil {
			t.Fatal(err)
		}
		e, err := ann.Lookup(ctx, spindle.PathName("ann@example.com/"+name), false)
		if err != nil {
			t.Fatal(err)
		}
		var refs []spindle.Ref
		for _, b := range e.Blocks {
			refs = append(refs, b.Ref)
		}
		if len(refs) == 0 {
			t.Fatalf("%s has no blocks", name)
		}
		return refs
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	kept := random(5 << 20 / 2)
	keptRefs := put("kept", kept, spindle.EEPack)
	goneRefs := put("gone", random(3<<20/2), spindle.EEPack)
	shared := random(1 << 19)
	sharedRefs := put("shared1", shared, spindle.PlainPack)
	if again := put("shared2", shared, spindle.PlainPack); again[0] != sharedRefs[0] {
		t.Fatal("two plain files of the same contents do not share their block")
	}
	referenced := append(append([]spindle.Ref(nil), keptRefs...), sharedRefs...)

	// The block kept first is also written through the node furthest
	// from its key, outside the dir host's lease window (the r+2 = 4
	// nearest of the five others), which the dir host leases with only
	// if it finds the copy through the DHT.
	var others []peer.ID
	for _, n := range nodes[1:] {
		others = append(others, n.Host().ID())
	}
	far := kb.SortClosestPeers(others, kb.ConvertKey(string(digestOf(t, keptRefs[0]).Multihash())))[len(others)-1]
	writer := -1
	for i, n := range nodes {
		if n.Host().ID() == far {
			writer = i
		}
	}
	if holds(nodes[writer], keptRefs[0]) {
		t.Fatalf("node %d, furthest from the block's key, holds it already", writer)
	}
	data, err := dir.store.Get(ctx, keptRefs[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[writer].replica.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	// Announcements land in their own time: renew until the dir host
	// has found the writer's copy.
	waitFor(t, 90*time.Second, func() string { return fmt.Sprintf("node %d never got a lease on the block written through it", writer) }, func() bool {
		if _, err := dir.RenewLeases(ctx); err != nil {
			t.Fatal(err)
		}
		return nodes[writer].leases.table.Live(digestOf(t, keptRefs[0]))
	})

	heldBy := func(refs []spindle.Ref) map[spindle.Ref][]int {
		m := make(map[spindle.Ref][]int)
		for _, ref := range refs {
			for i, n := range nodes {
				if n != nil && holds(n, ref) {
					m[ref] = append(m[ref], i)
				}
			}
		}
		return m
	}
	before := heldBy(referenced)
	for _, ref := range referenced {
		if len(before[ref]) == 0 {
			t.Fatalf("block %s is held nowhere", ref)
		}
	}
	for _, ref := range goneRefs {
		if len(heldBy(goneRefs)[ref]) == 0 {
			t.Fatalf("block %s of the file to delete is held nowhere", ref)
		}
	}
	if err := ann.Delete(ctx, "ann@example.com/gone"); err != nil {
		t.Fatal(err)
	}
	if err := ann.Delete(ctx, "ann@example.com/shared1"); err != nil {
		t.Fatal(err)
	}

	// rounds moves the clock on by 40 minutes at a time, rounds times,
	// with a renewal by the dir host and a collection pass on every node
	// each time.
	rounds := func(k int) {
		t.Helper()
		for range k {
			clk.Add(40 * time.Minute)
			res, err := dir.RenewLeases(ctx)
			if err != nil || res.Leases == 0 {
				t.Fatalf("renewal: %+v, %v", res, err)
			}
			for i, n := range nodes {
				if n == nil {
					continue
				}
				if _, err := n.CollectBlocks(ctx); err != nil {
					t.Fatalf("collection on node %d: %v", i, err)
				}
			}
		}
	}
	// Over three hours: the deleted file's leases end after one, its
	// blocks wait the grace, then go.
	rounds(5)
	for ref, at := range heldBy(goneRefs) {
		t.Errorf("block %s of the deleted file is still on nodes %v", ref, at)
	}
	after := heldBy(referenced)
	for _, ref := range referenced {
		if len(after[ref]) < len(before[ref]) {
			t.Errorf("referenced block %s was on nodes %v, now on %v", ref, before[ref], after[ref])
		}
	}

	// The writer's node leaves; many more terms pass; the blocks stay
	// on every other node that held them, and the file reads back.
	nodes[writer].Close()
	nodes[writer] = nil
	rounds(8)
	final := heldBy(referenced)
	for _, ref := range referenced {
		for _, i := range before[ref] {
			if i != writer && !containsInt(final[ref], i) {
				t.Errorf("referenced block %s left node %d (held by %v before)", ref, i, before[ref])
			}
		}
	}
	mustRead(t, ann, "ann@example.com/kept", kept)
	mustRead(t, ann, "ann@example.com/shared2", shared)

	// A holder restarted from its home still holds its leases, before
	// any renewal reaches it.
	// (The writer's node may have held the only other copy of some
	// block: repair, not run here, would make it again.)
	h, probe := -1, spindle.Ref("")
	for _, ref := range referenced {
		for _, i := range final[ref] {
			if i != 0 {
				h, probe = i, ref
			}
		}
	}
	if h < 0 {
		t.Fatal("every referenced block is held by the dir host alone")
	}
	leasesBefore := nodes[h].leases.table.Stats().Leases
	nodes[h].Close()
	nodes[h] = nil
	nodes[h] = leaseNode(t, homes[h], boot, clk)
	if st := nodes[h].leases.table.Stats(); st.Leases != leasesBefore || !nodes[h].leases.table.Live(digestOf(t, probe)) {
		t.Fatalf("after a restart: %d leases, want %d, and the block's lease live", st.Leases, leasesBefore)
	}
	st, err := nodes[h].Status(ctx)
	if err != nil || st.Leases == nil || *st.Leases != int64(leasesBefore) || st.LeasedBlocks == nil || *st.LeasedBlocks == 0 {
		t.Fatalf("status after the restart: %+v, %v", st, err)
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Who may lease: a peer that is neither a node of the network nor a dir
// host is refused; a node of the network may lease for a user this node
// does not know; for a user it knows, only the record's dir hosts may;
// and a malformed request is refused as Invalid.
func TestLeaseFromStrangers(t *testing.T) {
	clk := &leaseClock{t: time.Unix(1_800_000_000, 0)}
	a := leaseNode(t, t.TempDir(), nil, clk)
	defer a.Close()
	b := leaseNode(t, t.TempDir(), a.Addrs(), clk)
	defer b.Close()
	waitFor(t, 60*time.Second, func() string { return "the two nodes never met in the DHT" },
		func() bool { return a.DHT().RoutingTable().Size() >= 1 && b.DHT().RoutingTable().Size() >= 1 })
	dialAs(t, a, "ann@example.com") // Ann's record, on a, names a as her dir host.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := blocks.Digest{1, 2, 3}
	ask := func(from *Node, user spindle.UserName) error {
		req := lease.Request{User: user, Term: time.Hour, Digests: []blocks.Digest{d}}
		_, err := p2p.Call(ctx, from.Host(), a.Host().ID(), protocol.ID(LeaseProtocol), req.Marshal(), lease.MaxMessage)
		return err
	}
	if err := ask(b, "ann@example.com"); !errors.Is(err, spindle.Permission) {
		t.Fatalf("a node that is not ann's dir host leasing for ann: %v, want Permission", err)
	}
	if err := ask(b, "zed@example.com"); err != nil {
		t.Fatalf("a node of the network leasing for a user unknown here: %v", err)
	}
	if !a.leases.table.Live(d) {
		t.Fatal("the lease granted is not live")
	}
	if err := ask(b, "Not A User"); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("lease for a bad user name: %v, want Invalid", err)
	}
	// A host outside the network.
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Peerstore().AddAddrs(a.Host().ID(), a.Host().Addrs(), time.Hour)
	req := lease.Request{User: "zed@example.com", Term: time.Hour, Digests: []blocks.Digest{{9}}}
	if _, err := p2p.Call(ctx, h, a.Host().ID(), protocol.ID(LeaseProtocol), req.Marshal(), lease.MaxMessage); !errors.Is(err, spindle.Permission) {
		t.Fatalf("a stranger leasing: %v, want Permission", err)
	}
	if _, err := p2p.Call(ctx, h, a.Host().ID(), protocol.ID(LeaseProtocol), []byte{1, 2, 3}, lease.MaxMessage); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("a malformed request: %v, want Invalid", err)
	}
}

// The nodes nearest to each block's key, found with a lookup per
// keyspace region, are exactly those a lookup per block finds: in a
// network of 2000 nodes, for 20 000 blocks, with far fewer lookups than
// blocks.
func TestNearestByRegion(t *testing.T) {
	const nodes, bucket, want = 2000, 20, 4
	ids := make([]peer.ID, nodes)
	kids := make([]kb.ID, nodes)
	for i := range ids {
		// Any bytes make a peer ID as far as the keyspace goes.
		ids[i] = peer.ID(fmt.Sprint("node ", i))
		kids[i] = kb.ConvertPeerID(ids[i])
	}
	self := ids[0]
	nearest := func(key kb.ID, k int, without peer.ID) []peer.ID {
		idx := make([]int, nodes)
		dist := make([]kb.ID, nodes)
		for i := range idx {
			idx[i], dist[i] = i, kb.Xor(kids[i], key)
		}
		slices.SortFunc(idx, func(a, b int) int { return bytes.Compare(dist[a], dist[b]) })
		var out []peer.ID
		for _, i := range idx {
			if ids[i] != without {
				out = append(out, ids[i])
			}
			if len(out) == k {
				break
			}
		}
		return out
	}
	// The DHT's lookup answers with the bucket nodes nearest to the key,
	// self included (the caller leaves it out).
	lookup := func(d blocks.Digest) ([]peer.ID, error) {
		return nearest(kb.ConvertKey(string(d.Multihash())), bucket, ""), nil
	}
	table := func(kb.ID, int) []peer.ID {
		t.Error("the routing table was asked though every lookup succeeded")
		return nil
	}
	ds := make([]blocks.Digest, 20000)
	for i := range ds {
		ds[i] = blocks.Digest(sha256.Sum256([]byte(fmt.Sprint(i))))
	}
	got, lookups := nearestByRegion(context.Background(), ds, want, bucket, self, lookup, table)
	if lookups >= len(ds)/2 {
		t.Errorf("%d lookups for %d blocks", lookups, len(ds))
	}
	t.Logf("%d lookups for %d blocks in a network of %d", lookups, len(ds), nodes)
	for i, d := range ds[:1000] { // Checking all would take long.
		w := nearest(kb.ConvertKey(string(d.Multihash())), want, self)
		if !slices.Equal(got[d], w) {
			t.Fatalf("block %d: nodes %v, want %v", i, got[d], w)
		}
	}
}

// The background rounds: a node renewing and collecting every 50 ms
// (on the fake lease clock, moved by the test) leases the blocks of a
// file it hosts, collects a block no entry references once the grace has
// passed, and collects the file's blocks once it is deleted and their
// leases and grace have run out.
func TestLeaseLoops(t *testing.T) {
	clk := &leaseClock{t: time.Unix(1_800_000_000, 0)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Logger: testLogger(t),
		LeaseTerm: testTerm, LeaseGrace: testGrace, LeaseRenew: 50 * time.Millisecond, CollectInterval: 50 * time.Millisecond, now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := dialAs(t, n, "ann@example.com")
	data := make([]byte, 3<<20/2)
	rand.Read(data)
	if _, err := c.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	e, err := c.Lookup(ctx, "ann@example.com/f", false)
	if err != nil {
		t.Fatal(err)
	}
	leased := func() bool {
		for _, b := range e.Blocks {
			if !n.leases.table.Live(digestOf(t, b.Ref)) {
				return false
			}
		}
		return true
	}
	waitFor(t, 30*time.Second, func() string { return "the renewal loop never leased the file's blocks" }, leased)

	orphan, _, err := n.replica.PutCopies(ctx, []byte("a block no entry references"))
	if err != nil {
		t.Fatal(err)
	}
	// passAfter returns a condition that holds once a pass has started
	// and ended since the call: passes do not overlap, so that is the
	// second to end after it.
	passAfter := func() func() bool {
		start := n.leases.coll.Last().Seq
		return func() bool { return n.leases.coll.Last().Seq >= start+2 }
	}
	// A pass sees the orphan (and starts its grace); the fake clock
	// moves past the grace; a later pass collects it.
	clk.Add(time.Second)
	waitFor(t, 30*time.Second, func() string { return "no collection pass ran" }, passAfter())
	if !holds(n, orphan) {
		t.Fatal("a block just put was collected within its grace")
	}
	clk.Add(testGrace + time.Second)
	waitFor(t, 30*time.Second, func() string { return "the orphan block was never collected" }, func() bool { return !holds(n, orphan) })
	for _, b := range e.Blocks {
		if !holds(n, b.Ref) {
			t.Fatalf("block %s of the file was collected", b.Ref)
		}
	}

	// Deleted: the leases run out, a pass starts the grace, and once the
	// grace is over the blocks go.
	if err := c.Delete(ctx, "ann@example.com/f"); err != nil {
		t.Fatal(err)
	}
	// Rounds do not overlap, so once one has found no block referenced,
	// no round renews the file's leases any more.
	waitFor(t, 30*time.Second, func() string { return "no renewal round found the file gone" }, func() bool {
		n.leases.mu.Lock()
		defer n.leases.mu.Unlock()
		return !n.leases.last.At.IsZero() && n.leases.last.Blocks == 0
	})
	clk.Add(testTerm + time.Second)
	waitFor(t, 30*time.Second, func() string { return "no collection pass ran" }, passAfter())
	clk.Add(testGrace + time.Second)
	waitFor(t, 30*time.Second, func() string { return "the deleted file's blocks were never collected" }, func() bool {
		for _, b := range e.Blocks {
			if holds(n, b.Ref) {
				return false
			}
		}
		return true
	})
	st, err := n.Status(ctx)
	if err != nil || st.LeasesRenewed == nil || st.Collectable == nil {
		t.Fatalf("status: %+v, %v", st, err)
	}
}
