package node

import (
	"context"
	"errors"
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

// A replayer is node A of a forwarding world turned against the clients
// it carries requests for: it records the dir host's answers to the
// requests it carries and, once told to, answers a request with a
// recorded answer instead of carrying it, as it likes (see lie).
type replayer struct {
	n *Node
	// own signs as the replayer's node, to re-sign a replayed answer.
	own *p2p.PeerSigner

	mu       sync.Mutex
	record   bool                        // Recording answers to carried requests.
	rec      map[string][]*wire.Response // The answers recorded, by method.
	lie      func(req *wire.Request) *wire.Response
	replayed int // Answers replayed.
}

// newReplayer re-registers n's client protocol handler with a replayer's.
func newReplayer(t *testing.T, n *Node) *replayer {
	t.Helper()
	own, err := p2p.NewPeerSigner(n.Host())
	if err != nil {
		t.Fatal(err)
	}
	r := &replayer{n: n, own: own, rec: make(map[string][]*wire.Response)}
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wire.Request
		if wire.Decode(data, &req) != nil || req.To == "" || req.To == n.Host().ID().String() {
			return n.ServeClient(ctx, remote, data)
		}
		r.mu.Lock()
		lie := r.lie
		r.mu.Unlock()
		if lie != nil {
			if resp := lie(&req); resp != nil {
				r.mu.Lock()
				r.replayed++
				r.mu.Unlock()
				return wire.Encode(resp)
			}
		}
		out, err := n.ServeClient(ctx, remote, data)
		var resp wire.Response
		if err == nil && wire.Decode(out, &resp) == nil {
			r.mu.Lock()
			if r.record {
				r.rec[req.Method] = append(r.rec[req.Method], &resp)
			}
			r.mu.Unlock()
		}
		return out, err
	})
	return r
}

// recorded returns the last answer to method recorded, or nil.
func (r *replayer) recorded(method string) *wire.Response {
	r.mu.Lock()
	defer r.mu.Unlock()
	rs := r.rec[method]
	if len(rs) == 0 {
		return nil
	}
	c := *rs[len(rs)-1]
	return &c
}

// A relay that recorded the dir host's honest answers replays them to a
// newer request, after the owner removed a reader: ann's Access file
// on B names mallory as a reader of shared/; carol, whose node A carries
// her requests to B, puts a file there, and A records B's answers; ann
// removes mallory; carol puts again, from a client that has not seen the
// newer head, and A answers her WhichAccess with what it recorded. Her
// put must fail with an Integrity error before any file key is wrapped
// for mallory: the answer is not B's answer to this request. So too an
// answer recorded for another method (a lookup of the Access file, whose
// body reads as a WhichAccess answer), one A re-signs with its own peer
// key, and one whose signature A strips.
func TestRelayReplaysAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx := context.Background()
	_, carolKeys := dialWithKeys(t, w.a, "carol@example.com")
	mallory, _ := dialWithKeys(t, w.z, "mallory@evil.example")
	ann := fwdDial(t, w.b, w.annKeys)
	if _, err := ann.MakeDirectory(ctx, "ann@example.com/shared"); err != nil {
		t.Fatal(err)
	}
	const (
		withMallory = "*: ann@example.com, carol@example.com\nread: mallory@evil.example\n"
		without     = "*: ann@example.com, carol@example.com\n"
	)
	access := func(text string) {
		t.Helper()
		if _, err := ann.Put(ctx, "ann@example.com/shared/Access", strings.NewReader(text), spindle.PlainPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	mk, err := spindle.KeyHash(malloryKeyOf(t, mallory))
	if err != nil {
		t.Fatal(err)
	}
	wrappedForMallory := func(name spindle.PathName) bool {
		t.Helper()
		e, err := ann.Lookup(ctx, name, false)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		hs, err := pack.WrappedKeys(e)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h == mk {
				return true
			}
		}
		return false
	}
	r := newReplayer(t, w.a)
	bid := w.b.Host().ID()

	for _, tc := range []struct {
		name string
		// answer returns what A answers carol's second WhichAccess with.
		answer func(t *testing.T, req *wire.Request) *wire.Response
	}{
		{"replays the WhichAccess answer", func(t *testing.T, _ *wire.Request) *wire.Response {
			return r.recorded(wire.DirWhich)
		}},
		{"replays the answer to another method", func(t *testing.T, _ *wire.Request) *wire.Response {
			return r.recorded(wire.DirLookup)
		}},
		{"re-signs the answer with its own key", func(t *testing.T, req *wire.Request) *wire.Response {
			resp := r.recorded(wire.DirWhich)
			sig, err := r.own.Sign(wire.AnswerDigest(req.Auth, resp))
			if err != nil {
				t.Error(err)
			}
			resp.Sig, resp.Key = sig, r.own.HostKey()
			return resp
		}},
		{"strips the signature", func(t *testing.T, _ *wire.Request) *wire.Response {
			resp := r.recorded(wire.DirWhich)
			resp.Sig, resp.Key = nil, nil
			return resp
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := spindle.PathName("ann@example.com/shared/" + strings.ReplaceAll(tc.name, " ", "-"))
			access(withMallory)

			// Carol's first put, and her lookup of the Access file,
			// while mallory may read: A records B's answers.
			r.mu.Lock()
			r.record, r.rec = true, make(map[string][]*wire.Response)
			r.mu.Unlock()
			carol := fwdDialPlain(t, w.a, carolKeys)
			if _, err := carol.Put(ctx, name, strings.NewReader("for the readers of shared"), spindle.EEPack, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := carol.Lookup(ctx, "ann@example.com/shared/Access", false); err != nil {
				t.Fatal(err)
			}
			r.mu.Lock()
			r.record = false
			r.mu.Unlock()
			if r.recorded(wire.DirWhich) == nil || r.recorded(wire.DirLookup) == nil {
				t.Fatalf("A recorded no WhichAccess or lookup answer of B's (%d methods)", len(r.rec))
			}
			if !wrappedForMallory(name) {
				t.Fatalf("%s, put while mallory could read, has no key for her: the test shows nothing", name)
			}

			access(without)
			head, err := w.b.dir.Head(ctx, "ann@example.com")
			if err != nil {
				t.Fatal(err)
			}

			// Carol again, from a client that has not seen ann's newer
			// head (another machine of hers), puts a new version of the
			// file; A lies.
			r.mu.Lock()
			before := r.replayed
			r.lie = func(req *wire.Request) *wire.Response {
				if req.Method != wire.DirWhich || req.To != bid.String() {
					return nil
				}
				return tc.answer(t, req)
			}
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				r.lie = nil
				r.mu.Unlock()
			}()
			carol2 := fwdDialPlain(t, w.a, carolKeys)
			_, err = carol2.Put(ctx, name, strings.NewReader("not for mallory"), spindle.EEPack, nil)
			r.mu.Lock()
			replayed := r.replayed - before
			r.lie = nil
			r.mu.Unlock()
			if replayed == 0 {
				t.Fatal("A replayed nothing: carol's client did not ask for WhichAccess")
			}
			if !errors.Is(err, spindle.Integrity) {
				t.Errorf("put with a replayed answer: %v, want an Integrity error", err)
			} else if !strings.Contains(err.Error(), bid.String()) {
				t.Errorf("put with a replayed answer: %v, want the error to name dir host %s", err, bid)
			}
			t.Logf("put with the relay lying: %v", err)

			// Nothing was appended, and no version of the file has a key
			// for mallory but the one put while she could read.
			now, err := w.b.dir.Head(ctx, "ann@example.com")
			if err != nil {
				t.Fatal(err)
			}
			if now.Seq != head.Seq {
				t.Errorf("ann's log moved from %d to %d under the lie", head.Seq, now.Seq)
				if wrappedForMallory(name) {
					t.Errorf("%s: file key wrapped for mallory, whom ann had removed", name)
				}
			}
			// With A honest again, carol's put goes through, for the
			// readers ann's Access file names now.
			if _, err := carol2.Put(ctx, name, strings.NewReader("not for mallory"), spindle.EEPack, nil); err != nil {
				t.Fatalf("put with A honest: %v", err)
			}
			if wrappedForMallory(name) {
				t.Errorf("%s put with A honest has a key for mallory", name)
			}
		})
	}
}

// malloryKeyOf returns the public key of c's user, as registered.
func malloryKeyOf(t *testing.T, c *client.Client) spindle.PublicKey {
	t.Helper()
	u, err := c.LookupUser(context.Background(), c.User())
	if err != nil {
		t.Fatal(err)
	}
	return u.PublicKey
}

// A lookup of ann's file, whose tree is on B, by a client of node A,
// which carries it: the round trip through A to B and back, with B's
// signature of the answer and the client's check of it (see
// client.BenchmarkAnswerSignature for those alone); carried in plain,
// and through a tunnel (tunnel.go), whose handshake the first lookup
// pays and the others reuse.
func BenchmarkForwardedLookup(b *testing.B) {
	k := netNode(b, "", nil)
	b.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	host, via := keyNode(b, kaddr), keyNode(b, kaddr)
	waitFor(b, 30*time.Second, func() string { return "routing tables fill" },
		func() bool { return via.DHT().RoutingTable().Size() >= 2 && host.DHT().RoutingTable().Size() >= 2 })
	_, keys := dialWithKeys(b, host, "ann@example.com")
	ctx := context.Background()
	const name = "ann@example.com/f"
	if _, err := fwdDial(b, via, keys).Put(ctx, name, strings.NewReader("x"), spindle.EEPack, nil); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		plain bool
	}{{"plain", true}, {"tunnel", false}} {
		c := fwdDialWith(b, via, keys, bc.plain)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := c.Lookup(ctx, name, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
