package sim

import (
	"context"
	"testing"
	"time"

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
