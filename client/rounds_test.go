package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
	"spindle.dev/pack"
)

// describe names a message written to a stream of proto, if p starts
// one: a client request by its method, a block request by its op; with
// SPINDLE_ROUNDS_DEBUG set, with the time it went.
func describe(proto protocol.ID, p []byte) string {
	what := describe1(proto, p)
	if what != "" && os.Getenv("SPINDLE_ROUNDS_DEBUG") != "" {
		what += "@" + time.Now().Format("05.000")
	}
	return what
}

func describe1(proto protocol.ID, p []byte) string {
	const header = 5                  // A frame's tag and length (see p2p.Conn).
	if len(p) < header || p[0] != 1 { // 1: a message, not an error.
		return ""
	}
	n := binary.BigEndian.Uint32(p[1:header])
	switch proto {
	case wire.ClientProtocol:
		var req wiretest.Request
		if int(n) == len(p)-header && wire.Decode(p[header:], &req) == nil {
			if req.To != "" {
				return req.Method + "(forwarded)"
			}
			return req.Method
		}
		return "client"
	case p2p.BlockProtocol, p2p.BlockProtocolV1:
		if len(p) > header {
			return [...]string{"?", "block.get", "block.put", "block.has", "block.prove", "block.again"}[min(int(p[header]), 5)]
		}
	}
	return string(proto)
}

// roundsRTT is the round-trip time the round counting tests make between
// a client and its node.
const roundsRTT = 100 * time.Millisecond

// roundsEnv is a node with ann and bob signed up, and a way to dial it
// as a new client of either, as each spin command does, whose round
// trips to the node are counted.
type roundsEnv struct {
	rtt    time.Duration // The round-trip time the counter makes (see p2ptest.RoundCounter).
	n      *node.Node
	keys   map[spindle.UserName]*pack.Keys
	keyLog map[spindle.UserName]string
	heads  map[spindle.UserName]string
}

func newRoundsEnv(t testing.TB) *roundsEnv {
	t.Helper()
	e := &roundsEnv{rtt: roundsRTT, n: startNode(t, t.TempDir()), keys: map[spindle.UserName]*pack.Keys{}, keyLog: map[spindle.UserName]string{}, heads: map[spindle.UserName]string{}}
	t.Cleanup(func() { e.n.Close() })
	for _, u := range []spindle.UserName{"ann@example.com", "bob@example.com"} {
		keys, _, err := pack.Generate(u)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		e.keys[u], e.keyLog[u], e.heads[u] = keys, filepath.Join(dir, "keylog"), filepath.Join(dir, "dirheads")
		c, err := Dial(context.Background(), Config{Keys: keys, Node: e.n.DialAddr(), Logger: testLogger(t), KeyLog: e.keyLog[u], DirHeads: e.heads[u]})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Signup(context.Background()); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	return e
}

// dial returns a new client of u, dialled, and the counter of its round
// trips, reset after the dial.
func (e *roundsEnv) dial(t testing.TB, u spindle.UserName) (*Client, *p2ptest.RoundCounter) {
	t.Helper()
	ctx := context.Background()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	rc := p2ptest.NewRoundCounter(e.rtt)
	rc.Describe = describe
	c, err := Dial(ctx, Config{Keys: e.keys[u], Node: e.n.DialAddr(), Host: &p2ptest.CountingHost{Host: h, C: rc}, Logger: testLogger(t), KeyLog: e.keyLog[u], DirHeads: e.heads[u], RequireKeyLog: true})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		h.Close()
	})
	rc.Reset()
	return c, rc
}

// put puts data at name as a new client of u, and returns its rounds.
func (e *roundsEnv) put(t testing.TB, u spindle.UserName, name spindle.PathName, data []byte) (int, string) {
	t.Helper()
	c, rc := e.dial(t, u)
	if _, err := c.Put(context.Background(), name, bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	n, log := rc.Count()
	c.Close()
	return n, log
}

// get reads name as a new client of u, checks it holds want, and
// returns its rounds.
func (e *roundsEnv) get(t testing.TB, u spindle.UserName, name spindle.PathName, want []byte) (int, string) {
	t.Helper()
	c, rc := e.dial(t, u)
	f, err := c.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %s: %v, equal=%v", name, err, bytes.Equal(got, want))
	}
	n, log := rc.Count()
	c.Close()
	return n, log
}

// The round trips of a small put and a small get, each by a new client
// as each spin command is, after its dial: of a file only its owner
// reads, and of one shared with bob, whose key the put wraps the file's
// key for and who reads it.
func TestSmallPutGetRounds(t *testing.T) {
	e := newRoundsEnv(t)
	ctx := context.Background()
	data := bytes.Repeat([]byte("x"), 1<<10)
	setup, _ := e.dial(t, "ann@example.com")
	if _, err := setup.MakeDirectory(ctx, "@/shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Put(ctx, "@/shared/Access", strings.NewReader("*: ann@example.com\nread, list: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	for _, tc := range []struct {
		what   string
		rounds func() (int, string)
		most   int
	}{
		{"put of ann's own file", func() (int, string) { return e.put(t, "ann@example.com", ann("f"), data) }, 2},
		{"get of ann's own file by ann", func() (int, string) { return e.get(t, "ann@example.com", ann("f"), data) }, 1},
		{"put of a file shared with bob", func() (int, string) { return e.put(t, "ann@example.com", ann("shared/f"), data) }, 2},
		// Bob's first read of ann's tree: the key record that says where
		// it is comes first. (His node may not be her dir host, and is
		// not told what he asks elsewhere: see tunnel.go.)
		{"first get of a file shared with bob by bob", func() (int, string) { return e.get(t, "bob@example.com", ann("shared/f"), data) }, 2},
		{"get of a file shared with bob by bob", func() (int, string) { return e.get(t, "bob@example.com", ann("shared/f"), data) }, 1},
	} {
		// A machine stalled for longer than the round-trip time the
		// counter makes splits a round in two; a round more in every
		// try is a round more.
		n, log := tc.rounds()
		for try := 1; try < 3 && n > tc.most; try++ {
			n, log = tc.rounds()
		}
		t.Logf("%s: %d rounds (%s)", tc.what, n, log)
		if n > tc.most {
			t.Errorf("%s took %d round trips to the node, want at most %d: %s", tc.what, n, tc.most, log)
		}
	}
}
