package node

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/client"
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
	return c
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
