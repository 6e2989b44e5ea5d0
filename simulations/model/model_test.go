package model

import (
	"fmt"
	"testing"
)

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

func TestLookupModel(t *testing.T) {
	for _, n := range []int{100, 1000, 10000, 100000} {
		res, err := Lookup(LookupConfig{Nodes: n, Lookups: 500, Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Println(n, res.Found, MeanInt(res.Hops), MeanInt(res.Queried))
	}
}
