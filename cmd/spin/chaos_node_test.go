//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// TestChaos runs five spin node processes (A, B and C the key cluster's
// members, D and E using it), four users whose trees have two dir hosts
// each, clients that write and read all the time, a FUSE mount and a
// spin ui of one user, and a schedule of faults made from -chaos.seed:
// SIGTERM, SIGKILL and SIGSTOP/SIGCONT of nodes, restarts in every order
// (all five at once too), and link cuts (see chaos_schedule_test.go).
// It checks, during the run and at its end:
//
//   - every acknowledged write is readable, byte-identical, through every
//     node within chaosSettle of the last heal, and no read ever returns
//     bytes that no write put (this covers lost blocks: a file with a
//     block lost cannot be read whole);
//   - no node reports a directory log damaged (the schedule injects no
//     damage), nor panics, nor exits unless told to;
//   - the key cluster's history of registrations, updates and
//     leader-routed lookups is linearizable (porcupine, with the model of
//     keyraft/linearizable_test.go, made nondeterministic for the calls
//     whose outcome the client could not learn);
//   - the mount and the UI answer within their bounds.
//
// A failing run prints its seed and schedule; -chaos.seed replays it. The
// default run is the short one of .ci/run; -chaos.duration=60m is a long
// one, and -chaos.report=docs/chaos.md adds its row to the table there.
func TestChaos(t *testing.T) {
	sched := newChaosSchedule(*chaosSeed, *chaosDuration)
	if err := sched.checkHealed(); err != nil {
		t.Fatalf("%v\n%v", err, sched)
	}
	newSpinUser(t) // Skips under -short, or where spin cannot run as a process.
	r := &chaosRun{t: t, sched: sched, rng: rand.New(rand.NewPCG(*chaosSeed, 1))}
	t.Logf("%v", sched)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d; replay with: go test -count=1 -run TestChaos ./cmd/spin/ -v -chaos.seed=%d -chaos.duration=%v\n%v", sched.Seed, sched.Seed, sched.Duration, sched)
		}
	})
	r.setup()
	r.run()
}

var (
	chaosSeed     = flag.Uint64("chaos.seed", 1, "TestChaos: seed of the schedule of faults and of the clients' choices")
	chaosDuration = flag.Duration("chaos.duration", 90*time.Second, "TestChaos: how long faults are injected (the short run of .ci/run takes the default; a long run: 60m)")
	chaosReport   = flag.String("chaos.report", "", "TestChaos: file (docs/chaos.md) to which a row of the run's results is added")
)

const (
	chaosUsers = 4
	// chaosSettle is how soon after the last heal every acknowledged
	// write must be readable through every node.
	chaosSettle = 30 * time.Second
	// chaosOpTimeout bounds each put and get of the clients.
	chaosOpTimeout = 10 * time.Second
	// chaosMountTimeout is the mount's -timeout, the bound of each of its
	// operations; a stat and a read of a small file are a few of them.
	chaosMountTimeout = 5 * time.Second
	chaosMountBound   = 4*chaosMountTimeout + 10*time.Second
	// chaosUIBound bounds a request to the UI, which has no timeout of
	// its own: longer than any fault of the schedule lasts.
	chaosUIBound = 30 * time.Second
	// chaosReady bounds a node's start, from launch to its address file.
	chaosReady = 2 * time.Minute
)

// dirHostsOf names each user's two dir hosts: sequencer, then mirror.
var chaosDirHosts = [chaosUsers][2]int{{0, 3}, {3, 1}, {4, 2}, {1, 4}}

// The node that the mount's and the UI's user reaches everything through.
const chaosUINode = 4

type chaosRun struct {
	t      *testing.T
	sched  *chaosSchedule
	rng    *rand.Rand // For the setup; each loop has its own.
	nodes  []*clusterNode
	cutter *linkCutter // Nil where links cannot be cut.
	users  []*chaosUser
	keys   *chaosKeys
	begin  time.Time // Of the schedule.

	mount   string // The user's mount point, or "" if no mount.
	uiURL   string // The UI's address, or "" if no UI.
	stopped chan struct{}

	mu         sync.Mutex // Guards the fields below.
	violations []string
	expected   [len(chaosNodes)]bool     // The node's exit is expected (we signalled it).
	logs       [len(chaosNodes)][]string // Every log file of each node.
	scanned    map[string]int64          // Log file → bytes scanned.
	skipped    []string                  // Fault kinds skipped here, and why.
	errClasses map[string]int            // Failed operations by what failed and how.
	state      [len(chaosNodes)]string   // The fault in force on each node: "", down, stop or cut.
	stateSince [len(chaosNodes)]time.Time
	mirrorOnly map[string][2]int // Fault of the first dir host → reads served, failed.
	calmFails  []string          // Operations that failed with no fault in force.

	// calmSince is when the last episode ended (UnixNano), or 0 while
	// one runs.
	calmSince atomic.Int64

	faults, skippedFaults                          atomic.Int64
	writes, writeErrs, reads, readErrs, staleReads atomic.Int64
	keyOps, keyErrs, mountChecks, uiChecks, uiErrs atomic.Int64
	mountErrs, checks, finals, damageScans         atomic.Int64
}

// violate records a broken invariant.
func (r *chaosRun) violate(format string, args ...any) {
	msg := fmt.Sprintf("+%.1fs: ", time.Since(r.begin).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.violations = append(r.violations, msg)
	r.mu.Unlock()
	r.t.Log("VIOLATION " + msg)
}

func (r *chaosRun) logf(format string, args ...any) {
	r.t.Logf("+%.1fs: %s", time.Since(r.begin).Seconds(), fmt.Sprintf(format, args...))
}

// A chaosUser is a user whose tree has two dir hosts, with a client in
// this process through each node.
type chaosUser struct {
	name    spindle.UserName
	sp      *spinUser
	keys    *pack.Keys
	clients []*client.Client // One per node.

	mu    sync.Mutex // Guards files and names.
	files map[spindle.PathName]*chaosFile
	names []spindle.PathName // In the order first written.
}

// A chaosFile is every content ever put to one name.
type chaosFile struct {
	versions [][32]byte // Every content put, acknowledged or not, in order.
	acked    int        // Index of the newest acknowledged put; -1: none.
}

// setup starts the nodes and the users, their clients, the mount and the
// UI.
func (r *chaosRun) setup() {
	t := r.t
	r.begin = time.Now()
	r.scanned = map[string]int64{}
	r.errClasses = map[string]int{}
	r.mirrorOnly = map[string][2]int{}
	r.stopped = make(chan struct{})
	var why string
	r.cutter, why = newLinkCutter(t, len(chaosNodes))
	if r.cutter == nil {
		r.skip("link cuts: " + why)
	}
	ports := freeLowPorts(t, len(chaosNodes))
	prep := func(i int) func(*clusterNode) {
		return func(n *clusterNode) {
			n.listen = fmt.Sprintf("/ip4/127.0.0.1/tcp/%d", ports[i])
			if r.cutter != nil {
				n.sysProc = r.cutter.sysProc(i)
			}
		}
	}
	i := 0
	nodes, _ := keyClusterWith(t, func(n *clusterNode) { prep(i)(n); i++ })
	var members []string
	for _, n := range nodes {
		members = append(members, n.addr)
	}
	for i := 3; i < len(chaosNodes); i++ {
		n := &clusterNode{op: newSpinUser(t), args: []string{"-keyserver", strings.Join(members, ",")}}
		prep(i)(n)
		n.start(t)
		nodes = append(nodes, n)
	}
	r.nodes = nodes
	for i, n := range nodes {
		r.logs[i] = []string{n.log}
		r.watchExit(i)
	}
	r.logf("nodes up: %s", r.nodeList())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for u := range chaosUsers {
		cu := &chaosUser{name: spindle.UserName(fmt.Sprintf("u%d@example.com", u)), sp: newSpinUser(t), files: map[spindle.PathName]*chaosFile{}}
		seq, mirror := nodes[chaosDirHosts[u][0]], nodes[chaosDirHosts[u][1]]
		home := seq
		if u == 0 {
			home = nodes[chaosUINode] // The mount's and the UI's node.
		}
		cu.sp.run("init", "-node", home.addr, string(cu.name))
		keys, err := pack.Load(filepath.Join(cu.sp.home, "spin", "keys"))
		if err != nil {
			t.Fatal(err)
		}
		cu.keys = keys
		c := r.dial(ctx, cu, chaosDirHosts[u][0])
		if err := c.Signup(ctx); err != nil {
			t.Fatalf("signup of %s through %s: %v", cu.name, seq.addr, err)
		}
		if err := c.SetDirHosts(ctx, []spindle.PeerAddr{spindle.PeerAddr(seq.addr), spindle.PeerAddr(mirror.addr)}); err != nil {
			t.Fatalf("spin user -dirs of %s: %v", cu.name, err)
		}
		if _, err := c.MakeDirectory(ctx, spindle.PathName(string(cu.name)+"/chaos")); err != nil {
			t.Fatalf("mkdir %s/chaos: %v", cu.name, err)
		}
		cu.clients = make([]*client.Client, len(nodes))
		cu.clients[chaosDirHosts[u][0]] = c
		for i := range nodes {
			if cu.clients[i] == nil {
				cu.clients[i] = r.dial(ctx, cu, i)
			}
		}
		r.users = append(r.users, cu)
	}
	r.logf("users signed up, each with two dir hosts: %v", chaosDirHosts)
	r.keys = newChaosKeys(t, r)
	r.startMount()
	r.startUI()
}

// nodeList names each node with its address.
func (r *chaosRun) nodeList() string {
	var s []string
	for i, n := range r.nodes {
		s = append(s, fmt.Sprintf("%c=%s", chaosNodes[i], n.addr))
	}
	return strings.Join(s, " ")
}

// skip records a part of the harness that cannot run here.
func (r *chaosRun) skip(why string) {
	r.mu.Lock()
	r.skipped = append(r.skipped, why)
	r.mu.Unlock()
	r.t.Log("not checked here: " + why)
}

// dial returns a client of cu through node i, with a key log and a file
// of directory heads of its own.
func (r *chaosRun) dial(ctx context.Context, cu *chaosUser, i int) *client.Client {
	r.t.Helper()
	dir := r.t.TempDir()
	c, err := client.Dial(ctx, client.Config{
		Keys:     cu.keys,
		Node:     spindle.PeerAddr(r.nodes[i].addr),
		KeyLog:   filepath.Join(dir, "keylog"),
		DirHeads: filepath.Join(dir, "dirheads"),
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		r.t.Fatalf("%s: dial node %c: %v", cu.name, chaosNodes[i], err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// watchExit reports node i's exit if nobody asked for it.
func (r *chaosRun) watchExit(i int) {
	n := r.nodes[i]
	cmd, exited, log := n.cmd, n.exited, n.log
	go func() {
		<-exited
		r.mu.Lock()
		expected := r.expected[i]
		r.mu.Unlock()
		select {
		case <-r.stopped:
			return
		default:
		}
		if !expected {
			r.violate("node %c exited by itself (%v); its log: %s", chaosNodes[i], cmd.ProcessState, log)
		}
	}()
}

// run runs the schedule with the clients, then checks the end state.
func (r *chaosRun) run() {
	t := r.t
	stopLoad := make(chan struct{})
	var load sync.WaitGroup
	for u, cu := range r.users {
		load.Go(func() { r.writeLoop(u, cu, stopLoad) })
		load.Go(func() { r.readLoop(u, cu, stopLoad) })
	}
	for k := range chaosKeyClients {
		load.Go(func() { r.keys.loop(k, stopLoad) })
	}
	if r.mount != "" || r.uiURL != "" {
		load.Go(func() { r.watchUILoop(stopLoad) })
	}
	scanDone := make(chan struct{})
	var scan sync.WaitGroup
	scan.Go(func() {
		for {
			r.scanLogs()
			select {
			case <-scanDone:
				return
			case <-time.After(2 * time.Second):
			}
		}
	})

	r.begin = time.Now()
	r.calmSince.Store(time.Now().UnixNano())
	for i, e := range r.sched.Episodes {
		if !r.episode(i, e) {
			break
		}
	}
	lastHeal := time.Now()
	r.logf("last heal; every acknowledged write must be readable through every node by +%.1fs", time.Since(r.begin).Seconds()+chaosSettle.Seconds())
	close(stopLoad)
	load.Wait()
	r.finalReads(lastHeal.Add(chaosSettle))
	r.finalUI(lastHeal.Add(chaosSettle))
	r.finalStatus()
	close(scanDone)
	scan.Wait()
	r.scanLogs()
	r.keys.check()
	close(r.stopped)

	r.mu.Lock()
	violations := slices.Clone(r.violations)
	r.mu.Unlock()
	ops := r.writes.Load() + r.reads.Load() + r.keyOps.Load() + r.mountChecks.Load() + r.uiChecks.Load() + r.finals.Load()
	summary := fmt.Sprintf("chaos: seed %d, %v: %d operations (%d writes, %d failed; %d reads, %d failed, %d stale; %d key ops, %d failed; %d mount and %d UI checks; %d final reads), %d faults (%d skipped), %d invariant checks, %d violations",
		r.sched.Seed, time.Since(r.begin).Round(time.Second), ops, r.writes.Load(), r.writeErrs.Load(), r.reads.Load(), r.readErrs.Load(), r.staleReads.Load(),
		r.keyOps.Load(), r.keyErrs.Load(), r.mountChecks.Load(), r.uiChecks.Load(), r.finals.Load(),
		r.faults.Load(), r.skippedFaults.Load(), r.checks.Load(), len(violations))
	t.Log(summary)
	r.mu.Lock()
	for _, c := range slices.Sorted(maps.Keys(r.mirrorOnly)) {
		t.Logf("reads while the first dir host was %s (2s or more) and the mirror up: %d served, %d failed", c, r.mirrorOnly[c][0], r.mirrorOnly[c][1])
	}
	r.mu.Unlock()
	r.logErrors()
	if *chaosReport != "" {
		if err := addChaosRow(*chaosReport, r.sched, ops, r.faults.Load(), r.checks.Load(), len(violations)); err != nil {
			t.Errorf("-chaos.report: %v", err)
		}
	}
	if len(violations) > 0 {
		t.Errorf("%d invariant violations with seed %d:\n%s", len(violations), r.sched.Seed, strings.Join(violations, "\n"))
	}
	if r.writes.Load()-r.writeErrs.Load() == 0 || r.reads.Load()-r.readErrs.Load() == 0 {
		t.Errorf("the run did not exercise the invariants: %s", summary)
	}
}

// calmGrace is how long after an episode's end an operation must begin
// to count as one in calm weather.
const calmGrace = 10 * time.Second

// calmToken returns, for an operation that begins now, a token that is
// not zero if no fault has been in force for calmGrace.
func (r *chaosRun) calmToken() int64 {
	c := r.calmSince.Load()
	if c == 0 || time.Now().UnixNano() < c+int64(calmGrace) {
		return 0
	}
	return c
}

var (
	peerIDs = regexp.MustCompile(`12D3KooW[1-9A-HJ-NP-Za-km-z]+`)
	numbers = regexp.MustCompile(`[0-9]{2,}`)
)

// failed counts a failed operation by what failed and how; token is its
// calmToken, and a failure in calm weather is kept to be shown.
func (r *chaosRun) failed(what string, token int64, err error) {
	msg := oneLineErr(err.Error())
	class := what + ": " + numbers.ReplaceAllString(peerIDs.ReplaceAllString(msg, "PEER"), "N")
	if len(class) > 160 {
		class = class[:160] + "..."
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errClasses[class]++
	if token != 0 && r.calmSince.Load() == token {
		r.calmFails = append(r.calmFails, fmt.Sprintf("+%.1fs %s: %s", time.Since(r.begin).Seconds(), what, msg))
	}
}

// logErrors logs the failed operations by kind, most frequent first, and
// those that failed in calm weather.
func (r *chaosRun) logErrors() {
	r.mu.Lock()
	defer r.mu.Unlock()
	classes := slices.Collect(maps.Keys(r.errClasses))
	slices.SortFunc(classes, func(a, b string) int { return r.errClasses[b] - r.errClasses[a] })
	for i, c := range classes {
		if i == 12 {
			r.t.Logf("  ... and %d more kinds", len(classes)-i)
			break
		}
		r.t.Logf("  %4d × %s", r.errClasses[c], c)
	}
	r.t.Logf("%d operations failed more than %v after the last fault was healed", len(r.calmFails), calmGrace)
	for i, f := range r.calmFails {
		if i == 20 {
			r.t.Logf("  ... and %d more", len(r.calmFails)-i)
			break
		}
		r.t.Logf("  %s", f)
	}
}

// episode runs one episode of the schedule, and waits until every node it
// restarted is ready. It reports false if the run cannot go on.
func (r *chaosRun) episode(i int, e chaosEpisode) bool {
	start := time.Now()
	if ahead := e.Start - time.Since(r.begin); ahead > 0 {
		time.Sleep(ahead)
		start = time.Now()
	}
	r.logf("episode %d: %s", i+1, e.Name)
	r.calmSince.Store(0)
	defer func() { r.calmSince.Store(time.Now().UnixNano()) }()
	started := map[int]bool{}
	for _, a := range e.Actions {
		if d := time.Until(start.Add(a.At - e.Start)); d > 0 {
			time.Sleep(d)
		}
		if !r.act(a) {
			return false
		}
		if a.Do == "start" {
			started[a.Node] = true
		}
	}
	var wg sync.WaitGroup
	ok := atomic.Bool{}
	ok.Store(true)
	for n := range started {
		wg.Go(func() {
			if err := r.nodes[n].waitReady(chaosReady); err != nil {
				r.violate("episode %d: node %c: %v", i+1, chaosNodes[n], err)
				ok.Store(false)
			}
		})
	}
	wg.Wait()
	return ok.Load()
}

// act does one action of the schedule.
func (r *chaosRun) act(a chaosAction) bool {
	n := r.nodes[a.Node]
	name := chaosNodes[a.Node]
	if a.isFault() {
		r.faults.Add(1)
	}
	defer func() {
		st := map[string]string{"term": "down", "kill": "down", "stop": "stop", "cut": "cut"}[a.Do]
		r.mu.Lock()
		r.state[a.Node], r.stateSince[a.Node] = st, time.Now()
		r.mu.Unlock()
	}()
	signal := func(sig syscall.Signal) {
		if err := n.cmd.Process.Signal(sig); err != nil {
			r.violate("%v: node %c: %v", sig, name, err)
		}
	}
	switch a.Do {
	case "term", "kill":
		r.mu.Lock()
		r.expected[a.Node] = true
		r.mu.Unlock()
		sig := syscall.SIGKILL
		if a.Do == "term" {
			sig = syscall.SIGTERM
		}
		signal(sig)
		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			r.violate("node %c did not exit within 30s of %v; killed", name, sig)
			n.cmd.Process.Kill()
			n.wait()
		}
	case "stop":
		signal(syscall.SIGSTOP)
	case "cont":
		signal(syscall.SIGCONT)
	case "cut", "heal":
		if r.cutter == nil {
			if a.Do == "cut" {
				r.skippedFaults.Add(1)
			}
			return true
		}
		if err := r.cutter.set(a.Node, a.Do == "cut"); err != nil {
			r.violate("%s of node %c: %v", a.Do, name, err)
			return false
		}
		if a.Do == "cut" && !r.cutter.checked {
			// The first cut is tried: where cgroups cannot be matched,
			// the test says so and cuts no more.
			hostport := strings.TrimPrefix(n.addr, "/ip4/")
			hostport, _, _ = strings.Cut(hostport, "/p2p/")
			hostport = strings.Replace(hostport, "/tcp/", ":", 1)
			if !r.cutter.works(hostport) {
				r.cutter.set(a.Node, false)
				r.cutter = nil
				r.skippedFaults.Add(1)
				r.skip("link cuts: a cut node still accepted a connection (nftables cannot match its cgroup here)")
				return true
			}
			r.cutter.checked = true
		}
	case "start":
		if err := n.launch(r.t); err != nil {
			r.violate("restart of node %c: %v", name, err)
			return false
		}
		r.mu.Lock()
		r.expected[a.Node] = false
		r.logs[a.Node] = append(r.logs[a.Node], n.log)
		r.mu.Unlock()
		r.watchExit(a.Node)
	}
	return true
}

// writeLoop writes files of random content as user u, through a node
// chosen at random each time, and remembers every put; a fifth of the
// puts overwrite a file written before.
func (r *chaosRun) writeLoop(u int, cu *chaosUser, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(r.sched.Seed, uint64(100+u)))
	for i := 0; i < 100000; i++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(400+rng.IntN(800)) * time.Millisecond):
		}
		cu.mu.Lock()
		var name spindle.PathName
		if len(cu.names) > 0 && rng.IntN(5) == 0 {
			name = cu.names[rng.IntN(len(cu.names))]
		} else {
			name = spindle.PathName(fmt.Sprintf("%s/chaos/f%05d", cu.name, i))
			cu.files[name] = &chaosFile{acked: -1}
			cu.names = append(cu.names, name)
		}
		size := 1 + rng.IntN(16<<10)
		if rng.IntN(10) == 0 {
			size = 1 + rng.IntN(3*spindle.MaxBlockSize/2) // One or two blocks.
		}
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		f := cu.files[name]
		f.versions = append(f.versions, sha256.Sum256(data))
		v := len(f.versions) - 1
		cu.mu.Unlock()

		node := rng.IntN(len(r.nodes))
		token := r.calmToken()
		ctx, cancel := context.WithTimeout(context.Background(), chaosOpTimeout)
		_, err := cu.clients[node].Put(ctx, name, bytes.NewReader(data), 0, nil)
		cancel()
		r.writes.Add(1)
		if err != nil {
			r.writeErrs.Add(1)
			r.failed(fmt.Sprintf("put through %c", chaosNodes[node]), token, err)
			continue
		}
		cu.mu.Lock()
		if v > f.acked {
			f.acked = v
		}
		cu.mu.Unlock()
	}
}

// readLoop reads back files user u wrote, through a node chosen at random
// each time: what it gets must be a version some put wrote, and not one
// older than the newest acknowledged when the read began, or the read is
// stale (counted, not a violation: a mirror may lag while the sequencer
// is down, until chaosSettle after the last heal).
func (r *chaosRun) readLoop(u int, cu *chaosUser, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(r.sched.Seed, uint64(200+u)))
	for range 100000 {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(150+rng.IntN(400)) * time.Millisecond):
		}
		name, from, ok := cu.pick(rng)
		if !ok {
			continue
		}
		node := rng.IntN(len(r.nodes))
		token := r.calmToken()
		before := r.mirrorCase(u, node)
		data, err := readFile(cu.clients[node], name)
		if before != "" && r.mirrorCase(u, node) == before {
			r.mu.Lock()
			c := r.mirrorOnly[before]
			if err == nil {
				c[0]++
			} else {
				c[1]++
			}
			r.mirrorOnly[before] = c
			r.mu.Unlock()
			if err != nil && c[1] <= 3 {
				r.logf("%s read through node %c while its first dir host %c was %s and its mirror %c up: %s", cu.name, chaosNodes[node], chaosNodes[chaosDirHosts[u][0]], before, chaosNodes[chaosDirHosts[u][1]], oneLineErr(err.Error()))
			}
		}
		r.reads.Add(1)
		if err != nil {
			r.readErrs.Add(1)
			r.failed(fmt.Sprintf("get through %c", chaosNodes[node]), token, err)
			continue
		}
		r.checks.Add(1)
		switch cu.judge(name, from, data) {
		case "stale":
			r.staleReads.Add(1)
		case "foreign":
			r.violate("%s read through node %c: %d bytes that no put of %s wrote", cu.name, chaosNodes[node], len(data), name)
		}
	}
}

// mirrorCase returns, for a read of user u's tree through node via, the
// fault in force on the tree's first dir host if that fault has been in
// force for 2s, while the mirror and via have none; else "". Such a read
// should be served by the mirror.
func (r *chaosRun) mirrorCase(u, via int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	first, mirror := chaosDirHosts[u][0], chaosDirHosts[u][1]
	if r.state[first] == "" || r.state[mirror] != "" || r.state[via] != "" || time.Since(r.stateSince[first]) < 2*time.Second {
		return ""
	}
	return r.state[first]
}

// pick returns a file with an acknowledged put, chosen at random, and the
// index of that put.
func (cu *chaosUser) pick(rng *rand.Rand) (spindle.PathName, int, bool) {
	cu.mu.Lock()
	defer cu.mu.Unlock()
	for range 10 {
		if len(cu.names) == 0 {
			break
		}
		name := cu.names[rng.IntN(len(cu.names))]
		if f := cu.files[name]; f.acked >= 0 {
			return name, f.acked, true
		}
	}
	return "", 0, false
}

// judge says what data, read from name in a read that began when the put
// of index from was the newest acknowledged, is: "ok" (that put or a
// later one), "stale" (an earlier one) or "foreign" (no put's).
func (cu *chaosUser) judge(name spindle.PathName, from int, data []byte) string {
	sum := sha256.Sum256(data)
	cu.mu.Lock()
	defer cu.mu.Unlock()
	f := cu.files[name]
	if slices.Contains(f.versions[from:], sum) {
		return "ok"
	}
	if slices.Contains(f.versions[:from], sum) {
		return "stale"
	}
	return "foreign"
}

// readFile reads name through c, within chaosOpTimeout.
func readFile(c *client.Client, name spindle.PathName) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), chaosOpTimeout)
	defer cancel()
	f, err := c.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// finalReads checks, until deadline, that every file with an
// acknowledged put reads, through a new client on every node, as that put
// or a later one wrote it.
func (r *chaosRun) finalReads(deadline time.Time) {
	var wg sync.WaitGroup
	for _, cu := range r.users {
		for node := range r.nodes {
			wg.Go(func() {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				defer cancel()
				var c *client.Client
				defer func() {
					if c != nil {
						c.Close()
					}
				}()
				cu.mu.Lock()
				todo := map[spindle.PathName]int{}
				for name, f := range cu.files {
					if f.acked >= 0 {
						todo[name] = f.acked
					}
				}
				cu.mu.Unlock()
				last := map[spindle.PathName]string{}
				for len(todo) > 0 && time.Now().Before(deadline) {
					if c == nil {
						var err error
						dir := r.t.TempDir()
						c, err = client.Dial(ctx, client.Config{Keys: cu.keys, Node: spindle.PeerAddr(r.nodes[node].addr), KeyLog: filepath.Join(dir, "keylog"), DirHeads: filepath.Join(dir, "dirheads"), Logger: slog.New(slog.DiscardHandler)})
						if err != nil {
							c = nil
							for name := range todo {
								last[name] = "dial: " + err.Error()
							}
							time.Sleep(time.Second)
							continue
						}
					}
					for name, from := range todo {
						data, err := readFile(c, name)
						r.finals.Add(1)
						if err != nil {
							last[name] = err.Error()
							continue
						}
						r.checks.Add(1)
						switch v := cu.judge(name, from, data); v {
						case "ok":
							delete(todo, name)
						default:
							last[name] = fmt.Sprintf("%s content (%d bytes)", v, len(data))
						}
					}
					if len(todo) > 0 {
						time.Sleep(500 * time.Millisecond)
					}
				}
				shown := 0
				for name := range todo {
					if shown++; shown > 3 {
						r.violate("%s through node %c: %d more acknowledged files unreadable", cu.name, chaosNodes[node], len(todo)-3)
						break
					}
					r.violate("%s through node %c: acknowledged %s not readable %v after the last heal: %s", cu.name, chaosNodes[node], name, chaosSettle, oneLineErr(last[name]))
				}
			})
		}
	}
	wg.Wait()
}

func oneLineErr(s string) string { return strings.Join(strings.Fields(s), " ") }

// finalUI checks that the mount and the UI, after the last heal, serve a
// file of u0 as written, by deadline or within their bounds after it.
func (r *chaosRun) finalUI(deadline time.Time) {
	cu := r.users[0]
	name, from, ok := cu.pick(rand.New(rand.NewPCG(r.sched.Seed, 500)))
	if !ok {
		return
	}
	try := func(what string, bound time.Duration, read func() ([]byte, error)) {
		var last string
		for {
			done := make(chan struct{})
			var data []byte
			var err error
			go func() {
				defer close(done)
				data, err = read()
			}()
			r.checks.Add(1)
			select {
			case <-done:
			case <-time.After(bound):
				r.violate("after the last heal, %s did not answer a read of %s within %v", what, name, bound)
				return
			}
			if err != nil {
				last = oneLineErr(err.Error())
			} else {
				v := cu.judge(name, from, data)
				if v == "ok" {
					return
				}
				last = fmt.Sprintf("%s content (%d bytes)", v, len(data))
			}
			if time.Now().After(deadline) {
				r.violate("%s does not serve %s %v after the last heal: %s", what, name, chaosSettle, last)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	if r.mount != "" {
		try("the mount", chaosMountBound, func() ([]byte, error) { return os.ReadFile(filepath.Join(r.mount, string(name))) })
	}
	if r.uiURL != "" {
		hc := &http.Client{Timeout: chaosUIBound}
		try("the UI", chaosUIBound+time.Second, func() ([]byte, error) {
			resp, err := hc.Get(r.uiURL + "f/" + string(name))
			if err != nil {
				return nil, err
			}
			defer resp.Body.Close()
			data, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", resp.Status, data)
			}
			return data, err
		})
	}
}

// finalStatus asks every node, through spin node status, whether it
// holds a damaged log.
func (r *chaosRun) finalStatus() {
	for i, n := range r.nodes {
		out, err := n.op.command("node", "status", "-home", n.home()).CombinedOutput()
		r.checks.Add(1)
		if err != nil {
			r.violate("spin node status of node %c: %v\n%s", chaosNodes[i], err, out)
			continue
		}
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "log damaged:") {
				r.violate("node %c: spin node status: %s", chaosNodes[i], strings.TrimSpace(line))
			}
		}
	}
}

// scanLogs reads what the nodes logged since the last scan: a line that
// reports damage, or a panic, is a violation.
func (r *chaosRun) scanLogs() {
	r.mu.Lock()
	logs := r.logs
	r.mu.Unlock()
	for i, files := range logs {
		for _, file := range files {
			r.mu.Lock()
			off := r.scanned[file]
			r.mu.Unlock()
			f, err := os.Open(file)
			if err != nil {
				continue
			}
			f.Seek(off, io.SeekStart)
			br := bufio.NewReader(f)
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					break // A partial line is read again next time.
				}
				off += int64(len(line))
				if strings.Contains(line, "damaged") || strings.HasPrefix(line, "panic:") || strings.HasPrefix(line, "fatal error:") {
					r.violate("node %c logged (%s): %s", chaosNodes[i], file, strings.TrimSpace(line))
				}
			}
			f.Close()
			r.mu.Lock()
			r.scanned[file] = off
			r.mu.Unlock()
		}
		r.checks.Add(1)
		r.damageScans.Add(1)
	}
}

// startMount mounts u0's namespace with spin mount, where FUSE can be
// mounted (/dev/fuse, as root).
func (r *chaosRun) startMount() {
	if _, err := os.Stat("/dev/fuse"); err != nil || os.Geteuid() != 0 {
		r.skip("the FUSE mount: spin mount mounts by itself only as root, with /dev/fuse")
		return
	}
	u := r.users[0].sp
	dir := filepath.Join(r.t.TempDir(), "mnt")
	os.Mkdir(dir, 0o755)
	cmd := u.command("mount", "-t", chaosMountTimeout.String(), "-cache", r.t.TempDir(), dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	r.t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		exec.Command("umount", "-l", dir).Run()
	})
	root := filepath.Join(dir, string(r.users[0].name))
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(root, "chaos")); err == nil {
			break
		}
		select {
		case <-done:
			r.t.Fatalf("spin mount exited: %v\n%s", cmd.ProcessState, out.String())
		default:
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("spin mount: %s not there a minute on\n%s", root, out.String())
		}
	}
	r.mount = dir
	r.logf("mounted %s on %s", r.users[0].name, dir)
}

// startUI starts spin ui as u0 and waits for its address.
func (r *chaosRun) startUI() {
	u := r.users[0].sp
	cmd := u.command("ui", "-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "http://") {
				urls <- strings.TrimSpace(sc.Text())
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case r.uiURL = <-urls:
	case <-time.After(time.Minute):
		r.t.Fatalf("spin ui printed no address within a minute:\n%s", stderr.String())
	}
	r.logf("spin ui of %s at %s", r.users[0].name, r.uiURL)
}

// watchUILoop reads a file of u0 through the mount and through the UI
// every few seconds; each must answer within its bound, and what it
// answers with must be a version some put wrote.
func (r *chaosRun) watchUILoop(stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(r.sched.Seed, 300))
	cu := r.users[0]
	hc := &http.Client{Timeout: chaosUIBound}
	var mountBusy, uiBusy atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	for range 100000 {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(1500+rng.IntN(2000)) * time.Millisecond):
		}
		name, from, ok := cu.pick(rng)
		if !ok {
			continue
		}
		token := r.calmToken()
		if r.mount != "" && mountBusy.CompareAndSwap(false, true) {
			// A hung FUSE call cannot be cancelled: it is not waited for
			// past its bound, and no other starts while it hangs.
			done := make(chan struct{})
			var data []byte
			var err error
			go func() {
				defer mountBusy.Store(false)
				defer close(done)
				data, err = os.ReadFile(filepath.Join(r.mount, string(name)))
			}()
			r.mountChecks.Add(1)
			r.checks.Add(1)
			select {
			case <-done:
				if err != nil {
					r.mountErrs.Add(1)
					r.failed("mount read", token, err)
				} else if cu.judge(name, from, data) == "foreign" {
					r.violate("the mount read %s as %d bytes that no put wrote", name, len(data))
				}
			case <-time.After(chaosMountBound):
				r.violate("the mount (-timeout %v) did not answer a read of %s within %v", chaosMountTimeout, name, chaosMountBound)
			}
		}
		if r.uiURL != "" && uiBusy.CompareAndSwap(false, true) {
			wg.Go(func() {
				defer uiBusy.Store(false)
				r.uiChecks.Add(1)
				r.checks.Add(1)
				resp, err := hc.Get(r.uiURL + "f/" + string(name))
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						r.violate("the UI did not answer a GET of %s within %v", name, chaosUIBound)
					} else {
						r.uiErrs.Add(1)
						r.failed("UI GET", token, err)
					}
					return
				}
				data, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err == nil && resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("%s: %s", resp.Status, data)
				}
				if err != nil {
					r.uiErrs.Add(1)
					r.failed("UI GET", token, err)
					return
				}
				if cu.judge(name, from, data) == "foreign" {
					r.violate("the UI served %s as %d bytes that no put wrote", name, len(data))
				}
			})
		}
	}
}

// freeLowPorts returns n loopback TCP ports free now, below the range
// the kernel picks the source ports of outgoing connections from, so that
// no connection takes a node's port while the node is down.
func freeLowPorts(t *testing.T, n int) []int {
	lo := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		fmt.Sscan(string(b), &lo)
	}
	var ports []int
	for p := max(lo-12000, 1024) + rand.IntN(8000); len(ports) < n && p < lo; p++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		ports = append(ports, p)
	}
	if len(ports) < n {
		t.Fatalf("found %d free ports below %d, want %d", len(ports), lo, n)
	}
	return ports
}

// addChaosRow adds a row with a run's results to the table in file, a
// path from the module's root unless absolute.
func addChaosRow(file string, s *chaosSchedule, ops, faults, checks int64, violations int) error {
	if !filepath.IsAbs(file) {
		root, err := filepath.Abs("../..") // go test runs in cmd/spin.
		if err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			return fmt.Errorf("no module root at %s for %s: %v", root, file, err)
		}
		file = filepath.Join(root, file)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		data = []byte(chaosTableHead)
	} else if err != nil {
		return err
	}
	row := fmt.Sprintf("| `go test -count=1 -run TestChaos ./cmd/spin/ -chaos.seed=%d -chaos.duration=%v` | %d | %d | %d | %d |\n", s.Seed, s.Duration, ops, faults, checks, violations)
	return os.WriteFile(file, append(data, row...), 0o644)
}

const chaosTableHead = `# Chaos runs

Rows added by TestChaos (cmd/spin/chaos_node_test.go) with
-chaos.report=docs/chaos.md: five spin node processes, four users with
two dir hosts each, a mount and a UI, and a schedule of faults made from
the seed (see chaos_schedule_test.go). Operations are the clients' puts,
gets, key-cluster calls, mount and UI reads and the final reads; faults
are the signals and link cuts injected; checks are the invariant checks
made; violations are the broken invariants.

| command | operations | faults | checks | violations |
|---|---|---|---|---|
`
