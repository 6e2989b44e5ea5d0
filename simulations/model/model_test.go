package model

import "testing"

var homes = Churn{Availability: 0.5, Shape: 0.5, MeanOnline: 8}

func TestDurabilityDeterministic(t *testing.T) {
	cfg := DurabilityConfig{Nodes: 200, Files: 200, Blocks: 2, Replicas: 3, Hours: 72, Repair: 1, Churn: homes, Seed: 7}
	a, err := Durability(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Durability(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("seed %d: two runs differ: %+v and %+v", cfg.Seed, a, b)
	}
}

func TestDurabilityGrowsWithR(t *testing.T) {
	for _, repair := range []float64{0, 1} {
		prev := -1.0
		for r := 1; r <= 5; r++ {
			cfg := DurabilityConfig{Nodes: 300, Files: 300, Blocks: 2, Replicas: r, Hours: 48, Repair: repair, Churn: homes, Seed: 3}
			res, err := Durability(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("repair %v r %d: %+v", repair, r, res)
			if res.Readable < prev {
				t.Errorf("seed %d, repair %v: readable fell from %.3f to %.3f as r grew to %d", cfg.Seed, repair, prev, res.Readable, r)
			}
			prev = res.Readable
		}
	}
}

// TestLookupModel: every lookup finds the provider, in a few rounds that
// grow with the logarithm of the network's size, and the same seed gives
// the same table.
func TestLookupModel(t *testing.T) {
	a, b := LookupTable(), LookupTable()
	for _, n := range []int{100, 1000, 10000, 100000} {
		if err := LookupRow(a, n, 300, 1); err != nil {
			t.Fatal(err)
		}
		if err := LookupRow(b, n, 300, 1); err != nil {
			t.Fatal(err)
		}
	}
	t.Log("\n" + a.String())
	if a.String() != b.String() {
		t.Errorf("seed 1: two runs differ:\n%s\n%s", a, b)
	}
	for i := range a.Rows {
		if found := a.Float(i, "found"); found != 300 {
			t.Errorf("%s nodes: %v of 300 lookups found the provider", a.Rows[i][0], found)
		}
		if hops := a.Float(i, "hops_mean"); hops > 4 {
			t.Errorf("%s nodes: %v rounds a lookup, want at most 4", a.Rows[i][0], hops)
		}
	}
}
