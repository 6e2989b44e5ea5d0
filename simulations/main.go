// Command simulations runs Spindle at network scale: the real components
// over libp2p's in-memory network (package sim), and an event-driven
// model beyond one process (package model). Each scenario prints a small
// table, writes it as CSV and draws its main curve as a PNG in -out.
//
//	go run ./simulations -scenario lookup -nodes 50,100,200,300 -seed 1
//	go run ./simulations -scenario churn -nodes 40 -r 1,2,3,4,5 -repair 0,1,6
//	go run ./simulations -scenario churn -nodes 80 -avail 0.5,0.7 -codes r3,4+2 -repair 1 -hours 24
//	go run ./simulations -scenario keys -seed 1
//	go run ./simulations -scenario hot -nodes 201
//	go run ./simulations -scenario model-churn -nodes 10000,100000
//	go run ./simulations -scenario model-lookup -nodes 100,1000,10000,100000
//	go run ./simulations -scenario model-ec -nodes 1000,10000 -avail 0.3,0.5,0.7 -codes r2,r3,4+2,6+3
//
// The same seed gives the same inputs (identities, latencies, schedule,
// workload) and, for the model, the same table.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"spindle.dev/simulations/model"
	"spindle.dev/simulations/report"
	"spindle.dev/simulations/sim"
)

const usage = `usage: go run ./simulations -scenario NAME [flags]

Scenarios:
  lookup        provider lookups over real nodes with 20–200 ms RTT links
  churn         files under churn against r and the repair interval (real nodes);
                with -codes, copies against stripes beside the model
  keys          a 5-member key cluster whose members are killed and restarted
  hot           many readers fetch one file at once, with and without caching
  model-churn   the churn model at sizes beyond one process
  model-lookup  the lookup model at sizes beyond one process
  model-ec      whole copies against erasure-coded stripes in the churn model

Flags:
`

func main() {
	var (
		scenario = flag.String("scenario", "", "scenario to run (see above)")
		nodes    = flag.String("nodes", "", "network sizes, comma separated (default per scenario)")
		seed     = flag.Uint64("seed", 1, "random seed")
		out      = flag.String("out", "simout", "directory for the CSV and PNG files")
		lookups  = flag.Int("lookups", 500, "lookup: lookups per size")
		files    = flag.Int("files", 100, "churn: files written at the start")
		blocks   = flag.Int("blocks", 2, "churn: blocks per file")
		rs       = flag.String("r", "1,2,3,4,5", "churn: replication factors")
		repair   = flag.String("repair", "0,1", "churn: repair intervals in hours (0: no repair)")
		hours    = flag.Float64("hours", 48, "churn: simulated hours")
		avail    = flag.String("avail", "0.5", "churn: availability of a machine (model-ec: a list)")
		codes    = flag.String("codes", "r2,r3,r4,4+2,6+3,10+4", "model-ec, and churn if set: codes, rN (N copies) or K+M (stripes)")
		shape    = flag.Float64("shape", 0.5, "churn: Weibull shape of session lengths")
		online   = flag.Float64("session", 8, "churn: mean online session in hours")
		lifetime = flag.Float64("lifetime", 0, "churn: mean hours until a machine leaves for good (0: never)")
		rounds   = flag.Int("rounds", 10, "keys: kill-and-restart rounds")
	)
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, usage)
		flag.PrintDefaults()
	}
	flag.Parse()
	codesSet := false
	flag.Visit(func(f *flag.Flag) { codesSet = codesSet || f.Name == "codes" })
	avails := floats(*avail)
	churn := model.Churn{Availability: avails[0], Shape: *shape, MeanOnline: *online, MeanLifetime: *lifetime}
	if len(avails) > 1 && *scenario != "model-ec" && !(*scenario == "churn" && codesSet) {
		fatal(fmt.Errorf("-avail %s: only model-ec and churn with -codes take a list", *avail))
	}
	parseCodes := func() []model.Code {
		var cs []model.Code
		for f := range strings.SplitSeq(*codes, ",") {
			c, err := model.ParseCode(strings.TrimSpace(f))
			if err != nil {
				fatal(err)
			}
			cs = append(cs, c)
		}
		return cs
	}
	sizes := func(def string) []int {
		if *nodes == "" {
			return ints(def)
		}
		return ints(*nodes)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	var (
		t   *report.Table
		err error
	)
	name := *scenario
	switch name {
	case "lookup":
		t = sim.LookupTable()
		err = sim.Lookup(ctx, sim.LookupConfig{Nodes: sizes("50,100,200"), Seed: *seed, Keys: 50, Lookups: *lookups, Timeout: time.Minute}, t)
		plotErr(t.Plot(filepath.Join(*out, name+".png"), "nodes", "lat_p50_ms", "", "nodes", "lookup latency p50 (ms)"))
	case "churn":
		n := sizes("40")
		if codesSet {
			// Copies against stripes: one table, a run per availability.
			t = sim.ChurnCodesTable()
			for _, a := range avails {
				churn.Availability = a
				if err = sim.ChurnCodes(ctx, sim.ChurnConfig{Nodes: n[0], Files: *files, Blocks: *blocks, BlockSize: 16 << 10,
					Codes: parseCodes(), Repair: floats(*repair), Hours: *hours, Churn: churn, Seed: *seed}, t); err != nil {
					break
				}
			}
			break
		}
		t = sim.ChurnTable()
		err = sim.Churn(ctx, sim.ChurnConfig{Nodes: n[0], Files: *files, Blocks: *blocks, BlockSize: 16 << 10,
			Replicas: ints(*rs), Repair: floats(*repair), Hours: *hours, Churn: churn, Seed: *seed}, t)
		plotErr(t.Plot(filepath.Join(*out, name+".png"), "r", "readable_pct", "repair_h", "replication factor r", "files readable (%)"))
	case "keys":
		t = sim.KeysTable()
		err = sim.Keys(ctx, sim.KeysConfig{Members: 5, Rounds: *rounds, Seed: *seed, Dir: ""}, t)
	case "hot":
		t = sim.HotTable()
		err = sim.Hot(ctx, sim.HotConfig{Nodes: sizes("201")[0], Blocks: 8, BlockSize: 64 << 10, Seed: *seed}, t)
	case "model-churn":
		t = model.DurabilityTable()
		for _, n := range sizes("1000,10000,100000") {
			if err = model.DurabilityRows(t, n, *files*n/100, *blocks, ints(*rs), floats(*repair), *hours, churn, *seed); err != nil {
				break
			}
		}
		plotErr(t.Plot(filepath.Join(*out, name+".png"), "r", "readable_pct", "nodes,repair_h", "replication factor r", "files readable (%)"))
	case "model-ec":
		t = model.CodedTable()
		cs := parseCodes()
	all:
		for _, n := range sizes("1000,10000") {
			for _, a := range avails {
				churn.Availability = a
				if err = model.CodedRows(t, n, *files*n/100, *blocks, cs, floats(*repair), *hours, churn, *seed); err != nil {
					break all
				}
			}
		}
	case "model-lookup":
		t = model.LookupTable()
		for _, n := range sizes("100,1000,10000,100000") {
			if err = model.LookupRow(t, n, *lookups, *seed); err != nil {
				break
			}
		}
		plotErr(t.Plot(filepath.Join(*out, name+".png"), "log10_nodes", "hops_mean", "", "log10(nodes)", "lookup rounds (mean)"))
	default:
		flag.Usage()
		os.Exit(2)
	}
	if t != nil {
		t.Print(os.Stdout)
		if cerr := t.WriteCSV(filepath.Join(*out, name+".csv")); cerr != nil {
			fatal(cerr)
		}
	}
	fmt.Printf("seed %d, wall time %v, files in %s\n", *seed, time.Since(start).Round(time.Second), *out)
	if err != nil {
		fatal(fmt.Errorf("seed %d: %w", *seed, err))
	}
}

func plotErr(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "simulations: plot: %v\n", err)
	}
}

func fatal(err error) {
	fmt.Fprintf(os.Stderr, "simulations: %v\n", err)
	os.Exit(1)
}

func ints(s string) []int {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			fmt.Fprintf(os.Stderr, "simulations: bad number %q in %q\n", f, s)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}

func floats(s string) []float64 {
	var out []float64
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "simulations: bad number %q in %q\n", f, s)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}
