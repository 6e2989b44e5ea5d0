package client

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A node ends a user's sessions when the user's key record changes. A
// client whose session ended that way, by another of the user's clients
// naming dir hosts, signs in again when the node refuses its blocks, and
// its put goes through.
func TestPutAfterRecordChangeSignsInAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *Client {
		c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	a := dial()
	if err := a.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "ann@example.com/before", strings.NewReader("before"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	b := dial()
	if err := b.SetDirHosts(ctx, []spindle.PeerAddr{p2p.PeerAddrOf(n.Host().ID())}); err != nil {
		t.Fatal(err)
	}
	if u, err := b.LookupUser(ctx, "ann@example.com"); err != nil || u.Version < 2 {
		t.Fatalf("the record did not change: %+v, %v", u, err)
	}
	if _, err := a.Put(ctx, "ann@example.com/after", strings.NewReader("after the record changed"), spindle.EEPack, nil); err != nil {
		t.Fatalf("a put after another client changed the record: %v", err)
	}
}
