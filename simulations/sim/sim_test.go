package sim

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
	"spindle.dev/blocks/shard"
	"spindle.dev/simulations/model"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLookup100 runs the lookup scenario at N = 100: at least 99% of
// provider lookups find the provider. The links have no delay here, to
// keep the test short on a loaded machine; the long runs
// (go run ./simulations -scenario lookup) have home-like latency.
func TestLookup100(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 100 libp2p hosts; skipped with -short")
	}
	const seed = 1
	tab := LookupTable()
	cfg := LookupConfig{Nodes: []int{100}, Seed: seed, Keys: 10, Lookups: 100, Timeout: time.Minute, NoLatency: true}
	if err := Lookup(ctxT(t, 3*time.Minute), cfg, tab); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + tab.String())
	if got := tab.Float(0, "success_pct"); got < 99 {
		t.Errorf("seed %d: %.1f%% of lookups found the provider, want at least 99%%", seed, got)
	}
}

var homes = model.Churn{Availability: 0.5, Shape: 0.5, MeanOnline: 8}

// TestChurnGrowsWithR runs the churn scenario on 24 real nodes: files
// stay readable at least as often with more copies.
func TestChurnGrowsWithR(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real libp2p hosts; skipped with -short")
	}
	const seed = 2
	tab := ChurnTable()
	cfg := ChurnConfig{Nodes: 16, Files: 30, Blocks: 1, BlockSize: 4 << 10,
		Replicas: []int{1, 2, 3}, Repair: []float64{0}, Hours: 24, Churn: homes, Seed: seed}
	if err := Churn(ctxT(t, 5*time.Minute), cfg, tab); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + tab.String())
	for i := 1; i < len(tab.Rows); i++ {
		if a, b := tab.Float(i-1, "readable_pct"), tab.Float(i, "readable_pct"); b < a {
			t.Errorf("seed %d: readable fell from %v%% to %v%% as r grew to %v", seed, a, b, tab.Rows[i][tab.Col("r")])
		}
	}

	// The same seed gives the same figures that do not depend on timing.
	again := ChurnTable()
	cfg.Replicas = []int{3}
	if err := Churn(ctxT(t, 5*time.Minute), cfg, again); err != nil {
		t.Fatal(err)
	}
	for i, j := range []int{2} {
		for _, col := range []string{"r", "put_copies_mean", "readable_pct", "read_ok_pct", "model_readable_pct"} {
			if a, b := tab.Rows[j][tab.Col(col)], again.Rows[i][again.Col(col)]; a != b {
				t.Errorf("seed %d, r = %s: %s is %s in one run and %s in another", seed, tab.Rows[j][0], col, a, b)
			}
		}
	}
}

// TestKeysNoLostWrite kills and restarts members of a 5-member key
// cluster while users register: no acknowledged registration is lost.
func TestKeysNoLostWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a 5-member raft cluster on disk; skipped with -short")
	}
	const seed = 3
	tab := KeysTable()
	cfg := KeysConfig{Members: 5, Rounds: 4, Phase: 2 * time.Second, Seed: seed, Dir: t.TempDir()}
	if err := Keys(ctxT(t, 5*time.Minute), cfg, tab); err != nil {
		t.Fatalf("seed %d: %v\n%s", seed, err, tab)
	}
	t.Log("\n" + tab.String())
	last := len(tab.Rows) - 1
	if acked := tab.Float(last, "acknowledged"); acked == 0 {
		t.Errorf("seed %d: no registration was acknowledged, so none could be lost", seed)
	}
	if lost := tab.Float(last, "lost"); lost != 0 {
		t.Errorf("seed %d: %v acknowledged registrations lost", seed, lost)
	}
}

// TestHot has 30 readers fetch one file at once, twice: every read
// succeeds, and with the cache the second read is served locally.
func TestHot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real libp2p hosts; skipped with -short")
	}
	const seed = 4
	tab := HotTable()
	cfg := HotConfig{Nodes: 31, Blocks: 4, BlockSize: 16 << 10, Seed: seed, NoLatency: true}
	if err := Hot(ctxT(t, 5*time.Minute), cfg, tab); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + tab.String())
	for i, row := range tab.Rows {
		if got := row[tab.Col("read_ok")]; got != "30+30" {
			t.Errorf("seed %d, row %d: readers that read the file (first+second): %s, want 30+30", seed, i, got)
		}
	}
}

// TestChurnStripes runs the churn scenario with whole copies and 4+2
// stripes through the real PutStripe, GetStripe and RepairStripe: with
// no churn every file reads and repair moves nothing; under churn with
// no machine leaving for good no file is lost and the real reads agree
// with the count of online holders; and a stripe reads with 2 of its 6
// holders stopped, not with 3, and reads again with 2 more stopped once
// RepairStripe has rebuilt the first two.
func TestChurnStripes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real libp2p hosts; skipped with -short")
	}
	const seed = 5
	codes := []model.Code{{Replicas: 3}, {K: 4, M: 2}}
	still := model.Churn{Availability: 1, Shape: 0.5, MeanOnline: 1e9}
	tab := ChurnCodesTable()
	cfg := ChurnConfig{Nodes: 16, Files: 6, Blocks: 2, BlockSize: 4 << 10,
		Codes: codes, Repair: []float64{1}, Hours: 3, Churn: still, Seed: seed}
	if err := ChurnCodes(ctxT(t, 3*time.Minute), cfg, tab); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + tab.String())
	for i, c := range codes {
		want := map[string]float64{"placed_mean": float64(max(c.Replicas, c.K+c.M)),
			"readable_pct": 100, "read_ok_pct": 100, "min_readable_pct": 100, "lost_files": 0, "repair_x": 0}
		for col, w := range want {
			if got := tab.Float(i, col); got != w {
				t.Errorf("seed %d, %v, no churn: %s is %v, want %v", seed, c, col, got, w)
			}
		}
	}

	tab = ChurnCodesTable()
	cfg = ChurnConfig{Nodes: 24, Files: 8, Blocks: 1, BlockSize: 4 << 10,
		Codes: codes, Repair: []float64{1}, Hours: 8, Churn: homes, Seed: seed}
	if err := ChurnCodes(ctxT(t, 3*time.Minute), cfg, tab); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + tab.String())
	for i, c := range codes {
		if got := tab.Float(i, "lost_files"); got != 0 {
			t.Errorf("seed %d, %v, churn: %v files lost with no machine leaving for good", seed, c, got)
		}
		if a, b := tab.Float(i, "readable_pct"), tab.Float(i, "read_ok_pct"); a != b {
			t.Errorf("seed %d, %v, churn: %v%% readable by the online holders, %v%% read", seed, c, a, b)
		}
	}

	t.Run("holders stopped", func(t *testing.T) { stripeHoldersStopped(t, seed) })
}

func stripeHoldersStopped(t *testing.T, seed uint64) {
	ctx := ctxT(t, 3*time.Minute)
	net, err := NewNet(ctx, NetConfig{Nodes: 14, Seed: seed,
		Replica: replica.Config{Replicas: replica.DefaultReplicas, RepairInterval: -1, BaseTimeout: 5 * time.Second, CacheBytes: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	sc := shard.Scheme{K: 4, M: 2}
	for b := range 2 {
		data := blockData(seed, 0, b, 4<<10)
		ref := blocks.RefOf(data)
		refs, err := net.Nodes[0].Store.PutStripe(ctx, data, sc)
		if err != nil {
			t.Fatalf("block %d: %v", b, err)
		}
		// holders returns the online holders of the stripe's shards, and
		// an online node holding none of them to read from.
		holders := func() (hs []int, reader int) {
			held := holdings(ctx, net)
			on := make(map[int]bool)
			for _, r := range refs {
				for _, i := range held[r] {
					if net.Online(i) {
						on[i] = true
					}
				}
			}
			reader = -1
			for i := range net.Nodes {
				switch {
				case on[i]:
					hs = append(hs, i)
				case reader < 0 && net.Online(i):
					reader = i
				}
			}
			return hs, reader
		}
		read := func(reader int) error {
			got, err := net.Nodes[reader].Store.GetStripe(ctx, ref, refs)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("read other bytes")
			}
			return err
		}
		hs, reader := holders()
		if len(hs) != sc.N() || reader < 0 {
			t.Fatalf("block %d: %d online holders of its %d shards and reader %d", b, len(hs), sc.N(), reader)
		}
		stop := func(i int) {
			if err := net.SetOnline(ctx, i, false); err != nil {
				t.Fatal(err)
			}
		}
		stop(hs[0])
		stop(hs[1])
		if err := read(reader); err != nil {
			t.Errorf("block %d, 2 of 6 holders stopped: %v", b, err)
		}
		stop(hs[2])
		if err := read(reader); !errors.Is(err, spindle.NotExist) {
			t.Errorf("block %d, 3 of 6 holders stopped: read gave %v, want NotExist", b, err)
		}
		if err := net.SetOnline(ctx, hs[2], true); err != nil {
			t.Fatal(err)
		}
		// The third holder is back, but on a loaded machine it may not
		// answer yet: repair then rebuilds its shard too. Either way every
		// shard is held or rebuilt.
		res, err := net.Nodes[reader].Store.RepairStripe(ctx, ref, refs)
		if err != nil || res.Rebuilt < 2 || res.Held+res.Rebuilt != sc.N() {
			t.Fatalf("block %d, 2 of 6 holders stopped: RepairStripe held %d and rebuilt %d shards (%+v), want all %d, 2 or more rebuilt; err %v", b, res.Held, res.Rebuilt, res, sc.N(), err)
		}
		hs, reader = holders()
		if len(hs) < sc.N() {
			t.Fatalf("block %d after repair: %d online holders, want %d", b, len(hs), sc.N())
		}
		stop(hs[len(hs)-1])
		stop(hs[len(hs)-2])
		if err := read(reader); err != nil {
			t.Errorf("block %d, repaired, 2 more holders stopped: %v", b, err)
		}
		for i := range net.Nodes {
			net.SetOnline(ctx, i, true)
		}
	}
}
