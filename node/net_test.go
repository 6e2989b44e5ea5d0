package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// netNode starts a node on 127.0.0.1 (TCP only) with its home in home,
// joining through boot.
func netNode(t testing.TB, home string, boot []spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boot, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor waits until cond holds, failing the test with what after
// the deadline.
func waitFor(t testing.TB, limit time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", limit, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ten nodes joined through one: every routing table fills, the last
// node learns of peers it was never told about, and a DHT lookup from
// the last node finds the first joiner's addresses after the last has
// forgotten them.
func TestJoinTenNodes(t *testing.T) {
	const count = 10
	nodes := make([]*Node, count)
	nodes[0] = netNode(t, t.TempDir(), nil)
	defer nodes[0].Close()
	boot := nodes[0].Addrs()
	var wg sync.WaitGroup
	homes := make([]string, count)
	for i := 1; i < count; i++ {
		homes[i] = t.TempDir()
	}
	for i := 1; i < count; i++ {
		wg.Go(func() { nodes[i] = netNode(t, homes[i], boot) })
	}
	wg.Wait()
	for _, n := range nodes[1:] {
		if n == nil {
			t.FailNow() // netNode reported why.
		}
		defer n.Close()
	}
	for i, n := range nodes {
		waitFor(t, 10*time.Second, func() string { return fmt.Sprintf("routing table of node %d is empty", i) },
			func() bool { return n.DHT().RoutingTable().Size() > 0 })
	}
	first, last := nodes[1], nodes[count-1]
	// The last node was told only of node 0; others it found itself.
	waitFor(t, 10*time.Second, func() string {
		return fmt.Sprintf("routing table of the last node holds %v, only the bootstrap node", last.DHT().RoutingTable().ListPeers())
	}, func() bool { return last.DHT().RoutingTable().Size() > 1 })

	// The last node forgets the first (connection, addresses, routing
	// table entry), then finds it through the DHT.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last.DHT().RoutingTable().RemovePeer(first.Host().ID())
	last.Host().Network().ClosePeer(first.Host().ID())
	last.Host().Peerstore().ClearAddrs(first.Host().ID())
	ai, err := last.DHT().FindPeer(ctx, first.Host().ID())
	if err != nil {
		t.Fatalf("FindPeer of the first node from the last: %v", err)
	}
	if ai.ID != first.Host().ID() || len(ai.Addrs) == 0 {
		t.Fatalf("FindPeer = %v, want node 1 (%s) with addresses", ai, first.Host().ID())
	}
	closest, err := last.DHT().GetClosestPeers(ctx, string(first.Host().ID()))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range closest {
		found = found || p == first.Host().ID()
	}
	if !found {
		t.Fatalf("GetClosestPeers(node 1) from the last node = %v, without node 1 (%s)", closest, first.Host().ID())
	}
	// The node's status says the same as its DHT.
	st, err := last.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.DHTPeers < 2 || st.Peers < 2 {
		t.Fatalf("status of the last node: %d peers connected, %d in the routing table", st.Peers, st.DHTPeers)
	}
}

// A node remembers the peers it met and rejoins through them when it
// restarts without -bootstrap.
func TestRejoinFromRemembered(t *testing.T) {
	a := netNode(t, t.TempDir(), nil)
	defer a.Close()
	b := netNode(t, t.TempDir(), a.Addrs())
	defer b.Close()
	home := t.TempDir()
	c := netNode(t, home, a.Addrs())
	waitFor(t, 10*time.Second, func() string { return "c's routing table is empty" },
		func() bool { return c.DHT().RoutingTable().Size() > 0 })
	// The file is written while the node runs, so that a node that
	// crashes rejoins too.
	waitFor(t, 10*time.Second, func() string { return "no peers file naming the bootstrap node while c runs" }, func() bool {
		data, err := os.ReadFile(filepath.Join(home, PeersFile))
		return err == nil && strings.Contains(string(data), a.Host().ID().String())
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(home, PeersFile))
	if err != nil {
		t.Fatalf("no peers file after close: %v", err)
	}
	peers, bad := parsePeers(data)
	if bad != 0 || len(peers) == 0 {
		t.Fatalf("peers file holds %d peers and %d bad lines:\n%s", len(peers), bad, data)
	}
	if !strings.Contains(string(data), a.Host().ID().String()) {
		t.Fatalf("peers file does not name the bootstrap node %s:\n%s", a.Host().ID(), data)
	}

	// Restarted without -bootstrap, on a new port.
	c = netNode(t, home, nil)
	defer c.Close()
	waitFor(t, 10*time.Second, func() string { return "the restarted node's routing table is empty" },
		func() bool { return c.DHT().RoutingTable().Size() > 0 })
	known := map[peer.ID]bool{a.Host().ID(): true, b.Host().ID(): true}
	for _, p := range c.DHT().RoutingTable().ListPeers() {
		if !known[p] {
			t.Fatalf("the restarted node's routing table holds %s, neither a nor b", p)
		}
	}
}

// A -bootstrap address that cannot be one is refused with an error that
// names it; one that does not answer is not an error.
func TestBadBootstrap(t *testing.T) {
	id := "12D3KooWGRUBkQ8jtu4ZKmfvTJRCaw4pEZRLbGyDFUJx7k1D5sXE"
	for _, a := range []string{
		"nonsense",
		"/ip4/127.0.0.1/tcp/7447",             // No peer ID.
		id,                                    // No address.
		"/ip4/127.0.0.1/tcpp/7447/p2p/" + id,  // Misspelt.
		"/ip4/127.0.0.1/tcp/7447/p2p/notanid", // Bad ID.
	} {
		_, err := New(context.Background(), Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: []spindle.PeerAddr{spindle.PeerAddr(a)}, Logger: testLogger(t)})
		if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), fmt.Sprintf("%q", a)) {
			t.Errorf("New with -bootstrap %s: %v, want Invalid naming it", a, err)
		}
	}

	// A peer that is not there: the node starts alone.
	start := time.Now()
	n := netNode(t, t.TempDir(), []spindle.PeerAddr{spindle.PeerAddr("/ip4/127.0.0.1/tcp/1/p2p/" + id)})
	defer n.Close()
	if d := time.Since(start); d > joinTimeout+5*time.Second {
		t.Errorf("start with an unreachable bootstrap peer took %v", d)
	}
}

// The peers file keeps the peers seen most recently first, at most
// MaxRemembered, and is rewritten only when that changes.
func TestPeerBook(t *testing.T) {
	file := filepath.Join(t.TempDir(), PeersFile)
	b := &peerBook{file: file, log: testLogger(t)}
	var all []peer.AddrInfo
	for i := range MaxRemembered + 10 {
		ai, err := peer.AddrInfoFromString(fmt.Sprintf("/ip4/127.0.0.1/tcp/%d/p2p/%s", 1000+i, newPeerID(t)))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, *ai)
	}
	if err := b.update(all[:3]); err != nil {
		t.Fatal(err)
	}
	if err := b.update(all[2:4]); err != nil { // 2 again, and 3 new.
		t.Fatal(err)
	}
	want := []peer.AddrInfo{all[2], all[3], all[0], all[1]}
	check := func(got []peer.AddrInfo, want []peer.AddrInfo) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%d peers, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || len(got[i].Addrs) != 1 || !got[i].Addrs[0].Equal(want[i].Addrs[0]) {
				t.Fatalf("peer %d is %v, want %v", i, got[i], want[i])
			}
		}
	}
	check(b.list(), want)
	// What the file holds reads back the same.
	b2 := &peerBook{file: file, log: testLogger(t)}
	b2.load()
	check(b2.list(), want)
	// No change, no write.
	fi, _ := os.Stat(file)
	os.Chtimes(file, time.Unix(1, 0), time.Unix(1, 0))
	if err := b.update(all[2:4]); err != nil {
		t.Fatal(err)
	}
	if fi2, _ := os.Stat(file); !fi2.ModTime().Equal(time.Unix(1, 0)) || fi2.Size() != fi.Size() {
		t.Fatal("the peers file was rewritten with no change")
	}
	// Bounded.
	if err := b.update(all); err != nil {
		t.Fatal(err)
	}
	if got := len(b.list()); got != MaxRemembered {
		t.Fatalf("%d peers remembered, want %d", got, MaxRemembered)
	}
	// Damage costs the damaged lines only.
	data, _ := os.ReadFile(file)
	damaged := "garbage\n/ip4/1.2.3.4/tcp/1\n" + string(data)
	peers, bad := parsePeers([]byte(damaged))
	if bad != 2 || len(peers) != MaxRemembered {
		t.Fatalf("damaged file: %d peers, %d bad lines; want %d, 2", len(peers), bad, MaxRemembered)
	}
}

func newPeerID(t testing.TB) peer.ID {
	h, err := p2p.NewHost(context.Background(), p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.ID()
}

// spin node status: the operator learns the node's state through the
// socket; over the network only a writer the node admits does.
func TestStatusAccess(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	c, keys := dialWithKeys(t, n, "ann@example.com")
	data := bytes.Repeat([]byte("a file for the status to count "), 10000) // Too large to be kept inline.
	if _, err := c.Put(ctx, ann("f"), bytes.NewReader(data), spindle.UnknownPack, nil); err != nil {
		t.Fatal(err)
	}

	st, err := client.NodeStatus(ctx, n.SocketAddr())
	if err != nil {
		t.Fatalf("status through the socket: %v", err)
	}
	if st.Peer != n.Host().ID().String() || st.Blocks < 1 || st.Bytes < int64(len(data)) {
		t.Fatalf("status: peer %s, %d blocks, %d bytes; want %s, at least 1 block of %d bytes", st.Peer, st.Blocks, st.Bytes, n.Host().ID(), len(data))
	}
	if st.CacheBytes == nil || st.CacheMax == nil || *st.CacheMax <= 0 || st.RepairBacklog == nil || *st.RepairBacklog != 0 {
		t.Fatal("status reports no cache or no repair backlog")
	}
	// As its own dir host, the node leases the file's blocks to itself.
	if _, err := n.RenewLeases(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := n.Status(ctx); err != nil || st.Leases == nil || *st.Leases < 1 || st.LeasedBlocks == nil || *st.LeasedBlocks < 1 || st.Collectable == nil {
		t.Fatalf("status after a renewal: %+v, %v", st, err)
	}

	// A stranger over the network is refused.
	if _, err := client.NodeStatus(ctx, n.DialAddr()); !errors.Is(err, spindle.Permission) {
		t.Fatalf("status over the network, not signed in: %v, want Permission", err)
	}
	// A signed-in writer is answered.
	r := dialRaw(t, n, keys)
	resp, err := r.call(&wire.Request{Method: wire.NodeStatus})
	if err != nil || resp.Status == nil || resp.Status.Blocks != st.Blocks {
		t.Fatalf("status for a writer: %v, %+v", err, resp)
	}
	// Whose trees the node hosts only its operator learns.
	if len(st.Logs) != 1 || st.Logs[0].User != "ann@example.com" {
		t.Errorf("logs in the status through the socket: %+v; want ann's", st.Logs)
	}
	if resp.Status.Logs != nil {
		t.Errorf("logs in the status for a writer over the network: %+v; want none", resp.Status.Logs)
	}
	// A signed-in user the node does not admit is refused.
	m, err := New(ctx, Config{Home: t.TempDir(), Writers: []string{"bob@example.com"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	carol, _, err := pack.Generate("carol@example.com")
	if err != nil {
		t.Fatal(err)
	}
	cc, err := client.Dial(ctx, client.Config{Keys: carol, Node: m.DialAddr(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cc.Signup(ctx) // Registers her key, then fails: m does not host her tree.
	if _, err := dialRaw(t, m, carol).call(&wire.Request{Method: wire.NodeStatus}); !errors.Is(err, spindle.Permission) {
		t.Fatalf("status for a user who is not a writer: %v, want Permission", err)
	}
}

// A node runs AutoNAT, hole punching and the relay client unless told
// not to, offers a relay only when told to, and asks the router for a
// port only when it listens beyond loopback.
func TestNATDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want p2p.NATConfig
	}{
		{Config{}, p2p.NATConfig{AutoNAT: true, HolePunch: true, RelayClient: true}},
		{Config{Listen: []string{"/ip4/127.0.0.1/tcp/7447", "/ip6/::1/tcp/7447"}}, p2p.NATConfig{AutoNAT: true, HolePunch: true, RelayClient: true}},
		{Config{Listen: []string{"/ip4/127.0.0.1/tcp/7447", "/ip4/0.0.0.0/tcp/7447"}}, p2p.NATConfig{PortMap: true, AutoNAT: true, HolePunch: true, RelayClient: true}},
		{Config{Listen: []string{"/ip4/0.0.0.0/tcp/7447"}, NoPortMap: true, NoAutoNAT: true, NoHolePunch: true, NoRelayClient: true, Relay: true}, p2p.NATConfig{RelayService: true}},
	} {
		n := &Node{cfg: tc.cfg}
		got := n.natConfig()
		if got.RelayCandidates == nil {
			t.Errorf("%+v: no relay candidates", tc.cfg)
		}
		got.RelayCandidates = nil
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", tc.want) {
			t.Errorf("%+v: NAT settings %+v, want %+v", tc.cfg, got, tc.want)
		}
	}
}
