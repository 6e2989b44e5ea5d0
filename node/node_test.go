package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func startNode(t testing.TB, home string) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// dialAs signs user up on n with new keys and returns the user's client.
func dialAs(t testing.TB, n *Node, user spindle.UserName) *client.Client {
	t.Helper()
	c, _ := dialWithKeys(t, n, user)
	return c
}

// dialWithKeys is dialAs, returning the user's keys too.
func dialWithKeys(t testing.TB, n *Node, user spindle.UserName) (*client.Client, *pack.Keys) {
	t.Helper()
	keys, _, err := pack.Generate(user)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	return c, keys
}

// A rawClient speaks the client protocol to a node with none of the
// client's checks, as a hostile or broken client would: it signs in with
// a user's keys and sends whatever requests a test makes.
type rawClient struct {
	t    testing.TB
	h    host.Host
	peer peer.ID
}

// dialRaw connects a rawClient to n and signs it in as keys' user.
func dialRaw(t testing.TB, n *Node, keys *pack.Keys) *rawClient {
	t.Helper()
	ctx := context.Background()
	h, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	pid, err := p2p.Connect(ctx, h, n.DialAddr())
	if err != nil {
		t.Fatal(err)
	}
	r := &rawClient{t: t, h: h, peer: pid}
	a := &wire.AuthMsg{User: keys.UserName(), ClientPeer: h.ID().String(), NodePeer: pid.String(), Time: spindle.Now()}
	if a.Sig, err = keys.Sign(a.Digest()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.call(&wire.Request{Method: wire.Auth, Auth: a}); err != nil {
		t.Fatal(err)
	}
	return r
}

// call sends req and returns the response, with the error it carries.
func (r *rawClient) call(req *wire.Request) (*wire.Response, error) {
	r.t.Helper()
	b, err := wire.Encode(req)
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := p2p.Call(context.Background(), r.h, r.peer, wire.ClientProtocol, b, wire.MaxMessage)
	if err != nil {
		return nil, err
	}
	return wire.DecodeResponse(out)
}

func TestNoSocket(t *testing.T) {
	ctx := context.Background()
	n, err := New(ctx, Config{Home: t.TempDir(), NoSocket: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if a := n.SocketAddr(); a != "" {
		t.Errorf("SocketAddr = %q with NoSocket", a)
	}
}

// mustRead fails the test unless c reads want from name.
func mustRead(t *testing.T, c *client.Client, name spindle.PathName, want []byte) {
	t.Helper()
	f, err := c.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %s: %v, equal=%v", name, err, bytes.Equal(got, want))
	}
}

func ann(p string) spindle.PathName { return spindle.PathName("ann@example.com/" + p) }

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
