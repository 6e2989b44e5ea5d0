package node

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
)

// BenchmarkRenewLeases times one renewal round of a dir host whose trees
// reference 10^5 blocks (ten users of 10^4), in a network of four nodes
// on loopback TCP with durable lease journals: every block is leased
// here and with the three other nodes (4·10^5 leases a round), and the
// 4096 blocks of the round that no node announces are looked up in the
// DHT. It reports leases granted per second.
func BenchmarkRenewLeases(b *testing.B) {
	const users, perUser = 10, 10000
	clk := &leaseClock{t: time.Now()}
	nodes := make([]*Node, 4)
	nodes[0] = leaseNode(b, b.TempDir(), nil, clk)
	boot := nodes[0].Addrs()
	var wg sync.WaitGroup
	homes := []string{"", b.TempDir(), b.TempDir(), b.TempDir()}
	for i := 1; i < len(nodes); i++ {
		wg.Go(func() { nodes[i] = leaseNode(b, homes[i], boot, clk) })
	}
	wg.Wait()
	for _, n := range nodes {
		defer n.Close()
	}
	for _, n := range nodes {
		waitFor(b, 60*time.Second, func() string { return "the nodes never met" }, func() bool { return n.DHT().RoutingTable().Size() >= len(nodes)-1 })
	}
	trees := make(map[spindle.UserName][]spindle.Ref)
	for u := range users {
		user := spindle.UserName(fmt.Sprintf("u%d@example.com", u))
		for i := range perUser {
			trees[user] = append(trees[user], blocks.Digest(sha256.Sum256([]byte(fmt.Sprint(u, i)))).Ref())
		}
	}
	dir := nodes[0]
	dir.leases.refs = func(ctx context.Context, fn func(spindle.UserName, []spindle.Ref) error) ([]spindle.UserName, error) {
		for u, refs := range trees {
			if err := fn(u, refs); err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	ctx := context.Background()
	var leases int
	b.ResetTimer()
	for b.Loop() {
		res, err := dir.RenewLeases(ctx)
		if err != nil || res.Failed > 0 || res.Refused > 0 {
			b.Fatalf("%+v, %v", res, err)
		}
		if want := users * perUser * len(nodes); res.Leases != want {
			b.Fatalf("%d leases granted, want %d", res.Leases, want)
		}
		leases += res.Leases
	}
	b.ReportMetric(float64(leases)/b.Elapsed().Seconds(), "leases/s")
}
