package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/shard"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// ecNode starts a networked node that asks its clients for 4+2 stripes
// and caches no fetched block, so that every read fetches shards. keys,
// if set, is the key cluster it uses (and joins the DHT through).
func ecNode(t testing.TB, home string, keys []spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: home, NoSocket: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: keys, Writers: []string{"all"}, Logger: testLogger(t),
		Erasure: shard.Scheme{K: 4, M: 2}, CacheBytes: -1, LeaseRenew: -1, CollectInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A file put through a node started with -ec 4+2 is stored as stripes:
// its entry records the code and the shard refs (pack packdata version
// 2), each shard is held by one node and the shards of a block by six,
// its dir host leases the shards, and the writer reads it back through
// another node, byte for byte, before and after two holders of shards of
// every block are switched off.
func TestErasureCodedFileThroughNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eight networked nodes")
	}
	const count = 8
	nodes := make([]*Node, count)
	nodes[0] = ecNode(t, t.TempDir(), nil)
	boot := nodes[0].Addrs()[:1]
	var wg sync.WaitGroup
	for i := 1; i < count; i++ {
		home := t.TempDir()
		wg.Go(func() { nodes[i] = ecNode(t, home, boot) })
	}
	wg.Wait()
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	}()
	for _, n := range nodes {
		waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= count-1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ann, keys := dialWithKeys(t, nodes[0], "ann@example.com")
	data := make([]byte, 5*spindle.MaxBlockSize+12345)
	rand.Read(data)
	name := spindle.PathName("ann@example.com/striped")
	if _, err := ann.Put(ctx, name, bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	e, err := ann.Lookup(ctx, name, false)
	if err != nil {
		t.Fatal(err)
	}
	code, stripes, err := pack.Stripes(e)
	if err != nil || code != (pack.Erasure{K: 4, M: 2}) || len(stripes) != len(e.Blocks) {
		t.Fatalf("entry's stripes: %v, %d of %d blocks, %v; want 4+2 for every block", code, len(stripes), len(e.Blocks), err)
	}
	holderOf := func(ref spindle.Ref) []int {
		var out []int
		for i, n := range nodes {
			if n != nil && holds(n, ref) {
				out = append(out, i)
			}
		}
		return out
	}
	var stored int64
	for b, refs := range stripes {
		var used []int
		for i, r := range refs {
			h := holderOf(r)
			if len(h) != 1 || slices.Contains(used, h[0]) {
				t.Fatalf("block %d shard %d held by nodes %v (its siblings by %v), want one node of its own", b, i, h, used)
			}
			used = append(used, h[0])
			sh, _ := nodes[h[0]].store.Get(ctx, r)
			stored += int64(len(sh))
		}
		if h := holderOf(e.Blocks[b].Ref); len(h) != 0 {
			t.Fatalf("block %d is held whole by nodes %v", b, h)
		}
	}
	t.Logf("file %d bytes (%d sealed), shards %d bytes: %.3fx", len(data), len(data)+16*len(e.Blocks), stored, float64(stored)/float64(len(data)))

	res, err := nodes[0].RenewLeases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := len(e.Blocks) * 7; res.Blocks != want {
		t.Fatalf("the dir host leases %d blocks, want %d (each block's ref and its 6 shards)", res.Blocks, want)
	}

	// Ann through node 7, which is not her dir host.
	read := func() []byte {
		t.Helper()
		c, err := client.Dial(ctx, client.Config{Keys: keys, Node: nodes[7].DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		f, err := c.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		got, err := io.ReadAll(f)
		if err != nil {
			t.Fatalf("read through node 7: %v", err)
		}
		return got
	}
	if !bytes.Equal(read(), data) {
		t.Fatal("read through node 7 differs from the file")
	}
	// Switch off two nodes, neither the dir host nor node 7, that hold
	// shards: every block keeps at least 4 of its 6.
	lost := 0
	for i := 1; i <= 2; i++ {
		for _, refs := range stripes {
			for _, r := range refs {
				if holds(nodes[i], r) {
					lost++
				}
			}
		}
		nodes[i].Close()
		nodes[i] = nil
	}
	if lost == 0 {
		t.Fatal("the nodes switched off held no shard: the test did not test losing them")
	}
	t.Logf("switched off 2 nodes holding %d shards", lost)
	if !bytes.Equal(read(), data) {
		t.Fatal("after two holders went, the read through node 7 differs from the file")
	}

	// The dir host rebuilds the lost shards onto the nodes left: six
	// live nodes, so each stripe's shards lie on all six again.
	sr, err := nodes[0].RepairStripes(ctx)
	if err != nil {
		t.Fatalf("RepairStripes: %v (%+v)", err, sr)
	}
	t.Logf("stripe repair: %+v", sr)
	if sr.Rebuilt != lost || sr.Files != 1 || sr.Stripes != len(stripes) {
		t.Fatalf("RepairStripes = %+v, want %d shards rebuilt in 1 file of %d stripes", sr, lost, len(stripes))
	}
	for b, refs := range stripes {
		var used []int
		for i, r := range refs {
			h := holderOf(r)
			if len(h) != 1 || slices.Contains(used, h[0]) {
				t.Fatalf("after repair, block %d shard %d held by nodes %v (siblings by %v)", b, i, h, used)
			}
			used = append(used, h[0])
		}
	}
	if sr, err := nodes[0].RepairStripes(ctx); err != nil || sr.Short != 0 {
		t.Fatalf("second RepairStripes = %+v, %v; want no stripe short", sr, err)
	}
}
