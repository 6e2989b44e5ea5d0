package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// keyNode starts a node on 127.0.0.1 that uses the key cluster at keys
// and joins through it.
func keyNode(t testing.TB, keys spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: []spindle.PeerAddr{keys}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// fwdDial dials n with keys, with a key log of its own.
func fwdDial(t testing.TB, n *Node, keys *pack.Keys) *client.Client {
	t.Helper()
	return fwdDialWith(t, n, keys, false)
}

// fwdDialPlain is fwdDial for a client that has n carry its requests to
// other dir hosts in plain (client.Config.PlainForwarding), as clients
// did before tunnels: the tests of what a node in the middle can do with
// requests and answers it reads.
func fwdDialPlain(t testing.TB, n *Node, keys *pack.Keys) *client.Client {
	t.Helper()
	return fwdDialWith(t, n, keys, true)
}

func fwdDialWith(t testing.TB, n *Node, keys *pack.Keys, plain bool) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog"), PlainForwarding: plain})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A forwarding world: K runs the key cluster, B hosts ann's tree (ann
// signed up there), A and Z are further nodes that use K's cluster.
type fwdWorld struct {
	k, b, a, z *Node
	annKeys    *pack.Keys
}

func newFwdWorld(t *testing.T) *fwdWorld {
	t.Helper()
	k := netNode(t, "", nil)
	t.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	w := &fwdWorld{k: k, b: keyNode(t, kaddr), a: keyNode(t, kaddr), z: keyNode(t, kaddr)}
	for _, n := range []*Node{w.k, w.b, w.a, w.z} {
		waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= 3 })
	}
	if w.a.VerifierKey() != k.VerifierKey() {
		t.Fatalf("node A uses verifier key %q, want the key server's %q", w.a.VerifierKey(), k.VerifierKey())
	}
	_, w.annKeys = dialWithKeys(t, w.b, "ann@example.com")
	return w
}

// Ann, whose dir host is B, puts a file through A; bob, signed up on Z,
// reads it through Z. The entry is in B's log, not A's, and A's and Z's
// key requests reached K's cluster.
func TestPutThroughAGetThroughZ(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bob := dialAs(t, w.z, "bob@example.com")
	if _, err := w.k.kst().ks.Lookup(ctx, "bob@example.com"); err != nil {
		t.Fatalf("bob signed up through Z, but K's cluster lacks him: %v", err)
	}
	ann := fwdDial(t, w.a, w.annKeys)
	if _, err := ann.Put(ctx, "ann@example.com/Access", strings.NewReader("read: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20/2)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	if h, err := w.b.dir.Head(ctx, "ann@example.com"); err != nil || h.Seq < 3 {
		t.Fatalf("ann's log on her dir host B: %+v, %v; want the root, Access and f", h, err)
	}
	if h, err := w.a.dir.Head(ctx, "ann@example.com"); err == nil && h.Seq != 0 {
		t.Fatalf("node A, which only carried ann's requests, holds her log at %d", h.Seq)
	}
	mustRead(t, bob, "ann@example.com/f", data)
	mustRead(t, ann, "ann@example.com/f", data)

	// Bob's own tree is on Z; ann reads it through A.
	if _, err := bob.Put(ctx, "bob@example.com/Access", strings.NewReader("read: ann@example.com\n*: bob@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Put(ctx, "bob@example.com/g", strings.NewReader("from bob"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, ann, "bob@example.com/g", []byte("from bob"))
}

// A key lookup through the leader answers the same record as any other;
// on a one-member cluster the member is the leader.
func TestKeyLookupLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes")
	}
	k := netNode(t, "", nil)
	t.Cleanup(func() { k.Close() })
	a := keyNode(t, p2p.Addrs(k.Host())[0])
	_, keys := dialWithKeys(t, k, "ann@example.com")
	r := dialRaw(t, a, keys)
	resp, err := r.call(&wiretest.Request{Method: wire.KeyLookupLeader, User: "ann@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := keylog.DecodeRecord(resp.Data)
	if err != nil || u.PublicKey != keys.PublicKey() {
		t.Fatalf("lookup through the leader: %+v, %v", u, err)
	}
}

// signedReq returns req signed by keys for the node to.
func signedReq(t *testing.T, keys *pack.Keys, req wiretest.Request, to peer.ID) *wiretest.Request {
	t.Helper()
	return signedReqFrom(t, keys, req, to, "client")
}

// signedReqFrom is signedReq for the client peer client.
func signedReqFrom(t *testing.T, keys *pack.Keys, req wiretest.Request, to peer.ID, client string) *wiretest.Request {
	t.Helper()
	req.To = to.String()
	req.Auth = nil
	d, err := wiretest.SignedDigest(&req)
	if err != nil {
		t.Fatal(err)
	}
	nonce := make([]byte, 12)
	rand.Read(nonce)
	a := &wire.AuthMsg{User: keys.UserName(), ClientPeer: client, NodePeer: to.String(), Time: spindle.Now(), Req: d, Nonce: nonce}
	if a.Sig, err = keys.Sign(a.Digest()); err != nil {
		t.Fatal(err)
	}
	req.Auth = a
	return &req
}

// nodeCall sends req from node from to node to, as a forwarding node
// would, and returns the answer's error.
func nodeCall(t *testing.T, from *Node, to peer.ID, req *wiretest.Request) (*wiretest.Response, error) {
	t.Helper()
	data, err := wire.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	out, err := from.callPeer(context.Background(), peer.AddrInfo{ID: to}, data)
	if err != nil {
		return nil, err
	}
	return wiretest.DecodeResponse(out)
}

// The node in the middle cannot act as the user at the dir host: a
// request it makes up is refused, one the user signed is taken once, and
// one it altered, or re-addressed, is refused.
func TestForwarderCannotActAsUser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx := context.Background()
	ann := fwdDial(t, w.a, w.annKeys)
	if _, err := ann.Put(ctx, "ann@example.com/secret", strings.NewReader("s"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	bid := w.b.Host().ID()
	lookup := wiretest.Request{Method: wire.DirLookup, Name: "ann@example.com/secret"}

	// Unsigned: A holds no session at B. Addressed to B, unsigned, it is
	// an anonymous read: B answers what all may read, and ann's secret
	// is not that.
	if _, err := nodeCall(t, w.a, bid, &lookup); !errors.Is(err, spindle.Permission) {
		t.Errorf("unsigned %+v from A: %v, want Permission", lookup, err)
	}
	anon := &wiretest.Request{Method: lookup.Method, Name: lookup.Name, To: bid.String()}
	if resp, err := nodeCall(t, w.a, bid, anon); !errors.Is(err, spindle.Private) || resp != nil && resp.Entry != nil {
		t.Errorf("anonymous %+v from A: %+v, %v; want Private and no entry", anon, resp, err)
	}
	// A session A opens for itself is its own, not ann's: it has no key.
	// Signed by ann: taken once, then refused as a replay.
	signed := signedReq(t, w.annKeys, lookup, bid)
	if _, err := nodeCall(t, w.a, bid, signed); err != nil {
		t.Fatalf("signed lookup: %v", err)
	}
	if _, err := nodeCall(t, w.a, bid, signed); !errors.Is(err, spindle.Permission) || !strings.Contains(err.Error(), "replayed") {
		t.Errorf("replayed signed lookup: %v, want Permission (replayed)", err)
	}
	// Altered: another name, under ann's signature.
	altered := signedReq(t, w.annKeys, lookup, bid)
	altered.Name = "ann@example.com/other"
	if _, err := nodeCall(t, w.a, bid, altered); !errors.Is(err, spindle.Permission) || !strings.Contains(err.Error(), "altered") {
		t.Errorf("altered signed lookup: %v, want Permission (altered)", err)
	}
	// Re-addressed: signed for Z, sent to B.
	other := signedReq(t, w.annKeys, lookup, w.z.Host().ID())
	other.To = bid.String()
	if _, err := nodeCall(t, w.a, bid, other); !errors.Is(err, spindle.Permission) {
		t.Errorf("request signed for Z, taken to B: %v, want Permission", err)
	}
	// A signed delete made up by A with a key that is not ann's.
	mallory, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	forged := signedReq(t, mallory, lookup, bid)
	if _, err := nodeCall(t, w.a, bid, forged); !errors.Is(err, spindle.Permission) {
		t.Errorf("request signed with another key: %v, want Permission", err)
	}
	// A request for another user's tree from a client that has not signed
	// in to A is not carried.
	h, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	pid, err := p2p.Connect(ctx, h, w.a.DialAddr())
	if err != nil {
		t.Fatal(err)
	}
	data, _ := wire.Encode(signedReq(t, w.annKeys, lookup, bid))
	out, err := p2p.Call(ctx, h, pid, wire.ClientProtocol, data, wire.MaxMessage)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wiretest.DecodeResponse(out); !errors.Is(err, spindle.Permission) {
		t.Errorf("request carried for a peer not signed in to A: %v, want Permission", err)
	}
}

// A forwarding node that lies is caught by the client: it alters an
// entry, drops a proof, or swaps a key record for another user's.
func TestLyingForwarder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx := context.Background()
	_, bobKeys := dialWithKeys(t, w.z, "bob@example.com")
	ann := fwdDial(t, w.a, w.annKeys)
	if _, err := ann.Put(ctx, "ann@example.com/Access", strings.NewReader("read: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Put(ctx, "ann@example.com/f", strings.NewReader("true contents"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var lie func(req *wiretest.Request, resp *wiretest.Response)
	p2p.Handle(context.Background(), w.a.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := w.a.ServeClient(ctx, remote, data)
		mu.Lock()
		fn := lie
		mu.Unlock()
		if err != nil || fn == nil {
			return out, err
		}
		var req wiretest.Request
		var resp wiretest.Response
		if wire.Decode(data, &req) != nil || wire.Decode(out, &resp) != nil {
			return out, err
		}
		fn(&req, &resp)
		return wire.Encode(&resp)
	})
	tell := func(fn func(req *wiretest.Request, resp *wiretest.Response)) {
		mu.Lock()
		lie = fn
		mu.Unlock()
	}
	// A fresh client for each lie, with nothing cached.
	for _, tc := range []struct {
		name string
		fn   func(req *wiretest.Request, resp *wiretest.Response)
		do   func(c *client.Client) error
	}{
		{"alters the entry", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirLookup && resp.Entry != nil {
				resp.Entry.Size++
			}
		}, func(c *client.Client) error { _, err := c.Lookup(ctx, "ann@example.com/f", false); return err }},
		{"drops the proof", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirLookup {
				resp.DirProofs = nil
			}
		}, func(c *client.Client) error { _, err := c.Lookup(ctx, "ann@example.com/f", false); return err }},
		{"swaps the key record", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.KeyProof && req.User == "ann@example.com" {
				p, err := w.k.kst().keys.LookupProof(context.Background(), "bob@example.com")
				if err == nil {
					resp.Data, _ = p.MarshalBinary()
				}
			}
		}, func(c *client.Client) error { _, err := c.LookupUser(ctx, "ann@example.com"); return err }},
		{"alters the key record", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.KeyProof && req.User == "ann@example.com" {
				p, err := keylog.UnmarshalProof(resp.Data)
				if err != nil {
					return
				}
				u, err := keylog.DecodeRecord(p.Record)
				if err != nil {
					return
				}
				u.DirHosts = []spindle.PeerAddr{p2p.PeerAddrOf(w.a.Host().ID())}
				p.Record = keylog.EncodeRecord(u)
				resp.Data, _ = p.MarshalBinary()
			}
		}, func(c *client.Client) error { _, err := c.LookupUser(ctx, "ann@example.com"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tell(nil)
			c := fwdDialPlain(t, w.a, bobKeys)
			tell(tc.fn)
			defer tell(nil)
			if err := tc.do(c); !errors.Is(err, spindle.Integrity) {
				t.Errorf("forwarding node that %s: %v, want Integrity", tc.name, err)
			}
			tell(nil)
			if err := tc.do(c); err != nil {
				t.Errorf("once the node is honest again: %v", err)
			}
		})
	}
}

// A stopped dir host gives a clear error that names it.
func TestStoppedDirHost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx := context.Background()
	ann := fwdDial(t, w.a, w.annKeys)
	if _, err := ann.Put(ctx, "ann@example.com/f", strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	bid := w.b.Host().ID()
	w.b.Close()
	_, err := ann.Lookup(ctx, "ann@example.com/f", false)
	if err == nil || !strings.Contains(err.Error(), bid.String()) || !strings.Contains(err.Error(), "dir host") {
		t.Fatalf("lookup with ann's dir host stopped: %v; want an error naming dir host %s", err, bid)
	}
	t.Logf("error: %v", err)
}

// A member that is not the leader carries a key.put to the leader, and a
// lookup through the leader; a node that is no member, using the
// follower as its key server, reaches the leader through it.
func TestFollowerForwardsToLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes and a two-member key cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := netNode(t, "", nil)
	t.Cleanup(func() { l.Close() })
	m := netNode(t, "", []spindle.PeerAddr{p2p.Addrs(l.Host())[0]})
	t.Cleanup(func() { m.Close() })
	// M leaves its own cluster of one and joins L's as a follower.
	if err := m.kst().keys.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := p2p.Listen(m.Host(), RaftProtocol)
	if err != nil {
		t.Fatal(err)
	}
	fol, err := keyraft.Open(ctx, keyraft.Config{ID: m.Host().ID().String(), Listener: ln, Dial: p2p.Dialer(m.Host(), RaftProtocol), HeartbeatTimeout: 250 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	m.keyState.Store(&keyState{keys: fol, ks: fol})
	if err := l.kst().keys.AddVoter(ctx, m.Host().ID().String()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() string { return "follower sees leader " + fol.Leader() },
		func() bool { return fol.Leader() == l.Host().ID().String() })
	if fol.IsLeader() {
		t.Fatal("the joined member leads")
	}

	// Sign-up through the follower: the record reaches the leader, and the
	// sign-in that follows, on the follower, finds it.
	ann, annKeys := dialWithKeys(t, m, "ann@example.com")
	if _, err := l.kst().keys.Lookup(ctx, "ann@example.com"); err != nil {
		t.Fatalf("ann signed up through the follower; the leader has no record: %v", err)
	}
	if _, err := ann.Put(ctx, "ann@example.com/f", strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, m, annKeys)
	resp, err := r.call(&wiretest.Request{Method: wire.KeyLookupLeader, User: "ann@example.com"})
	if err != nil {
		t.Fatalf("lookup through the leader from the follower: %v", err)
	}
	if u, err := keylog.DecodeRecord(resp.Data); err != nil || u.Name != "ann@example.com" {
		t.Fatalf("lookup through the leader: %+v, %v", u, err)
	}

	// The leader does not count the puts a member carries to it against
	// that member: each client is counted where it arrives.
	for i := range DefaultKeyPutLimit + 1 {
		dialAs(t, m, spindle.UserName(fmt.Sprintf("u%d@example.com", i)))
	}

	// A node that is no member, with the follower as its key server.
	a := keyNode(t, p2p.Addrs(m.Host())[0])
	dialAs(t, a, "bob@example.com")
	if _, err := l.kst().keys.Lookup(ctx, "bob@example.com"); err != nil {
		t.Fatalf("bob signed up through a node using the follower; the leader has no record: %v", err)
	}
}

// Small put and get latency through a node that forwards to the dir host,
// against the same through the dir host itself: ann's tree is on B; the
// direct client talks to B, the forwarded ones to A, which carries
// their requests to B in a tunnel (tunnel.go), or in plain.
func BenchmarkForwardedSmall(b *testing.B) {
	k := netNode(b, "", nil)
	b.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	host, via := keyNode(b, kaddr), keyNode(b, kaddr)
	waitFor(b, 30*time.Second, func() string { return "routing tables fill" },
		func() bool { return via.DHT().RoutingTable().Size() >= 2 && host.DHT().RoutingTable().Size() >= 2 })
	_, keys := dialWithKeys(b, host, "ann@example.com")
	data := make([]byte, 1<<10)
	rand.Read(data)
	ctx := context.Background()
	for _, bc := range []struct {
		name  string
		n     *Node
		plain bool
	}{{"direct", host, false}, {"forwarded", via, false}, {"forwarded-plain", via, true}} {
		c := fwdDialWith(b, bc.n, keys, bc.plain)
		b.Run("put/"+bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				i++
				if _, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/%s-%d", bc.name, i)), bytes.NewReader(data), spindle.EEPack, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		name := spindle.PathName("ann@example.com/" + bc.name + "-1")
		b.Run("get/"+bc.name, func(b *testing.B) {
			for b.Loop() {
				got, err := readAll(ctx, c, name)
				if err != nil || !bytes.Equal(got, data) {
					b.Fatalf("read %s: %d bytes, %v", name, len(got), err)
				}
			}
		})
	}
}

// readAll reads a file through c.
func readAll(ctx context.Context, c *client.Client, name spindle.PathName) ([]byte, error) {
	f, err := c.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// The memory of signed requests catches a replay however late it comes
// within the time a signature is good for, forgets what can no longer
// come again, and refuses work rather than forget too soon.
func TestSeenSigned(t *testing.T) {
	var s seenSigned
	t0 := time.Now()
	a, b := [32]byte{1}, [32]byte{2}
	if ok, err := s.take(a, t0); !ok || err != nil {
		t.Fatalf("first take: %v, %v", ok, err)
	}
	for _, d := range []time.Duration{0, maxClockSkew, 2*maxClockSkew + time.Second, 4*maxClockSkew - time.Second} {
		if ok, err := s.take(a, t0.Add(d)); ok || err != nil {
			t.Errorf("replay %v later taken: %v, %v", d, ok, err)
		}
	}
	// Two generations on, a has been forgotten: its signature expired.
	if ok, _ := s.take(b, t0.Add(6*maxClockSkew)); !ok {
		t.Fatal("new request refused")
	}
	if ok, _ := s.take(a, t0.Add(8*maxClockSkew+time.Second)); !ok {
		t.Error("request long expired still remembered")
	}
	var full seenSigned
	for i := range maxSignedSeen {
		var k [32]byte
		k[0], k[1], k[2] = byte(i), byte(i>>8), byte(i>>16)
		if ok, err := full.take(k, t0); !ok || err != nil {
			t.Fatalf("take %d: %v, %v", i, ok, err)
		}
	}
	if _, err := full.take([32]byte{0xff, 0xff, 0xff, 1}, t0); !errors.Is(err, spindle.Transient) {
		t.Errorf("take beyond the bound: %v, want Transient", err)
	}
}

// A watch of a tree another node hosts is refused with an error naming
// that node, not left to wait for events that never come.
func TestWatchElsewhereRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ann := fwdDial(t, w.a, w.annKeys)
	_, err := ann.Watch(context.Background(), "ann@example.com/", 0)
	if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), w.b.Host().ID().String()) {
		t.Fatalf("watch through A of a tree on B: %v; want Invalid naming B", err)
	}
}
