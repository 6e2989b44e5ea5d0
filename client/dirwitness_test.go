package client

import (
	"crypto/rand"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// addDirHost lists one more dir host, a peer that exists nowhere, in ann's
// key record, so that a DirQuorum of 1 is a valid policy.
func (w *lieWorld) addDirHost(t *testing.T) {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	u, err := w.ann.lookupUser(w.ctx, w.ann.user, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.ann.SetDirHosts(w.ctx, append(u.DirHosts, spindle.PeerAddr(id.String()))); err != nil {
		t.Fatal(err)
	}
}

// freshReader returns a client of the user whose keys are keys that has
// never seen any tree.
func freshReader(t *testing.T, w *lieWorld, keys *pack.Keys) *Client {
	t.Helper()
	c, err := Dial(w.ctx, Config{Keys: keys, Node: w.n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLieHeadOverOlderMapWitnessed (issue 28): ann revokes carol, and her
// dir host answers a reader with the answer it gave before, under the
// genuine next head re-signed over the older map root. A fresh reader
// (one that never saw ann's tree, so it has no map step to check) takes
// the lie while ann's key record asks for no witness, and refuses it with
// an Integrity error once her record asks for one cosigning dir host: the
// liar cannot make another host that replayed the log vouch for that map.
func TestLieHeadOverOlderMapWitnessed(t *testing.T) {
	w := newLieWorld(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	keys, _, err := pack.Generate("carol@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := freshReader(t, w, keys).Signup(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.addDirHost(t)
	w.put(t, "@/docs/Access", "read: carol@example.com\n*: ann@example.com\n")
	const name = "ann@example.com/docs/a.txt"

	// What the host answered carol while she could read.
	var told []byte
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && told == nil {
			told, _ = wire.Encode(resp)
		}
	})
	if _, err := freshReader(t, w, keys).Lookup(w.ctx, name, false); err != nil || told == nil {
		t.Fatalf("honest lookup by carol: %v", err)
	}
	w.l.tell(nil)
	w.put(t, "@/docs/Access", "*: ann@example.com\n") // Carol revoked.
	revoked := *w.ann.svc.heads.floor(w.ann.user)
	if _, err := freshReader(t, w, keys).Lookup(w.ctx, name, false); err == nil {
		t.Fatal("honest lookup by carol after her revocation succeeded")
	}

	lie := func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method != wire.DirLookup {
			return
		}
		*resp = wiretest.Response{}
		if err := wire.Decode(told, resp); err != nil {
			t.Error(err)
			return
		}
		h := resp.Head
		old := h.Root
		*h = revoked
		h.Root = old // The genuine next entry, over the older map.
		if err := h.Sign(own); err != nil {
			t.Error(err)
		}
	}
	w.l.tell(lie)
	if _, err := freshReader(t, w, keys).Lookup(w.ctx, name, false); err != nil {
		t.Fatalf("with no witness asked for, the fresh reader refused the lie: %v", err)
	}

	w.l.tell(nil)
	if err := w.ann.SetDirQuorum(w.ctx, 1); err != nil {
		t.Fatal(err)
	}
	w.l.tell(lie)
	defer w.l.tell(nil)
	_, err = freshReader(t, w, keys).Lookup(w.ctx, name, false)
	wantIntegrity(t, err, "lookup under a one-witness policy")
	if !strings.Contains(err.Error(), "cosignatures") {
		t.Errorf("error does not say the head lacks cosignatures: %v", err)
	}
}
