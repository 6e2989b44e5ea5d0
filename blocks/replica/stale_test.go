package replica_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/replica"
)

// Provider records outlive the nodes that made them. A block held by r
// live nodes, whose key also has many records of nodes now offline, is
// not short: a repair round finds its live holders among all the records
// and pushes nothing. (Repair used to ask the DHT for 2r providers only;
// when the offline ones came first, it took the block for short and
// pushed it again, round after round, under churn.)
func TestRepairIgnoresStaleProviders(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 16 loopback nodes; skipped with -short")
	}
	cfg := replica.Config{Replicas: 2, BaseTimeout: 3 * time.Second, RepairInterval: -1}
	nodes := newNet(t, 16, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rnd := rand.New(rand.NewPCG(17, 1))
	var refs []spindle.Ref
	var datas [][]byte
	live := map[int]bool{0: true}
	for range 5 {
		data := randomBlock(rnd, 2000)
		ref, err := nodes[0].store.Put(ctx, data)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		refs, datas = append(refs, ref), append(datas, data)
		for _, i := range holders(nodes, ref) {
			live[i] = true
		}
	}
	var dead []int
	for i := range nodes {
		if !live[i] {
			dead = append(dead, i)
		}
	}
	if len(dead) < 8 {
		t.Fatalf("only %d nodes hold none of the blocks; want at least 8", len(dead))
	}
	// Every other node holds and announces every block, then goes
	// offline, leaving its records behind.
	for _, i := range dead {
		for b, data := range datas {
			if _, err := nodes[i].local.Put(ctx, data); err != nil {
				t.Fatal(err)
			}
			if err := nodes[i].store.Announce(refs[b]); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ref := range refs {
		waitProviders(t, nodes[0], ref, 2+len(dead))
	}
	for _, i := range dead {
		nodes[i].stop()
	}
	res, err := nodes[0].store.Repair(ctx)
	if err != nil {
		t.Fatalf("Repair: %v", err)
	}
	want := replica.RepairResult{Checked: len(refs)}
	if res != want {
		t.Errorf("Repair with %d offline providers of each block and 2 live holders: %+v, want %+v", len(dead), res, want)
	}
}
