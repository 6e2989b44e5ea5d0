package client

import (
	"bytes"
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A new client that puts a file only its owner reads wraps the file key
// with the keys it holds: it looks up no key record, as a new spin
// process would otherwise for every small put. The file reads back.
func TestPutOwnFileLooksUpNoKey(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	keyLog := filepath.Join(t.TempDir(), "keylog")
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dial := func() *Client {
		c, err := Dial(ctx, Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: keyLog})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	if err := dial().Signup(ctx); err != nil {
		t.Fatal(err)
	}
	var lookups atomic.Int32
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wire.Request
		if err := wire.Decode(data, &req); err == nil {
			switch req.Method {
			case wire.KeyLookup, wire.KeyProof, wire.KeyProofs:
				lookups.Add(1)
			}
		}
		return n.ServeClient(ctx, remote, data)
	})
	c := dial()
	if _, err := c.Put(ctx, "@/f", bytes.NewReader([]byte("mine")), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	if k := lookups.Load(); k != 0 {
		t.Errorf("a put of a file only its owner reads looked up %d key records, want 0", k)
	}
	mustRead(t, dial(), ann("f"), []byte("mine"))
	if lookups.Load() == 0 {
		t.Error("the read looked up no key record: the counting handler is not in the way")
	}
}
