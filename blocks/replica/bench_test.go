package replica_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/replica"
)

// BenchmarkGet64MiB gets a 64 MiB file (64 blocks of 1 MiB) through a
// node that holds none of its blocks and caches none, from 1 provider and
// from 3, on a network of 5 loopback nodes that keep their blocks in
// blocks/disk stores.
func BenchmarkGet64MiB(b *testing.B) {
	for _, providers := range []int{1, 3} {
		b.Run(fmt.Sprintf("providers=%d", providers), func(b *testing.B) { benchGet(b, providers) })
	}
}

func benchGet(b *testing.B, providers int) {
	nodes := newNetWith(b, 5, replica.Config{Replicas: 3, CacheBytes: -1}, func() spindle.BlockStore {
		s, err := disk.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 64
	rnd := rand.NewChaCha8([32]byte{1})
	refs := make([]spindle.Ref, n)
	for i := range refs {
		data := make([]byte, spindle.MaxBlockSize)
		rnd.Read(data)
		refs[i] = blocks.RefOf(data)
		for _, nd := range nodes[:providers] {
			if _, err := nd.local.Put(ctx, data); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, nd := range nodes[:providers] {
		if err := nd.store.Announce(refs...); err != nil {
			b.Fatal(err)
		}
	}
	z := nodes[len(nodes)-1]
	for _, ref := range refs {
		waitProviders(b, z, ref, providers)
	}
	b.SetBytes(n * spindle.MaxBlockSize)
	b.ResetTimer()
	for b.Loop() {
		if err := z.store.GetMany(ctx, refs, func(int, []byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnounce measures the blocks one node announces per second
// through the sweeping provider, on a network of 10 loopback nodes, in
// batches of 10,000.
func BenchmarkAnnounce(b *testing.B) {
	nodes := newNet(b, 10, replica.Config{})
	ctx := context.Background()
	a := nodes[0]
	const batch = 10000
	var seq uint64
	var total time.Duration
	for b.Loop() {
		refs := make([]spindle.Ref, batch)
		for i := range refs {
			seq++
			refs[i] = blocks.RefOf(fmt.Appendf(nil, "block %d", seq))
		}
		st, err := a.store.ProviderStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		before := st.Operations.Past.KeysProvided + st.Operations.Past.KeysFailed
		start := time.Now()
		if err := a.store.Announce(refs...); err != nil {
			b.Fatal(err)
		}
		for {
			st, err := a.store.ProviderStats(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if st.Operations.Past.KeysProvided+st.Operations.Past.KeysFailed-before >= batch {
				if st.Operations.Past.KeysFailed > 0 {
					b.Fatalf("%d keys failed to be announced", st.Operations.Past.KeysFailed)
				}
				break
			}
			if time.Since(start) > 2*time.Minute {
				b.Fatalf("%d of %d keys announced after 2 minutes", st.Operations.Past.KeysProvided-before, batch)
			}
			time.Sleep(5 * time.Millisecond)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(b.N*batch)/total.Seconds(), "blocks/s")
}

// BenchmarkPut measures the latency of one Put of a 1 MiB block with r=3
// on a network of 10 loopback nodes with memory stores: a DHT lookup of
// the nearest nodes and two pushes in parallel.
func BenchmarkPut(b *testing.B) {
	nodes := newNet(b, 10, replica.Config{Replicas: 3})
	ctx := context.Background()
	rnd := rand.NewChaCha8([32]byte{2})
	data := make([]byte, spindle.MaxBlockSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		rnd.Read(data)
		if _, err := nodes[0].store.Put(ctx, data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRepairRound measures one repair round over 32 blocks of 1 MiB
// that each have their r=3 live holders, on a network of 10 loopback
// nodes with memory stores: for each block, a provider lookup and a check
// of each holder it finds. The bytes are those of the blocks checked.
func BenchmarkRepairRound(b *testing.B) {
	cfg := replica.Config{Replicas: 3, RepairInterval: -1, RepairBlocks: 32}
	nodes := newNet(b, 10, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 32
	rnd := rand.NewChaCha8([32]byte{3})
	refs := make([]spindle.Ref, n)
	for i := range refs {
		data := make([]byte, spindle.MaxBlockSize)
		rnd.Read(data)
		ref, err := nodes[0].store.Put(ctx, data)
		if err != nil {
			b.Fatal(err)
		}
		refs[i] = ref
	}
	for _, ref := range refs {
		waitProviders(b, nodes[len(nodes)-1], ref, 3)
	}
	b.SetBytes(n * spindle.MaxBlockSize)
	b.ResetTimer()
	for b.Loop() {
		res, err := nodes[0].store.Repair(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if res.Checked != n || res.Short != 0 {
			b.Fatalf("repair round: %+v, want %d blocks checked and none short", res, n)
		}
	}
}

// BenchmarkErasure compares 4+2 stripes with r=3 copies in one run, on
// one network of 8 loopback nodes with memory stores and no cache of
// fetched blocks. put: one block of 1 MiB through node 0, until it is
// durable (r=3: Put, the local copy and two pushes; 4+2: PutStripe, the
// split and six shards placed, one of which may stay local). get: 8
// blocks of 1 MiB at once through node 7, none of whose bytes (block or
// shard) node 7 holds (r=3: Get from a provider; 4+2: GetStripe, the
// first 4 of 6 shards and the decode). The bytes are those of the
// blocks, not of what crossed the network.
func BenchmarkErasure(b *testing.B) {
	nodes := newNet(b, 8, replica.Config{Replicas: 3, CacheBytes: -1, RepairInterval: -1})
	ctx := context.Background()
	rnd := rand.NewChaCha8([32]byte{3})
	block := func() []byte {
		data := make([]byte, spindle.MaxBlockSize)
		rnd.Read(data)
		return data
	}
	z := nodes[7]
	b.Run("put/r=3", func(b *testing.B) {
		data := block()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			rnd.Read(data)
			if _, err := nodes[0].store.Put(ctx, data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("put/4+2", func(b *testing.B) {
		data := block()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			rnd.Read(data)
			if _, err := nodes[0].store.PutStripe(ctx, data, fourTwo); err != nil {
				b.Fatal(err)
			}
		}
	})
	const reads = 8
	var whole []spindle.Ref
	for len(whole) < reads {
		ref, err := nodes[0].store.Put(ctx, block())
		if err != nil {
			b.Fatal(err)
		}
		if !z.has(ref) {
			whole = append(whole, ref)
		}
	}
	type striped struct {
		ref    spindle.Ref
		shards []spindle.Ref
	}
	var stripes []striped
	for len(stripes) < reads {
		data := block()
		refs, err := nodes[0].store.PutStripe(ctx, data, fourTwo)
		if err != nil {
			b.Fatal(err)
		}
		if !slices.ContainsFunc(refs, z.has) {
			stripes = append(stripes, striped{blocks.RefOf(data), refs})
		} else {
			for _, nd := range nodes {
				for _, r := range refs {
					nd.local.(spindle.BlockLister).Delete(ctx, r)
				}
			}
		}
	}
	for _, ref := range whole {
		waitProviders(b, z, ref, 3)
	}
	for _, st := range stripes {
		for _, r := range st.shards {
			waitProviders(b, z, r, 1)
		}
	}
	each := func(b *testing.B, get func(i int) error) {
		b.SetBytes(reads * spindle.MaxBlockSize)
		for b.Loop() {
			errs := make([]error, reads)
			var wg sync.WaitGroup
			for i := range reads {
				wg.Go(func() { errs[i] = get(i) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("get/r=3", func(b *testing.B) {
		each(b, func(i int) error { _, err := z.store.Get(ctx, whole[i]); return err })
	})
	b.Run("get/4+2", func(b *testing.B) {
		each(b, func(i int) error { _, err := z.store.GetStripe(ctx, stripes[i].ref, stripes[i].shards); return err })
	})
}
