package client

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/pack"
)

// A sign-up that meets a change of the key cluster's leader (the node
// answers key.put with a temporary failure, as a member that has just
// become the leader does) is put again by the client, which signs up
// without the user seeing it.
func TestSignupRetriesLeaderChange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	l := newLiar(t, n)
	var mu sync.Mutex
	failed := 0
	l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		mu.Lock()
		defer mu.Unlock()
		if req.Method == wire.KeyPut && failed < 2 {
			failed++
			resp.Err = wire.ErrBytes(spindle.E(spindle.Transient, "this member became the leader"))
		}
	})
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Signup(ctx); err != nil {
		t.Fatalf("sign-up through two leader changes: %v", err)
	}
	if failed != 2 {
		t.Fatalf("the node answered %d key puts with a leader change, want 2", failed)
	}
	if u, err := c.LookupUser(ctx, "ann@example.com"); err != nil || u.PublicKey != keys.PublicKey() {
		t.Fatalf("after the sign-up: %+v, %v", u, err)
	}
}
