package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A client on the node's machine works through the node's socket exactly
// as through TCP, and the two see the same tree; a restart replaces the
// socket.
func TestClientOverSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "spnode")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	home := filepath.Join(dir, "home")
	n := startNode(t, home)
	addr := n.SocketAddr()
	if !p2p.IsLocalAddr(addr) {
		n.Close()
		t.Fatalf("node's socket address = %q, want a /unix/ address", addr)
	}
	ctx := context.Background()
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func(a spindle.PeerAddr) *Client {
		t.Helper()
		c, err := Dial(ctx, Config{Keys: keys, Node: a, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	local := dial(addr)
	if err := local.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range local.h.Network().Conns() {
		if got := c.ConnState().Security; got != p2p.LocalSecurityID {
			t.Errorf("client's connection uses %q, want %q", got, p2p.LocalSecurityID)
		}
	}
	data := make([]byte, 2<<20+17)
	rand.Read(data)
	if _, err := local.Put(ctx, "@/f", bytes.NewReader(data), 0, nil); err != nil {
		t.Fatal(err)
	}
	readBack := func(c *Client) { t.Helper(); mustRead(t, c, "ann@example.com/f", data) }
	readBack(local)
	remote := dial(n.DialAddr())
	readBack(remote)
	remote.Close()
	local.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	n = startNode(t, home)
	defer n.Close()
	if n.SocketAddr() != addr {
		t.Errorf("socket address changed across a restart: %q, then %q", addr, n.SocketAddr())
	}
	again := dial(addr)
	defer again.Close()
	readBack(again)
}
