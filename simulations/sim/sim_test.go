package sim

import (
	"context"
	"testing"
	"time"
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
