package client

import (
	"bytes"
	"context"
	"maps"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// Each spin command is a new client, so every request one makes to its
// node is paid for by every command. These tests count them.

// countRequests puts a handler in front of n's client protocol that counts
// the requests of each method, and returns the counts so far.
func countRequests(t *testing.T, n *node.Node) func() map[string]int {
	var mu sync.Mutex
	counts := map[string]int{}
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wiretest.Request
		if err := wire.Decode(data, &req); err == nil {
			mu.Lock()
			counts[req.Method]++
			mu.Unlock()
		}
		return n.ServeClient(ctx, remote, data)
	})
	return func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}

// newClients returns a function that dials n as a new client of one user
// each time, with one key log, as each spin command of that user does.
// The user is signed up.
func newClients(t *testing.T, n *node.Node, user spindle.UserName) func() *Client {
	t.Helper()
	keyLog := filepath.Join(t.TempDir(), "keylog")
	keys, _, err := pack.Generate(user)
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *Client {
		t.Helper()
		c, err := Dial(context.Background(), Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: keyLog, RequireKeyLog: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	c, err := Dial(context.Background(), Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: keyLog})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Signup(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dial
}

// A client with a key log learns the node's verifier key from its answer
// to the sign-in, and asks no more: the key is still checked (see
// TestKeyLogRejectsAnotherCluster).
func TestDialSignsInAndChecksClusterInOneRequest(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	dial := newClients(t, n, "ann@example.com")
	counts := countRequests(t, n)
	dial()
	got := counts()
	if got[wire.Auth] != 1 || got[wire.KeyVerifier] != 0 || len(got) != 1 {
		t.Errorf("a dial made requests %v, want one %s and nothing else", got, wire.Auth)
	}
}

// A new client that puts a file only its owner reads wraps the file key
// with the keys it holds: it looks up no key record for that, as a new
// spin process would otherwise for every small put. It looks up one: its
// own, whose dir hosts are the peers that may sign the heads of its tree
// (see dirproofs.go). The file reads back.
func TestPutOwnFileLooksUpNoKey(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	dial := newClients(t, n, "ann@example.com")
	counts := countRequests(t, n)
	lookups := func() int {
		c := counts()
		return c[wire.KeyLookup] + c[wire.KeyProof] + c[wire.KeyProofs]
	}
	c := dial()
	if _, err := c.Put(ctx, "@/f", bytes.NewReader([]byte("mine")), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	if k := lookups(); k != 1 {
		t.Errorf("a put of a file only its owner reads looked up %d key records, want 1 (its own dir hosts)", k)
	}
	mustRead(t, dial(), ann("f"), []byte("mine"))
	if lookups() == 0 {
		t.Error("the read looked up no key record: the counting handler is not in the way")
	}
}

// An older node sends no verifier key with its answer to the sign-in; the
// client then asks for it.
func TestDialAsksOlderNodeForVerifier(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	dial := newClients(t, n, "ann@example.com")
	asked := 0
	var mu sync.Mutex
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wiretest.Request
		if err := wire.Decode(data, &req); err != nil || req.Method != wire.Auth {
			if req.Method == wire.KeyVerifier {
				mu.Lock()
				asked++
				mu.Unlock()
			}
			return n.ServeClient(ctx, remote, data)
		}
		out, err := n.ServeClient(ctx, remote, data)
		var resp wiretest.Response
		if err != nil || wire.Decode(out, &resp) != nil {
			return out, err
		}
		resp.Data = nil
		return wire.Encode(&resp)
	})
	dial()
	mu.Lock()
	defer mu.Unlock()
	if asked != 1 {
		t.Errorf("the client asked an older node %d times for its verifier key, want once", asked)
	}
}

// A new client signs its first change for the place after the head its
// user's last client saw, without asking for the head; when another
// writer has moved the head since, the change still goes in.
func TestNewClientRemembersOwnHead(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	heads := filepath.Join(t.TempDir(), "dirheads")
	keyLog := filepath.Join(t.TempDir(), "keylog")
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(heads string) *Client {
		t.Helper()
		c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: keyLog, DirHeads: heads})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := dial(heads)
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	put := func(c *Client, name spindle.PathName) {
		t.Helper()
		if _, err := c.Put(ctx, name, bytes.NewReader([]byte(path.Base(string(name)))), spindle.EEPack, nil); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	put(c, "@/a")
	counts := countRequests(t, n)
	put(dial(heads), "@/b")
	if got := counts()[wire.DirHead]; got != 0 {
		t.Errorf("a new client asked for its own tree's head %d times, want 0", got)
	}
	put(dial(""), "@/c") // Another writer: the head in the file is behind.
	put(dial(heads), "@/d")
	if got := counts()[wire.DirHead]; got != 2 {
		t.Errorf("asked for the head %d times after the head moved, want 2 (once by the other writer, once after the conflict)", got)
	}
	r := dial("")
	defer r.Close()
	for _, f := range []string{"a", "b", "c", "d"} {
		mustRead(t, r, ann(f), []byte(f))
	}
}
