package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/pack"
)

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func ann(p string) spindle.PathName { return spindle.PathName("ann@example.com/" + p) }

func startNodeB(b *testing.B) *node.Node { return startNode(b, b.TempDir()) }

func dialAsB(b *testing.B, n *node.Node, u spindle.UserName) *Client { return dialAs(b, n, u) }

func startNode(t testing.TB, home string) *node.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{Home: home, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func dialAs(t testing.TB, n *node.Node, user spindle.UserName) *Client {
	t.Helper()
	keys, _, err := pack.Generate(user)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// mustRead fails the test unless c reads want from name.
func mustRead(t *testing.T, c *Client, name spindle.PathName, want []byte) {
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

func TestPutGetShare(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	ann := dialAs(t, n, "ann@example.com")
	bob := dialAs(t, n, "bob@example.com")

	data := make([]byte, 3<<20+5)
	rand.Read(data)
	if _, err := ann.Put(ctx, "@/big", bytes.NewReader(data), 0, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, ann, "ann@example.com/big", data)
	if _, err := bob.Open(ctx, "ann@example.com/big"); !errors.Is(err, spindle.Private) && !errors.Is(err, spindle.Permission) {
		t.Fatalf("bob read before share: %v", err)
	}
	if _, err := ann.Put(ctx, "@/Access", bytes.NewReader([]byte("read,list: bob@example.com\n")), 0, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, bob, "ann@example.com/big", data) // After the share.
}

// Opening a directory to all re-shares the ee files already in it without
// dropping anyone's key: the owner still reads a file another user wrote.
func TestShareWithAllKeepsOwnerKey(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	ann := dialAs(t, n, "ann@example.com")
	bob := dialAs(t, n, "bob@example.com")
	dialAs(t, n, "carl@example.org")
	put := func(c *Client, name, text string) {
		t.Helper()
		if _, err := c.Put(ctx, spindle.PathName(name), bytes.NewReader([]byte(text)), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(ann, "@/Access", "*: ann@example.com, bob@example.com\nread: carl@example.org\n")
	put(bob, "ann@example.com/bobs", "written by bob")
	// carl's wrap is now extra, so the file is re-wrapped.
	put(ann, "@/Access", "*: ann@example.com\nread, list: all\n")
	mustRead(t, ann, "@/bobs", []byte("written by bob")) // The owner, after opening the directory to all.
}

// New keys made for a registered name (spin init -force without
// -recover) cannot sign in, and Dial says why: the key is not the
// registered one, naming both, rather than only that a signature failed.
func TestDialWithUnregisteredKey(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	registered := dialAs(t, n, "ann@example.com")
	fresh, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Dial(ctx, Config{Keys: fresh, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	var km *KeyMismatchError
	if !errors.Is(err, spindle.Permission) || !errors.As(err, &km) {
		t.Fatalf("Dial with new keys for a registered name: %v, want Permission with a KeyMismatchError", err)
	}
	if km.User != "ann@example.com" || km.Registered != registered.keys.PublicKey() || km.Have != fresh.PublicKey() {
		t.Errorf("KeyMismatchError = %+v, want ann's registered key and the new one", km)
	}

	// The registered keys still sign in.
	c, err := Dial(ctx, Config{Keys: registered.keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatalf("Dial with the registered keys: %v", err)
	}
	c.Close()
}
