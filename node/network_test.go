package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A key cluster of one (L) closes its network to its members: itself and
// node B, which an operator admits. Node C, which nobody admitted, uses
// the same cluster. Every node learns the policy from the cluster; no
// member keeps C in its routing table or stores C's provider records; a
// user whose tree is on C cannot put blocks there, and is told why; a
// reader through C still reads a file put through B. Once the operator
// takes B out, L drops it and B takes no more puts; C, restarted while
// the cluster is away, keeps the list it had.
func TestMembersOnlyNetwork(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l := netNode(t, "", nil)
	t.Cleanup(func() { l.Close() })
	laddr := p2p.Addrs(l.Host())[0]
	b := keyNode(t, laddr)
	cHome := t.TempDir()
	c := keyNodeAt(t, cHome, laddr)

	op, _, err := pack.Generate("op@example.com")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(kind, arg string, key spindle.PublicKey) {
		t.Helper()
		resp, err := call(t, l, false, &wiretest.Request{Method: wire.KeyChange, Data: change(t, op, status(t, l), kind, arg, key)})
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if resp.Err != nil {
			t.Fatalf("%s: %v", kind, resp.Err)
		}
	}
	// Nodes that are not members of the cluster learn its configuration
	// with its members (every memberRefresh); the test does not wait.
	refresh := func(nodes ...*Node) {
		t.Helper()
		for _, n := range nodes {
			if err := n.kst().rkeys.refreshMembers(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	inTable := func(n, p *Node) bool { return n.DHT().RoutingTable().Find(p.Host().ID()) != "" }

	// Open, as every network is until its operators close it: all three
	// meet in the DHT.
	apply(keylog.ChangeInit, l.VerifierKey(), op.PublicKey())
	for _, n := range []*Node{b, c} {
		if err := n.Host().Connect(ctx, peer.AddrInfo{ID: l.Host().ID(), Addrs: l.Host().Addrs()}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, func() string { return fmt.Sprintf("L's routing table has %d peers", l.DHT().RoutingTable().Size()) },
		func() bool { return inTable(l, b) && inTable(l, c) })

	// While the network is open, L keeps what C announces.
	lProvides := func(key cid.Cid, p peer.ID) bool {
		provs, err := l.DHT().ProviderStore().GetProviders(ctx, key.Hash())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(provs, func(ai peer.AddrInfo) bool { return ai.ID == p })
	}
	provide := func(what string) cid.Cid {
		k, _ := mh.Sum([]byte(what), mh.SHA2_256, -1)
		key := cid.NewCidV1(cid.Raw, k)
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		defer pcancel()
		err := c.DHT().Provide(pctx, key, true) // In a closed network, L drops it unanswered.
		t.Logf("C announces %s: %v", key, err)
		return key
	}
	open := provide("a block C holds in an open network")
	start := time.Now()
	waitFor(t, 10*time.Second, func() string { return "in an open network, L does not keep C's provider record for " + open.String() },
		func() bool { return lProvides(open, c.Host().ID()) })
	took := time.Since(start)

	apply(keylog.ChangeAddNode, b.Host().ID().String(), "")
	apply(keylog.ChangeNetwork, keylog.NetworkMembers, "")
	if st := status(t, l); st.Network != keylog.NetworkMembers || !slices.Contains(st.Nodes, b.Host().ID().String()) || !slices.Contains(st.Nodes, l.Host().ID().String()) || slices.Contains(st.Nodes, c.Host().ID().String()) {
		t.Fatalf("cluster status: network %q, nodes %v", st.Network, st.Nodes)
	}
	refresh(b, c)
	waitFor(t, 10*time.Second, func() string { return "L has not dropped C from its routing table" },
		func() bool { return !inTable(l, c) })
	// B applied the change as refresh gave it; on a loaded machine its
	// routing table may drop C a moment later. Once out, C stays out.
	waitFor(t, 10*time.Second, func() string { return "B keeps C, which is no member, in its routing table" },
		func() bool { return !inTable(b, c) })
	refresh(b, c)
	time.Sleep(time.Second)
	if inTable(l, c) || inTable(b, c) {
		t.Error("C, which is no member, came back into a member's routing table")
	}
	for _, n := range []*Node{l, b, c} {
		st, err := n.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := n != c
		if st.Network != keylog.NetworkMembers || st.NetworkMember != want || st.NetworkMembers != 2 {
			t.Errorf("%s status: network %q, member %v of %d; want members, %v of 2", n.Host().ID(), st.Network, st.NetworkMember, st.NetworkMembers, want)
		}
	}

	// C announces a block to L: the record is not kept.
	closed := provide("a block only C says it holds")
	time.Sleep(max(time.Second, 10*took)) // Ten times as long as the open network's record took.
	if lProvides(closed, c.Host().ID()) {
		t.Errorf("L keeps C's provider record for %s", closed)
	}

	// Ann's tree is on B, a member: her puts work. Bob's is on C: his are
	// refused, and the error says what to do.
	annKeys := newKeys(t, "ann@example.com")
	ann := fwdDial(t, b, annKeys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatalf("put through a member: %v", err)
	}
	bob := fwdDial(t, c, newKeys(t, "bob@example.com"))
	if err := bob.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = bob.Put(ctx, "bob@example.com/f", bytes.NewReader(data[:1000]), spindle.EEPack, nil)
	if !errors.Is(err, spindle.Permission) || !strings.Contains(err.Error(), "spin key node add") {
		t.Fatalf("put through a node that is no member: %v; want Permission naming spin key node add", err)
	}

	// Ann reads her file through C, which finds its blocks through the
	// members' DHT and fetches them from members.
	annViaC := fwdDial(t, c, annKeys)
	mustRead(t, annViaC, "ann@example.com/f", data)

	// The operator takes B out: L drops it at once, and B refuses puts.
	apply(keylog.ChangeRemoveNode, b.Host().ID().String(), "")
	waitFor(t, 10*time.Second, func() string { return "L keeps B, removed, in its routing table" },
		func() bool { return !inTable(l, b) })
	refresh(b, c)
	_, err = ann.Put(ctx, "ann@example.com/g", bytes.NewReader(data[:1000]), spindle.EEPack, nil)
	if !errors.Is(err, spindle.Permission) {
		t.Fatalf("put through a node taken out of the network: %v; want Permission", err)
	}

	// C keeps what it learnt in its home, for a restart while the
	// cluster is away; a node that reads it back has B as no member.
	c.Close()
	again := &Node{cfg: Config{Home: cHome}, log: testLogger(t), host: b.Host()}
	again.loadNetView()
	if v := again.netView.Load(); v == nil || v.Network != keylog.NetworkMembers {
		t.Fatalf("C's home keeps no members-only view: %+v", v)
	}
	if again.isNetMember(b.Host().ID()) || !again.isNetMember(l.Host().ID()) || again.isNetMember(c.Host().ID()) {
		t.Errorf("read back from C's home: B member %v, L member %v, C member %v; want false, true, false",
			again.isNetMember(b.Host().ID()), again.isNetMember(l.Host().ID()), again.isNetMember(c.Host().ID()))
	}
}

// keyNodeAt is keyNode with a home.
func keyNodeAt(t testing.TB, home string, keys spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, NoSocket: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: []spindle.PeerAddr{keys}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// A node keeps the newest view of its network it was given: a member
// that answers from an older configuration (one that has not applied the
// change that closed the network yet) cannot open it again.
func TestNetViewNewest(t *testing.T) {
	l := netNode(t, "", nil)
	t.Cleanup(func() { l.Close() })
	n := &Node{cfg: Config{Home: t.TempDir()}, log: testLogger(t), host: l.Host()}
	member := l.Host().ID().String()
	n.setNetView(newNetView(5, keylog.NetworkMembers, []string{member}))
	n.learnNetworkStatus(&wire.ClusterStatus{Seq: 3, Network: keylog.NetworkOpen})
	stranger := peer.ID("stranger")
	if n.isNetMember(stranger) {
		t.Fatal("an older configuration opened the network again")
	}
	n.learnNetworkStatus(&wire.ClusterStatus{Seq: 6, Network: keylog.NetworkOpen})
	if !n.isNetMember(stranger) {
		t.Fatal("a newer configuration that opens the network was not taken")
	}
}
