package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// mirrorWait bounds the waits for a mirror to catch up: generous, for a
// loaded machine.
const mirrorWait = 60 * time.Second

// mirrorNodes starts a key cluster node K and n more nodes using it, all
// of which know each other through the DHT.
func mirrorNodes(t *testing.T, n int) (*Node, []*Node) {
	t.Helper()
	k := netNode(t, "", nil)
	t.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	hs := make([]*Node, n)
	for i := range hs {
		hs[i] = keyNode(t, kaddr)
	}
	for _, h := range append([]*Node{k}, hs...) {
		waitFor(t, mirrorWait, func() string { return fmt.Sprintf("%s knows %d peers", h.Host().ID(), h.DHT().RoutingTable().Size()) },
			func() bool { return h.DHT().RoutingTable().Size() >= 2 })
	}
	return k, hs
}

// hostAddrs returns the dir host addresses of nodes, in order.
func hostAddrs(nodes ...*Node) []spindle.PeerAddr {
	var out []spindle.PeerAddr
	for _, n := range nodes {
		out = append(out, p2p.PeerAddrOf(n.Host().ID()))
	}
	return out
}

// headOf returns owner's head on n (zero if none).
func headOf(t *testing.T, n *Node, owner spindle.UserName) *dirlog.Head {
	t.Helper()
	h, err := n.dir.Head(context.Background(), owner)
	if err != nil {
		t.Fatalf("head of %s on %s: %v", owner, n.Host().ID(), err)
	}
	return h
}

// waitMirrored waits until every mirror holds the head from has.
func waitMirrored(t *testing.T, owner spindle.UserName, from *Node, mirrors ...*Node) {
	t.Helper()
	want := headOf(t, from, owner)
	for _, m := range mirrors {
		waitFor(t, mirrorWait, func() string {
			st, _ := m.MirrorStatus(context.Background(), owner)
			return fmt.Sprintf("mirror %s of %s at %d (status %+v), sequencer at %d", m.Host().ID(), owner, headOf(t, m, owner).Seq, st, want.Seq)
		}, func() bool {
			h := headOf(t, m, owner)
			return h.Seq == want.Seq && h.Hash == want.Hash
		})
	}
}

// Ann's log is on H1 with mirrors H2 and H3. Bob, granted write, writes
// into it through H4 and his entry reaches every mirror; carol is refused
// by every host alike. With H1 stopped, bob reads ann's file through H4
// from a mirror, ann's write fails naming H1, and once ann lists H2 first
// H2 takes her writes and H3 mirrors them from it.
func TestMirrorsServeWithSequencerDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts six networked nodes")
	}
	_, h := mirrorNodes(t, 5)
	h1, h2, h3, h4, h5 := h[0], h[1], h[2], h[3], h[4]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")

	_, annKeys := dialWithKeys(t, h1, annU)
	annC := fwdDial(t, h4, annKeys)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2, h3)); err != nil {
		t.Fatal(err)
	}
	bob := dialAs(t, h4, "bob@example.com")
	_, carolKeys := dialWithKeys(t, h5, "carol@example.com")

	if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("read, list, write, create: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 100<<10)
	rand.Read(data)
	if _, err := annC.Put(ctx, ann("f"), bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Put(ctx, ann("from-bob"), strings.NewReader("bob was here"), spindle.EEPack, nil); err != nil {
		t.Fatalf("bob writes into ann's tree while H1 is up: %v", err)
	}
	waitMirrored(t, annU, h1, h2, h3)
	for _, m := range []*Node{h2, h3} {
		if _, err := m.dir.Lookup(ctx, annU, ann("from-bob")); err != nil {
			t.Errorf("bob's entry on mirror %s: %v", m.Host().ID(), err)
		}
		if st, ok := m.MirrorStatus(ctx, annU); !ok || st.Err != nil || st.Source != h1.Host().ID() || st.Sequencer {
			t.Errorf("mirror %s: %+v, %v; want copied from H1 %s without error", m.Host().ID(), st, ok, h1.Host().ID())
		}
	}
	if st, _ := h1.MirrorStatus(ctx, annU); !st.Sequencer {
		t.Errorf("H1 does not know it sequences ann's log: %+v", st)
	}

	// Carol has no right: every host refuses her with the same kind.
	for _, m := range []*Node{h1, h2, h3} {
		for _, req := range []wiretest.Request{
			{Method: wire.DirLookup, Name: ann("f")},
			{Method: wire.DirGlob, Pattern: string(ann("*"))},
			{Method: wire.DirWhich, Name: ann("f")},
		} {
			_, err := nodeCall(t, h5, m.Host().ID(), signedReq(t, carolKeys, req, m.Host().ID()))
			if !errors.Is(err, spindle.Private) {
				t.Errorf("carol's %s on %s: %v, want Private", req.Method, m.Host().ID(), err)
			}
		}
	}
	// A mirror takes no writes: they would fork the log.
	_, err := nodeCall(t, h4, h2.Host().ID(), signedReq(t, annKeys, wiretest.Request{Method: wire.DirAppend, Data: mkdirEntry(t, annKeys, headOf(t, h2, annU), ann("d"), h2.keyLogSize())}, h2.Host().ID()))
	if !errors.Is(err, spindle.Permission) || !strings.Contains(fmt.Sprint(err), h1.Host().ID().String()) {
		t.Errorf("write sent to mirror H2: %v, want Permission naming the sequencer H1", err)
	}

	// H1 stops: bob reads through H4 from a mirror.
	h1id := h1.Host().ID()
	h1.Close()
	mustRead(t, bob, ann("f"), data)
	mustRead(t, bob, ann("from-bob"), []byte("bob was here"))
	if des, err := bob.Glob(ctx, string(ann("*"))); err != nil || len(des) != 3 {
		t.Errorf("bob's glob with H1 down: %d entries, %v; want Access, f, from-bob", len(des), err)
	}
	if a, err := bob.WhichAccess(ctx, ann("f")); err != nil || a == nil || a.Name != ann("Access") {
		t.Errorf("bob's WhichAccess with H1 down: %v, %v", a, err)
	}
	if _, err := fwdDial(t, h5, carolKeys).Lookup(ctx, ann("f"), false); !errors.Is(err, spindle.Private) {
		t.Errorf("carol's lookup with H1 down: %v, want Private", err)
	}
	// Writes wait for the sequencer, and say so.
	_, err = annC.Put(ctx, ann("g"), strings.NewReader("g"), spindle.EEPack, nil)
	if !errors.Is(err, spindle.IO) || !strings.Contains(fmt.Sprint(err), h1id.String()) || !strings.Contains(fmt.Sprint(err), "sequencer") {
		t.Errorf("ann's write with H1 down: %v; want IO naming the sequencer %s", err, h1id)
	}

	// Ann lists H2 first: it takes her writes, H3 mirrors them from it.
	if err := annC.SetDirHosts(ctx, hostAddrs(h2, h3, h1)); err != nil {
		t.Fatal(err)
	}
	before := headOf(t, h2, annU)
	if _, err := annC.Put(ctx, ann("g"), strings.NewReader("after the move"), spindle.EEPack, nil); err != nil {
		t.Fatalf("ann's write once H2 is first: %v", err)
	}
	if after := headOf(t, h2, annU); after.Seq <= before.Seq {
		t.Fatalf("H2 at %d after ann's write, was at %d", after.Seq, before.Seq)
	}
	// Bob's client still holds ann's old record, which names H1 first: his
	// write finds the new sequencer.
	if _, err := bob.Put(ctx, ann("from-bob-2"), strings.NewReader("bob again"), spindle.EEPack, nil); err != nil {
		t.Fatalf("bob's write after ann moved the sequencing to H2: %v", err)
	}
	waitMirrored(t, annU, h2, h3)
	if st, _ := h3.MirrorStatus(ctx, annU); st.Err != nil || st.Source != h2.Host().ID() {
		t.Errorf("H3 after the move: %+v; want copied from H2", st)
	}
	mustRead(t, bob, ann("g"), []byte("after the move"))
}

// mkdirEntry returns an encoded entry, signed with keys, that makes the
// directory name after head.
func mkdirEntry(t *testing.T, keys *pack.Keys, head *dirlog.Head, name spindle.PathName, keyAt int64) []byte {
	t.Helper()
	e := &dirlog.Entry{Seq: head.Seq + 1, Prev: head.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, ReadersAt: head.Seq, KeyAt: keyAt,
		Entry: spindle.DirEntry{Name: name, Attr: spindle.AttrDirectory, Writer: keys.UserName(), Sequence: head.Seq + 1}}
	e.Entry.Time = e.Time
	if err := e.Sign(keys); err != nil {
		t.Fatal(err)
	}
	return e.Marshal()
}

// A hostile sequencer cannot make a mirror take an entry whose signature
// is bad, or one that the Access file in force did not allow its writer,
// or a log that forks from the mirror's; a peer that is no dir host gets
// no log. Once the host is honest the mirror catches up.
func TestMirrorRefusesHostileEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	_, h := mirrorNodes(t, 3)
	h1, h2, h3 := h[0], h[1], h[2]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, annKeys := dialWithKeys(t, h1, annU)
	_, carolKeys := dialWithKeys(t, h3, "carol@example.com")
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, h1, h2)

	var mu sync.Mutex
	var lie func(resp *wiretest.Response)
	h1Signer, err := p2p.NewPeerSigner(h1.Host())
	if err != nil {
		t.Fatal(err)
	}
	p2p.Handle(context.Background(), h1.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := h1.ServeClient(ctx, remote, data)
		mu.Lock()
		fn := lie
		mu.Unlock()
		var req wiretest.Request
		var resp wiretest.Response
		if err != nil || fn == nil || wire.Decode(data, &req) != nil || req.Method != wire.DirMirror || wire.Decode(out, &resp) != nil {
			return out, err
		}
		fn(&resp)
		return wire.Encode(&resp)
	})
	tell := func(fn func(resp *wiretest.Response)) {
		mu.Lock()
		lie = fn
		mu.Unlock()
	}

	for _, tc := range []struct {
		name string
		lie  func(resp *wiretest.Response)
		kind spindle.Kind
	}{
		{"bad signature", func(resp *wiretest.Response) {
			if len(resp.Log) == 0 {
				return
			}
			e, err := dirlog.UnmarshalEntry(resp.Log[0])
			if err != nil {
				return
			}
			e.Sig[len(e.Sig)/2] ^= 1
			resp.Log[0] = e.Marshal()
		}, spindle.Integrity},
		{"writer without the right", func(resp *wiretest.Response) {
			if len(resp.Log) == 0 {
				return
			}
			resp.Log = [][]byte{mkdirEntry(t, carolKeys, headOf(t, h2, annU), ann("carol-was-here"), h2.keyLogSize())}
		}, spindle.Private},
		{"forked log", func(resp *wiretest.Response) {
			if len(resp.Log) == 0 {
				return
			}
			forked := *headOf(t, h2, annU)
			forked.Hash[0] ^= 1
			resp.Log = [][]byte{mkdirEntry(t, annKeys, &forked, ann("fork"), h2.keyLogSize())}
		}, spindle.Integrity},
		{"another log root", func(resp *wiretest.Response) {
			if resp.Head != nil {
				resp.Head.LogRoot[0] ^= 1
				resp.Head.Sign(h1Signer)
			}
		}, spindle.Integrity},
		{"rolled back", func(resp *wiretest.Response) {
			resp.Log = nil
			if resp.Head != nil {
				resp.Head.Seq = 1
			}
		}, spindle.Integrity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tell(tc.lie)
			defer tell(nil)
			held := headOf(t, h2, annU)
			if _, err := annC.Put(ctx, ann(strings.ReplaceAll(tc.name, " ", "-")), strings.NewReader(tc.name), spindle.EEPack, nil); err != nil {
				t.Fatal(err)
			}
			var st MirrorStatus
			waitFor(t, mirrorWait, func() string { return fmt.Sprintf("mirror status %+v, want an error of kind %v", st, tc.kind) }, func() bool {
				st, _ = h2.MirrorStatus(ctx, annU)
				return st.Err != nil && errors.Is(st.Err, tc.kind)
			})
			t.Logf("mirror refused: %v", st.Err)
			if !strings.Contains(st.Err.Error(), h1.Host().ID().String()) {
				t.Errorf("mirror error %v does not name the host that served it, %s", st.Err, h1.Host().ID())
			}
			// A wrong log root comes with genuine entries, which the
			// mirror rightly takes before it compares heads.
			if now := headOf(t, h2, annU); tc.name != "another log root" && (now.Seq != held.Seq || now.Hash != held.Hash) {
				t.Errorf("mirror moved from %d to %d on a hostile answer", held.Seq, now.Seq)
			}
			if _, err := h2.dir.Lookup(ctx, annU, ann("carol-was-here")); !errors.Is(err, spindle.NotExist) {
				t.Errorf("carol's entry on the mirror: %v, want NotExist", err)
			}
			tell(nil)
			waitMirrored(t, annU, h1, h2)
			waitFor(t, mirrorWait, func() string { return fmt.Sprintf("mirror caught up but still reports %v", st.Err) }, func() bool {
				st, _ = h2.MirrorStatus(ctx, annU)
				return st.Err == nil
			})
		})
	}

	// A peer that is no dir host of ann gets no entries.
	_, err = nodeCall(t, h3, h1.Host().ID(), &wiretest.Request{Method: wire.DirMirror, User: annU, Seq: 1, Size: 10})
	if !errors.Is(err, spindle.Permission) {
		t.Errorf("dir.mirror from a peer that is no dir host: %v, want Permission", err)
	}
}

// homeNode starts a node keeping its state in home, using the key cluster
// at keys.
func homeNode(t *testing.T, home string, keys spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, NoSocket: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: []spindle.PeerAddr{keys}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Ann's sequencer H1 stops; she lists her mirror H2 first and writes
// there. H1 starts again from its disk, finds itself a mirror, and
// catches up from H2 without a fork.
func TestMirrorRestartCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes and restarts one")
	}
	k, h := mirrorNodes(t, 2)
	h2, h3 := h[0], h[1]
	home := t.TempDir()
	h1 := homeNode(t, home, p2p.Addrs(k.Host())[0])
	closed := false
	t.Cleanup(func() {
		if !closed {
			h1.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	_, annKeys := dialWithKeys(t, h1, annU)
	annC := fwdDial(t, h3, annKeys)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("before"), strings.NewReader("before"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, h1, h2)
	old := headOf(t, h1, annU)

	id := h1.Host().ID()
	h1.Close()
	closed = true
	if err := annC.SetDirHosts(ctx, hostAddrs(h2, h1)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("after"), strings.NewReader("after"), spindle.EEPack, nil); err != nil {
		t.Fatalf("write to H2 once first: %v", err)
	}

	h1 = homeNode(t, home, p2p.Addrs(k.Host())[0])
	closed = false
	if h1.Host().ID() != id {
		t.Fatalf("H1 restarted as %s, was %s", h1.Host().ID(), id)
	}
	if h := headOf(t, h1, annU); h.Seq != old.Seq || h.Hash != old.Hash {
		t.Fatalf("H1 restarted at %d, stopped at %d", h.Seq, old.Seq)
	}
	waitMirrored(t, annU, h2, h1)
	if st, _ := h1.MirrorStatus(ctx, annU); st.Err != nil || st.Source != h2.Host().ID() {
		t.Errorf("H1 after its restart: %+v; want copied from H2", st)
	}
	if _, err := h1.dir.Lookup(ctx, annU, ann("after")); err != nil {
		t.Errorf("the entry written on H2 on the restarted H1: %v", err)
	}
	mustRead(t, annC, ann("before"), []byte("before"))
	mustRead(t, annC, ann("after"), []byte("after"))
}

// BenchmarkMirrorCatchUp measures how fast a mirror added later copies a
// log of 5,000 entries (directories, checked as appends) from the
// sequencer over loopback: each iteration adds a fresh node as the second
// dir host and waits until it holds the sequencer's head.
func BenchmarkMirrorCatchUp(b *testing.B) {
	const entries = 5000
	k := netNode(b, "", nil)
	b.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	h1 := keyNode(b, kaddr)
	ctx := context.Background()
	const annU = spindle.UserName("ann@example.com")
	annC, annKeys := dialWithKeys(b, h1, annU)
	for done := 0; done < entries; {
		h, err := h1.dir.Head(ctx, annU)
		if err != nil {
			b.Fatal(err)
		}
		var es []*dirlog.Entry
		for i := range min(dirlog.MaxBatch, entries-done) {
			e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, KeyAt: h1.keyLogSize(),
				Entry: spindle.DirEntry{Name: ann(fmt.Sprintf("d%d", done+i)), Attr: spindle.AttrDirectory, Writer: annU, Sequence: h.Seq + 1}}
			e.Entry.Time = e.Time
			if err := e.Sign(annKeys); err != nil {
				b.Fatal(err)
			}
			es = append(es, e)
			h = &dirlog.Head{Seq: e.Seq, Hash: e.Hash()}
		}
		if _, err := h1.dir.AppendBatch(ctx, es); err != nil {
			b.Fatal(err)
		}
		done += len(es)
	}
	want, err := h1.dir.Head(ctx, annU)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var total time.Duration
	for range b.N {
		b.StopTimer()
		m := keyNode(b, kaddr)
		b.StartTimer()
		start := time.Now()
		if err := annC.SetDirHosts(ctx, hostAddrs(h1, m)); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(5 * time.Minute)
		for {
			h, err := m.dir.Head(ctx, annU)
			if err == nil && h.Seq == want.Seq && h.Hash == want.Hash {
				break
			}
			if time.Now().After(deadline) {
				st, _ := m.MirrorStatus(ctx, annU)
				b.Fatalf("mirror at %d of %d after 5 minutes: %+v", h.Seq, want.Seq, st)
			}
			time.Sleep(5 * time.Millisecond)
		}
		total += time.Since(start)
		b.StopTimer()
		m.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(want.Seq)*float64(b.N)/total.Seconds(), "entries/s")
}

// A host moved first before it caught up starts a log of its own: the old
// sequencer, now a mirror, reports that the new one is behind it, keeps
// its own log as it was, and takes nothing.
func TestTakeoverNotCaughtUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	_, h := mirrorNodes(t, 3)
	h1, h2, h3 := h[0], h[1], h[2]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	_, annKeys := dialWithKeys(t, h1, annU)
	annC := fwdDial(t, h3, annKeys)
	for _, name := range []string{"a", "b"} {
		if _, err := annC.Put(ctx, ann(name), strings.NewReader(name), spindle.EEPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	held := headOf(t, h1, annU)
	// H2 never mirrored: it holds nothing of ann's log.
	if err := annC.SetDirHosts(ctx, hostAddrs(h2, h1)); err != nil {
		t.Fatal(err)
	}
	// Ann's client saw her log at a later head, and says so.
	if _, err := annC.MakeDirectory(ctx, "ann@example.com/"); !errors.Is(err, spindle.Integrity) {
		t.Errorf("ann's client writing to the new sequencer H2, behind the head it saw: %v, want Integrity", err)
	}
	// A client that saw nothing starts the new log there.
	if _, err := fwdDial(t, h3, annKeys).MakeDirectory(ctx, "ann@example.com/"); err != nil {
		t.Fatalf("ann's root on the new sequencer H2: %v", err)
	}
	var st MirrorStatus
	waitFor(t, mirrorWait, func() string { return fmt.Sprintf("H1's mirror status %+v, want Integrity", st) }, func() bool {
		st, _ = h1.MirrorStatus(ctx, annU)
		return errors.Is(st.Err, spindle.Integrity)
	})
	t.Logf("H1 reports: %v", st.Err)
	if !strings.Contains(st.Err.Error(), h2.Host().ID().String()) || !strings.Contains(st.Err.Error(), "behind") {
		t.Errorf("H1's report %v does not name H2 as behind", st.Err)
	}
	if now := headOf(t, h1, annU); now.Seq != held.Seq || now.Hash != held.Hash {
		t.Errorf("H1's log moved from %d to %d", held.Seq, now.Seq)
	}
}

// BenchmarkMirrorLag measures how far a mirror trails the sequencer under
// a steady 500 appends/s (one directory each, appended as the node does,
// with its nudge): the time from each append's return on the sequencer to
// the mirror's watch showing it. Run with -benchtime 2000x (4 s).
func BenchmarkMirrorLag(b *testing.B) {
	k := netNode(b, "", nil)
	b.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	h1, h2 := keyNode(b, kaddr), keyNode(b, kaddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, annKeys := dialWithKeys(b, h1, annU)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		b.Fatal(err)
	}
	head, err := h1.dir.Head(ctx, annU)
	if err != nil {
		b.Fatal(err)
	}
	base := head.Seq
	keyAt := h1.keyLogSize()
	for deadline := time.Now().Add(time.Minute); ; {
		if h, err := h2.dir.Head(ctx, annU); err == nil && h.Seq == base {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the mirror did not catch up within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	events, err := h2.dir.Watch(ctx, annU, "ann@example.com/", base+1)
	if err != nil {
		b.Fatal(err)
	}
	appended := make([]time.Time, b.N)
	seen := make([]time.Time, b.N)
	all := make(chan struct{})
	go func() {
		got := 0
		for ev := range events {
			if ev.Entry == nil {
				continue
			}
			if i := ev.Entry.Sequence - base - 1; i >= 0 && i < int64(b.N) && seen[i].IsZero() {
				seen[i] = time.Now()
				if got++; got == b.N {
					close(all)
					return
				}
			}
		}
	}()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	for i := range b.N {
		<-tick.C
		e := &dirlog.Entry{Seq: head.Seq + 1, Prev: head.Hash, Time: spindle.Now(), Op: dirlog.OpMkdir, KeyAt: keyAt,
			Entry: spindle.DirEntry{Name: ann(fmt.Sprintf("d%d", i)), Attr: spindle.AttrDirectory, Writer: annU, Sequence: head.Seq + 1}}
		e.Entry.Time = e.Time
		if err := e.Sign(annKeys); err != nil {
			b.Fatal(err)
		}
		if _, err := h1.dir.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		appended[i] = time.Now()
		h1.mirrors.nudge(annU)
		head = &dirlog.Head{Seq: e.Seq, Hash: e.Hash()}
	}
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatal("the mirror did not show every entry within 2 minutes")
	}
	b.StopTimer()
	lags := make([]time.Duration, b.N)
	for i := range lags {
		lags[i] = seen[i].Sub(appended[i])
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[len(lags)/2].Microseconds())/1000, "ms-p50")
	b.ReportMetric(float64(lags[len(lags)*99/100].Microseconds())/1000, "ms-p99")
	b.ReportMetric(float64(lags[len(lags)-1].Microseconds())/1000, "ms-max")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
}
