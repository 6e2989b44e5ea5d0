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

// TestLookup100 runs the lookup scenario at N = 100 with home-like
// latency: at least 99% of provider lookups find the provider.
func TestLookup100(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 100 libp2p hosts; skipped with -short")
	}
	const seed = 1
	tab := LookupTable()
	cfg := LookupConfig{Nodes: []int{100}, Seed: seed, Keys: 20, Lookups: 200, Timeout: time.Minute}
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
	cfg := ChurnConfig{Nodes: 24, Files: 40, Blocks: 1, BlockSize: 4 << 10,
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
