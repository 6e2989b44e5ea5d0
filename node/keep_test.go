package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"spindle.dev"
)

// Retention and collection: three nodes, r = 2, leases of an hour and a
// window of three hours on a fake clock that starts now. The blocks of a
// file overwritten and of one deleted stay on the nodes that held them,
// and read back from the past, while the window holds them; once it has
// passed (and their leases and the grace after), they go; the current
// version stays throughout.
func TestKeepWindowLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three networked nodes")
	}
	clk := &leaseClock{t: time.Now()}
	const count = 3
	nodes := make([]*Node, count)
	start := func(boot []spindle.PeerAddr) *Node {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := New(ctx, Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Bootstrap: boot, Writers: []string{"all"}, Logger: testLogger(t),
			Replicas: 2, LeaseTerm: testTerm, LeaseGrace: testGrace, LeaseRenew: -1, CollectInterval: -1, now: clk.Now, Keep: 3 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	nodes[0] = start(nil)
	var wg sync.WaitGroup
	for i := 1; i < count; i++ {
		wg.Go(func() { nodes[i] = start(nodes[0].Addrs()) })
	}
	wg.Wait()
	for _, n := range nodes {
		waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= count-1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := nodes[0]
	ann := dialAs(t, dir, "ann@example.com")
	put := func(name string, data []byte) []spindle.Ref {
		t.Helper()
		e, err := ann.Put(ctx, spindle.PathName("ann@example.com/"+name), bytes.NewReader(data), spindle.EEPack, nil)
		if err != nil {
			t.Fatal(err)
		}
		var refs []spindle.Ref
		for _, b := range e.Blocks {
			refs = append(refs, b.Ref)
		}
		return refs
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		rand.Read(b)
		return b
	}
	v1, v2, gone := random(300<<10), random(200<<10), random(100<<10)
	v1Refs := put("doc", v1)
	seq1, err := ann.TreeAt(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	v2Refs := put("doc", v2)
	goneRefs := put("gone", gone)
	if err := ann.Delete(ctx, "ann@example.com/gone"); err != nil {
		t.Fatal(err)
	}
	old := append(append([]spindle.Ref(nil), v1Refs...), goneRefs...)
	held := func(refs []spindle.Ref) (n int) {
		for _, ref := range refs {
			for _, nd := range nodes {
				if holds(nd, ref) {
					n++
				}
			}
		}
		return n
	}
	rounds := func(k int) {
		t.Helper()
		for range k {
			clk.Add(40 * time.Minute)
			if res, err := dir.RenewLeases(ctx); err != nil || res.Leases == 0 {
				t.Fatalf("renewal: %+v, %v", res, err)
			}
			for i, n := range nodes {
				if _, err := n.CollectBlocks(ctx); err != nil {
					t.Fatalf("collection on node %d: %v", i, err)
				}
			}
		}
	}
	oldHeld, curHeld := held(old), held(v2Refs)
	if oldHeld < len(old) || curHeld < len(v2Refs) {
		t.Fatalf("before any round: %d copies of old blocks, %d of current ones", oldHeld, curHeld)
	}
	// Two hours and forty minutes: inside the window, every copy stays,
	// and the overwritten version reads back.
	rounds(4)
	if got := held(old); got < oldHeld {
		t.Fatalf("inside the window: %d copies of the old versions' blocks left of %d", got, oldHeld)
	}
	p, err := ann.PastAt(ctx, seq1.Seq, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.Open(ctx, "ann@example.com/doc")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := got.ReadFrom(f); err != nil || !bytes.Equal(got.Bytes(), v1) {
		t.Fatalf("the overwritten version inside the window: %v, equal=%v", err, bytes.Equal(got.Bytes(), v1))
	}
	f.Close()
	// Four more hours: the window, the leases and the grace have passed.
	rounds(6)
	if got := held(old); got != 0 {
		t.Errorf("after the window: %d copies of the old versions' blocks are still held", got)
	}
	if got := held(v2Refs); got < curHeld {
		t.Errorf("after the window: %d copies of the current version's blocks, want %d", got, curHeld)
	}
}
