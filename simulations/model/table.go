package model

import (
	"math"
	"slices"

	"spindle.dev/simulations/report"
)

// DurabilityTable returns an empty table of the churn model.
func DurabilityTable() *report.Table {
	return &report.Table{
		Title: "model-churn: files readable after T hours of churn (event-driven model)",
		Cols:  []string{"nodes", "files", "r", "repair_h", "hours", "readable_pct", "surviving_pct", "pushes_per_block", "holders_mean"},
	}
}

// DurabilityRows adds a row for every r and repair interval at n nodes.
func DurabilityRows(t *report.Table, n, files, blocks int, rs []int, repair []float64, hours float64, c Churn, seed uint64) error {
	for _, rep := range repair {
		for _, r := range rs {
			res, err := Durability(DurabilityConfig{Nodes: n, Files: files, Blocks: blocks, Replicas: r, Hours: hours, Repair: rep, Churn: c, Seed: seed})
			if err != nil {
				return err
			}
			t.Add(n, files, r, rep, hours, 100*res.Readable, 100*res.Surviving,
				float64(res.Pushed)/float64(files*blocks), res.Holders)
		}
	}
	return nil
}

// LookupTable returns an empty table of the lookup model.
func LookupTable() *report.Table {
	return &report.Table{
		Title: "model-lookup: provider lookups (event-driven Kademlia model, k = 20, α = 10)",
		Cols:  []string{"nodes", "log10_nodes", "lookups", "found", "hops_mean", "hops_p99", "queried_mean"},
	}
}

// LookupRow adds the row of n nodes.
func LookupRow(t *report.Table, n, lookups int, seed uint64) error {
	res, err := Lookup(LookupConfig{Nodes: n, Lookups: lookups, Seed: seed})
	if err != nil {
		return err
	}
	hops := slices.Sorted(slices.Values(res.Hops))
	p99 := 0
	if len(hops) > 0 {
		p99 = hops[max((99*len(hops)+99)/100-1, 0)]
	}
	t.Add(n, math.Log10(float64(n)), lookups, res.Found, MeanInt(res.Hops), p99, MeanInt(res.Queried))
	return nil
}

// CodedTable returns an empty table of the model under codes.
func CodedTable() *report.Table {
	return &report.Table{
		Title: "model-ec: copies against stripes on one churn schedule (event-driven model)",
		Cols: []string{"nodes", "files", "avail", "code", "repair_h", "hours", "readable_pct", "min_readable_pct",
			"lost_files", "repair_x", "repair_fetchall_x", "disk_x", "disk_end_x"},
	}
}

// CodedRows adds a row for every repair interval and code at n nodes
// under churn c. repair_x is the bytes repair moved over the run per
// byte of data; disk_x is the bytes stored per byte of data when each
// piece is held once, disk_end_x what is held at the end.
func CodedRows(t *report.Table, n, files, blocks int, codes []Code, repair []float64, hours float64, c Churn, seed uint64) error {
	for _, rep := range repair {
		for _, code := range codes {
			res, err := Coded(CodedConfig{Nodes: n, Files: files, Blocks: blocks, Code: code, Hours: hours, Repair: rep, Churn: c, Seed: seed})
			if err != nil {
				return err
			}
			t.Add(n, files, c.Availability, code.String(), rep, hours, 100*res.Readable, 100*res.MinReadable,
				res.Lost, res.Repair, res.RepairFetchAll, code.Disk(), res.Disk)
		}
	}
	return nil
}
