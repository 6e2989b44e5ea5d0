package model

import (
	"math"
	"testing"
)

func mustCode(t *testing.T, s string) Code {
	t.Helper()
	c, err := ParseCode(s)
	if err != nil {
		t.Fatal(err)
	}
	if c.String() != s {
		t.Fatalf("ParseCode(%q) prints as %q", s, c)
	}
	return c
}

func coded(t *testing.T, cfg CodedConfig) CodedResult {
	t.Helper()
	res, err := Coded(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%v avail %v repair %v lifetime %v: %+v", cfg.Code, cfg.Churn.Availability, cfg.Repair, cfg.Churn.MeanLifetime, res)
	return res
}

// TestCodedDeterministic: the same seed gives the same result, for
// copies and stripes.
func TestCodedDeterministic(t *testing.T) {
	c := homes
	c.MeanLifetime = 720
	for _, code := range []string{"r3", "4+2"} {
		cfg := CodedConfig{Nodes: 200, Files: 200, Blocks: 2, Code: mustCode(t, code), Hours: 48, Repair: 1, Churn: c, Seed: 7}
		if a, b := coded(t, cfg), coded(t, cfg); a != b {
			t.Errorf("%s, seed %d: two runs differ: %+v and %+v", code, cfg.Seed, a, b)
		}
	}
}

// TestCodedCopiesAreDurability: copies under Coded are placed and
// repaired as Durability does, so model-ec's rows of copies are
// model-churn's.
func TestCodedCopiesAreDurability(t *testing.T) {
	c := homes
	c.MeanLifetime = 720
	for _, repair := range []float64{0, 1} {
		for r := 1; r <= 4; r++ {
			d, err := Durability(DurabilityConfig{Nodes: 300, Files: 300, Blocks: 2, Replicas: r, Hours: 48, Repair: repair, Churn: c, Seed: 3})
			if err != nil {
				t.Fatal(err)
			}
			res := coded(t, CodedConfig{Nodes: 300, Files: 300, Blocks: 2, Code: Code{Replicas: r}, Hours: 48, Repair: repair, Churn: c, Seed: 3})
			if res.Readable != d.Readable || res.Lost != int(math.Round(300*(1-d.Surviving))) || res.Disk != d.Holders || res.Repair != float64(d.Pushed)/600 {
				t.Errorf("r %d, repair %v: Coded %+v, Durability %+v", r, repair, res, d)
			}
		}
	}
}

// TestCodedMoreParityNeverHurts: without repair, a stripe of K+M+1
// shards holds the K+M shards of K+M where K+M would put them, and one
// more, so at every availability it is readable at least as often and
// lost no more often, at the end and at every hour.
func TestCodedMoreParityNeverHurts(t *testing.T) {
	for _, avail := range []float64{0.3, 0.5, 0.7} {
		c := Churn{Availability: avail, Shape: 0.5, MeanOnline: 8, MeanLifetime: 240}
		var prev CodedResult
		for m := 0; m <= 4; m++ {
			res := coded(t, CodedConfig{Nodes: 300, Files: 300, Blocks: 2, Code: Code{K: 4, M: m}, Hours: 48, Churn: c, Seed: 5})
			if m > 0 && (res.Readable < prev.Readable || res.MinReadable < prev.MinReadable || res.Lost > prev.Lost) {
				t.Errorf("avail %v: 4+%d did worse than 4+%d: %+v against %+v", avail, m, m-1, res, prev)
			}
			if res.Repair != 0 || res.RepairFetchAll != 0 {
				t.Errorf("avail %v, 4+%d: repair moved bytes with no repair rounds: %+v", avail, m, res)
			}
			prev = res
		}
	}
}

// TestCodedAccounting: what the model's logic fixes whatever the code
// and the availability. Nothing is lost while no machine leaves; with no
// repair the disk holds exactly what was placed; the readable fraction
// at the end is never below the least over the run; and blocks/replica's
// way of repairing a stripe (fetch every shard left) never moves fewer
// bytes than reading K, nor more than (K+M)/(K+1) times as many (every shard but one read,
// one written).
func TestCodedAccounting(t *testing.T) {
	for _, avail := range []float64{0.3, 0.7} {
		for _, s := range []string{"r2", "r3", "4+2", "6+3", "10+4"} {
			code := mustCode(t, s)
			for _, repair := range []float64{0, 1} {
				c := Churn{Availability: avail, Shape: 0.5, MeanOnline: 8}
				res := coded(t, CodedConfig{Nodes: 300, Files: 300, Blocks: 2, Code: code, Hours: 24, Repair: repair, Churn: c, Seed: 11})
				if res.Lost != 0 {
					t.Errorf("%s avail %v repair %v: %d files lost with no machine leaving", s, avail, repair, res.Lost)
				}
				if repair == 0 && res.Disk != code.Disk() {
					t.Errorf("%s avail %v: %v bytes held per byte with no repair, want %v", s, avail, res.Disk, code.Disk())
				}
				if res.MinReadable > res.Readable {
					t.Errorf("%s avail %v repair %v: least readable %v above the end's %v", s, avail, repair, res.MinReadable, res.Readable)
				}
				if !code.Striped() && res.RepairFetchAll != res.Repair {
					t.Errorf("%s: copies count repair two ways: %+v", s, res)
				}
				if code.Striped() {
					ceiling := res.Repair * float64(code.K+code.M) / float64(code.K+1)
					if res.RepairFetchAll < res.Repair || res.RepairFetchAll > ceiling+1e-9 {
						t.Errorf("%s avail %v: fetching every shard moved %v, reading K %v", s, avail, res.RepairFetchAll, res.Repair)
					}
				}
			}
		}
	}
}
