package node

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// A relay that records every byte it carries for clients to other dir
// hosts (Node.relayTap).
type recordingRelay struct {
	mu   sync.Mutex
	seen bytes.Buffer
}

func record(n *Node) *recordingRelay {
	r := &recordingRelay{}
	tap := func(b []byte) {
		r.mu.Lock()
		r.seen.Write(b)
		r.mu.Unlock()
	}
	n.relayTap.Store(&tap)
	return r
}

// take returns what the relay recorded since the last take.
func (r *recordingRelay) take() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := bytes.Clone(r.seen.Bytes())
	r.seen.Reset()
	return b
}

// Relays see only where, not what: ann, whose tree is on B, writes,
// reads and lists it through node A, which records every byte it
// carries for her. Through a tunnel A sees no file name, no writer and
// no Access text; carried in plain (as before tunnels, and for a client
// that asks for it) it sees them all.
func TestRelaySeesOnlyWhere(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay := record(w.a)
	const accessText = "read: bob@example.com\n*: ann@example.com\n"
	for _, tc := range []struct {
		name  string
		plain bool
	}{{"tunnel", false}, {"plain", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ann := fwdDialWith(t, w.a, w.annKeys, tc.plain)
			relay.take()
			dir := spindle.PathName("ann@example.com/plans-" + tc.name)
			file := dir + "/secret-plans.txt"
			if _, err := ann.MakeDirectory(ctx, dir); err != nil {
				t.Fatal(err)
			}
			if _, err := ann.Put(ctx, dir+"/Access", strings.NewReader(accessText), spindle.PlainPack, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := ann.Put(ctx, file, strings.NewReader("meet at dawn"), spindle.EEPack, nil); err != nil {
				t.Fatal(err)
			}
			mustRead(t, ann, file, []byte("meet at dawn"))
			es, err := ann.Glob(ctx, string(dir)+"/*")
			if err != nil || len(es) != 2 {
				t.Fatalf("listing %s through A: %d entries, %v", dir, len(es), err)
			}
			if _, err := w.b.dir.Lookup(ctx, "ann@example.com", file); err != nil {
				t.Fatalf("the file is not in ann's log on B: %v", err)
			}
			seen := relay.take()
			if len(seen) < 1000 {
				t.Fatalf("A carried only %d bytes for ann", len(seen))
			}
			secrets := []string{"secret-plans", "plans-" + tc.name, "ann@example.com", accessText, "bob@example.com"}
			for _, s := range secrets {
				found := bytes.Contains(seen, []byte(s))
				if !tc.plain && found {
					t.Errorf("through a tunnel, the relay saw %q in the %d bytes it carried", s, len(seen))
				}
				if tc.plain && !found {
					t.Errorf("carried in plain, the relay did not see %q in the %d bytes it carried: the recording misses what it should catch", s, len(seen))
				}
			}
			t.Logf("%s: the relay carried %d bytes", tc.name, len(seen))
		})
	}
}

// A relay cannot move a client to plain text: a node that carries no
// tunnels (older, or saying so) fails the client's requests for other
// dir hosts with ErrNoTunnels, and carries none of them in plain.
func TestRelayWithoutTunnelsRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay := record(w.a)
	for _, h := range w.a.hosts() {
		h.RemoveStreamHandler(p2p.TunnelProtocol)
	}
	ann := fwdDial(t, w.a, w.annKeys)
	_, err := ann.Put(ctx, "ann@example.com/secret-plans.txt", strings.NewReader("meet at dawn"), spindle.EEPack, nil)
	if !errors.Is(err, p2p.ErrNoTunnels) {
		t.Fatalf("put through a node without tunnels: %v, want ErrNoTunnels", err)
	}
	t.Logf("refused: %v", err)
	if seen := relay.take(); len(seen) > 0 {
		t.Errorf("the node carried %d bytes in plain", len(seen))
	}
	if _, err := w.b.dir.Lookup(ctx, "ann@example.com", "ann@example.com/secret-plans.txt"); err == nil {
		t.Error("the put reached B")
	}

	// A dir host older than tunnels: the error says so, and nothing goes
	// in plain.
	for _, h := range w.a.hosts() {
		h.SetStreamHandler(p2p.TunnelProtocol, w.a.serveTunnel)
	}
	w.b.Host().RemoveStreamHandler(p2p.TunnelEndProtocol)
	waitFor(t, 10*time.Second, func() string { return "A learns that B dropped the protocol" }, func() bool {
		protos, err := w.a.Host().Peerstore().SupportsProtocols(w.b.Host().ID(), p2p.TunnelEndProtocol)
		return err == nil && len(protos) == 0
	})
	_, err = ann.Put(ctx, "ann@example.com/secret-plans.txt", strings.NewReader("meet at dawn"), spindle.EEPack, nil)
	if err == nil || !strings.Contains(err.Error(), "predates") {
		t.Fatalf("put to a dir host without tunnels: %v, want an error that says it predates them", err)
	}
	t.Logf("refused: %v", err)
	if seen := relay.take(); len(seen) > 0 {
		t.Errorf("the node carried %d bytes", len(seen))
	}
}

// A node carries tunnels only for clients signed in to it, a bounded
// number each; the host answers in one only requests signed for it by
// the client the handshake proved.
func TestTunnelRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bid := w.b.Host().ID()

	// A stranger, not signed in to A.
	stranger := w.z.Host()
	if err := stranger.Connect(ctx, w.a.Host().Peerstore().PeerInfo(w.a.Host().ID())); err != nil {
		t.Fatal(err)
	}
	var refused *p2p.RefusedError
	if _, err := p2p.OpenTunnel(ctx, stranger, w.a.Host().ID(), bid, wire.MaxMessage); !errors.As(err, &refused) || !errors.Is(refused.Err, spindle.Permission) {
		t.Fatalf("a tunnel for a peer not signed in: %v, want a refusal with Permission", err)
	}

	// A signed-in client: up to maxTunnelsPerPeer at once.
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ann, err := client.Dial(ctx, client.Config{Host: h, Keys: w.annKeys, Node: w.a.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()
	if _, err := ann.MakeDirectory(ctx, "ann@example.com/d"); err != nil {
		t.Fatal(err)
	}
	var open []*p2p.Tunnel
	defer func() {
		for _, tn := range open {
			tn.Close()
		}
	}()
	for i := 0; ; i++ {
		tn, err := p2p.OpenTunnel(ctx, h, w.a.Host().ID(), bid, wire.MaxMessage)
		if err != nil {
			// The client's own may hold some.
			if i < maxTunnelsPerPeer-maxIdleTunnelsOfClient || !errors.Is(err, spindle.Transient) {
				t.Fatalf("tunnel %d: %v; want Transient after about %d", i, err, maxTunnelsPerPeer)
			}
			break
		}
		if i >= maxTunnelsPerPeer {
			t.Fatalf("A carried %d tunnels for one client", i+1)
		}
		open = append(open, tn)
	}

	// In a tunnel, B answers only directory requests signed for it, for
	// the client peer that opened the tunnel.
	tn := open[0]
	call := func(req any) error {
		t.Helper()
		data, err := wire.Encode(req)
		if err != nil {
			t.Fatal(err)
		}
		out, err := tn.Call(ctx, data)
		if err != nil {
			return err
		}
		_, err = wire.DecodeResponse(out)
		return err
	}
	lookup := wiretest.Request{Method: wire.DirLookup, Name: "ann@example.com/d"}
	if err := call(&wiretest.Request{Method: wire.KeyLookup, User: "ann@example.com"}); !errors.Is(err, spindle.Permission) {
		t.Errorf("a key lookup in a tunnel: %v, want Permission", err)
	}
	keyLookup := wiretest.Request{Method: wire.KeyLookup, User: "ann@example.com"}
	if err := call(signedReqFrom(t, w.annKeys, keyLookup, bid, h.ID().String())); !errors.Is(err, spindle.Permission) {
		t.Errorf("a signed key lookup in a tunnel: %v, want Permission", err)
	}
	if err := call(&lookup); !errors.Is(err, spindle.Permission) {
		t.Errorf("an unsigned lookup in a tunnel: %v, want Permission", err)
	}
	if err := call(signedReqFrom(t, w.annKeys, lookup, bid, w.z.Host().ID().String())); !errors.Is(err, spindle.Permission) {
		t.Errorf("a lookup signed for another client peer, in a tunnel: %v, want Permission", err)
	}
	if err := call(signedReqFrom(t, w.annKeys, lookup, bid, h.ID().String())); err != nil {
		t.Errorf("a lookup signed for the tunnel's client: %v", err)
	}
}

// maxIdleTunnelsOfClient is client.maxIdleTunnels.
const maxIdleTunnelsOfClient = 2

// Many reads at once through one relay: the client opens no more tunnels
// than the relay carries for it, and every read is answered.
func TestTunnelManyReadsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ann := fwdDial(t, w.a, w.annKeys)
	const name = "ann@example.com/f"
	if _, err := ann.Put(ctx, name, strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3*maxTunnelsPerPeer)
	for range cap(errs) {
		wg.Go(func() {
			_, err := ann.Lookup(ctx, name, false)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	w.a.tunnels.mu.Lock()
	n := w.a.tunnels.all
	w.a.tunnels.mu.Unlock()
	if n > maxTunnelsPerPeer {
		t.Errorf("A carries %d tunnels for one client", n)
	}
}

// An error the dir host sends in a tunnel without signing an answer
// stands for no answer: a host cannot say that a file does not exist
// without the proof a signed answer carries.
func TestTunnelUnsignedErrorIsNoAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ann := fwdDial(t, w.a, w.annKeys)
	const name = "ann@example.com/f"
	if _, err := ann.Put(ctx, name, strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	b := w.b.Host()
	b.SetStreamHandler(p2p.TunnelEndProtocol, func(s network.Stream) {
		p2p.ServeTunnelEnd(ctx, b, s, wire.MaxMessage, time.Minute, func(context.Context, peer.ID, []byte) ([]byte, error) {
			return nil, spindle.E(spindle.NotExist, spindle.PathName(name))
		})
	})
	fresh := fwdDial(t, w.a, w.annKeys)
	_, err := fresh.Lookup(ctx, name, false)
	if err == nil || errors.Is(err, spindle.NotExist) {
		t.Fatalf("lookup answered with an unsigned NotExist: %v; want an error that is not NotExist", err)
	}
	t.Logf("lookup: %v", err)
}

// A relay that carries as many tunnels for a client as it will refuses
// another for now; a client that meets that (the relay still counts
// tunnels the client closed, until it sees them end) waits and tries
// again, and its read is answered once the relay has room.
func TestTunnelBusyRelayWaitedFor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "ann@example.com/f"
	if _, err := fwdDial(t, w.a, w.annKeys).Put(ctx, name, strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	sessions := func() map[peer.ID]bool {
		w.a.mu.Lock()
		defer w.a.mu.Unlock()
		out := make(map[peer.ID]bool)
		for p := range w.a.sessions {
			out[p] = true
		}
		return out
	}
	before := sessions()
	reader := fwdDial(t, w.a, w.annKeys) // No tunnel yet.
	var pid peer.ID
	for p := range sessions() {
		if !before[p] {
			pid = p
		}
	}
	if pid == "" {
		t.Fatal("the new client has no session at A")
	}
	for range maxTunnelsPerPeer {
		if !w.a.tunnels.take(pid, maxTunnelsPerPeer) {
			t.Fatal("A refused a tunnel below its cap")
		}
	}
	time.AfterFunc(300*time.Millisecond, func() { w.a.tunnels.done(pid) })
	if _, err := reader.Lookup(ctx, name, false); err != nil {
		t.Fatalf("a read while A was busy for a moment: %v", err)
	}
}
