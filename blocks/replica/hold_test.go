package replica_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/lease"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// diskStores returns a storeOf for newNetEach: a disk store in a
// directory of its own for each node, closed after the node stops.
func diskStores(t *testing.T) func(int) spindle.BlockStore {
	return func(int) spindle.BlockStore {
		s, err := disk.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
}

// A node at its hold limit refuses a copy as Full, and the writer places
// it on the next nearest node instead, so that every block still has r
// copies. The count is of the bytes the store holds: it goes down when
// blocks are collected, after which the node takes copies again, and a
// Store started on the same disk counts what is there.
func TestHoldLimit(t *testing.T) {
	const (
		limit = 100 << 10
		size  = 40 << 10
		small = 1 // Index of the node with the limit.
	)
	base := replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second, RepairInterval: -1}
	nodes := newNetEach(t, 5, func(i int) replica.Config {
		cfg := base
		if i == small {
			cfg.HoldLimit = limit
		}
		return cfg
	}, diskStores(t))
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(7, 8))

	// Blocks put through node 0 until node 1 has refused one as full.
	var refs []spindle.Ref
	for len(refs) < 40 && nodes[small].store.Stats().ReplicaFull == 0 {
		ref, copies, err := nodes[0].store.PutCopies(ctx, randomBlock(rnd, size))
		if err != nil {
			t.Fatal(err)
		}
		if copies != 3 {
			t.Fatalf("block %d has %d copies, want 3", len(refs), copies)
		}
		refs = append(refs, ref)
	}
	st := nodes[small].store.Stats()
	if st.ReplicaFull == 0 {
		t.Fatalf("node %d refused none of %d blocks of %d KiB under a limit of %d KiB: %+v", small, len(refs), size>>10, limit>>10, st)
	}
	if st.HeldBytes > limit || st.HoldLimit != limit {
		t.Errorf("node %d holds %d bytes with a limit of %d: %+v", small, st.HeldBytes, limit, st)
	}
	if w := nodes[0].store.Stats(); w.PushedFull == 0 {
		t.Errorf("the writer counted no push refused as full: %+v", w)
	}
	var onSmall []spindle.Ref
	for i, ref := range refs {
		if got := holders(nodes, ref); len(got) < 3 {
			t.Errorf("block %d held by nodes %v, want 3 or more", i, got)
		}
		if nodes[small].has(ref) {
			onSmall = append(onSmall, ref)
		}
	}
	if _, size, err := nodes[small].local.(*disk.Store).Usage(ctx); err != nil || size != st.HeldBytes {
		t.Errorf("node %d counts %d bytes held, its store %d (%v)", small, st.HeldBytes, size, err)
	}

	// The refusal travels as a kind, not as words.
	r := p2p.NewRemoteStore(nodes[0].h, nodes[small].h.ID())
	defer r.Close()
	if _, err := r.Put(ctx, randomBlock(rnd, size)); !errors.Is(err, spindle.Full) {
		t.Fatalf("push to the full node: %v, want Full", err)
	} else {
		t.Logf("refusal: %v", err)
	}

	// Collection (leases none, grace over) drops node 1's blocks; its
	// count goes down and it takes copies again.
	now := time.Now()
	clock := func() time.Time { return now }
	table := lease.NewTable(lease.Config{Now: clock})
	coll := lease.NewCollector(table, nodes[small].local.(lease.Store), time.Minute, clock)
	coll.OnCollect = func(refs []spindle.Ref) {
		if err := nodes[small].store.Forget(refs...); err != nil {
			t.Errorf("Forget: %v", err)
		}
	}
	if _, err := coll.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	res, err := coll.Pass(ctx)
	if err != nil || res.Collected != len(onSmall) {
		t.Fatalf("collection: %+v, %v; want %d blocks collected", res, err, len(onSmall))
	}
	if st := nodes[small].store.Stats(); st.HeldBytes != 0 {
		t.Fatalf("node %d counts %d bytes held after collecting all, want 0", small, st.HeldBytes)
	}
	if _, err := r.Put(ctx, randomBlock(rnd, size)); err != nil {
		t.Fatalf("push after collection: %v", err)
	}

	// A Store started on the same disk counts what the disk holds.
	held := nodes[small].store.Stats().HeldBytes
	nodes[small].stop()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d, err := dht.New(ctx, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	again, err := replica.New(h, d, nodes[small].local, replica.Config{HoldLimit: limit, RepairInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if got := again.Stats().HeldBytes; got != held || got != size {
		t.Errorf("a Store restarted on the disk counts %d bytes held, want %d", got, size)
	}
}
