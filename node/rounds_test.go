package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

// When the client's node A carries its requests to B, the dir host of
// its tree, over a far link, A's round trips to B are what that link
// costs each command. A small put and a small get through A of ann's
// file on B, each by a new client, print the client's rounds to A, A's
// to B and A's to K, the key cluster, and fail if those to A or B grow.
// (With SPINDLE_ROUNDS_PLAIN set the client forwards in plain, and the
// log names the methods that the tunnels hide.)
func TestForwardedSmallPutGetRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three networked nodes")
	}
	const rtt = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	k := netNode(t, "", nil)
	t.Cleanup(func() { k.Close() })
	kaddr := p2p.Addrs(k.Host())[0]
	b := keyNode(t, kaddr)
	var toB, toK *p2ptest.RoundCounter = p2ptest.NewRoundCounter(rtt), p2ptest.NewRoundCounter(rtt)
	describe := func(proto protocol.ID, p []byte) string {
		var req wiretest.Request
		if proto == wire.ClientProtocol && len(p) > 5 && wire.Decode(p[5:], &req) == nil {
			return req.Method
		}
		return string(proto)
	}
	toB.Describe, toK.Describe = describe, describe
	newCounted := func() *p2ptest.CountingHost {
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return &p2ptest.CountingHost{Host: h, C: toB, Count: func(p peer.ID) bool { return p == b.Host().ID() }}
	}
	hb := newCounted()
	// A second view of the same host counts its round trips to K.
	hk := &p2ptest.CountingHost{Host: hb.Host, C: toK, Count: func(p peer.ID) bool { return p == k.Host().ID() }}
	a, err := New(ctx, Config{Host: &splitHost{CountingHost: hb, k: hk, kid: k.Host().ID()}, KeyServers: []spindle.PeerAddr{kaddr}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	_, annKeys := dialWithKeys(t, b, "ann@example.com")
	keyLog := filepath.Join(t.TempDir(), "keylog")
	heads := filepath.Join(t.TempDir(), "dirheads")
	// The client's own round trips to A, as client.TestSmallPutGetRounds
	// counts them.
	toA := p2ptest.NewRoundCounter(rtt)
	toA.Describe = describe
	dial := func() *client.Client {
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		c, err := client.Dial(ctx, client.Config{Keys: annKeys, Node: a.DialAddr(), Host: &p2ptest.CountingHost{Host: h, C: toA}, Logger: testLogger(t), KeyLog: keyLog, DirHeads: heads, PlainForwarding: os.Getenv("SPINDLE_ROUNDS_PLAIN") != ""})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	data := bytes.Repeat([]byte("x"), 1<<10)
	warm := dial() // A learns the way to B, as a node in use has.
	if _, err := warm.Put(ctx, "ann@example.com/warm", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	warm.Close()
	for _, tc := range []struct {
		what string
		do   func(c *client.Client) error
		most int // A's rounds to B.
		own  int // The client's rounds to A.
	}{
		{"put of ann's own file", func(c *client.Client) error {
			_, err := c.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil)
			return err
		}, 6, 4},
		{"get of ann's own file", func(c *client.Client) error {
			f, err := c.Open(ctx, "ann@example.com/f")
			if err != nil {
				return err
			}
			defer f.Close()
			got, err := io.ReadAll(f)
			if err == nil && !bytes.Equal(got, data) {
				err = fmt.Errorf("read back %d bytes, not the %d put", len(got), len(data))
			}
			return err
		}, 2, 2},
	} {
		var n, an int
		var log, alog, klog string
		for try := 0; try < 3; try++ {
			c := dial()
			toA.Reset()
			toB.Reset()
			toK.Reset()
			if err := tc.do(c); err != nil {
				t.Fatalf("%s: %v", tc.what, err)
			}
			c.Close()
			n, log = toB.Count()
			var kn int
			kn, klog = toK.Count()
			klog = fmt.Sprintf("%d: %s", kn, klog)
			an, alog = toA.Count()
			if n <= tc.most && an <= tc.own {
				break
			}
		}
		t.Logf("%s through A: the client's rounds to A: %d (%s); A's to B, the dir host: %d (%s); A's to K, the key cluster: %s", tc.what, an, alog, n, log, klog)
		if n > tc.most {
			t.Errorf("%s through A took A %d round trips to the dir host, want at most %d: %s", tc.what, n, tc.most, log)
		}
		if an > tc.own {
			t.Errorf("%s through A took the client %d round trips to A, want at most %d: %s", tc.what, an, tc.own, alog)
		}
	}
}

// A splitHost counts a node's streams to its dir host in one counter
// and those to the key cluster's member kid in another.
type splitHost struct {
	*p2ptest.CountingHost
	k   *p2ptest.CountingHost
	kid peer.ID
}

func (h *splitHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	if p == h.kid {
		return h.k.NewStream(ctx, p, pids...)
	}
	return h.CountingHost.NewStream(ctx, p, pids...)
}
