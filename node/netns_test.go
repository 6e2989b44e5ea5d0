//go:build linux

package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest/netns"
)

// The tests in this file run nodes in Linux network namespaces joined by
// slow, lossy links or behind NAT. A socket belongs to the namespace of
// the thread that opened it, and libp2p opens sockets on any thread of
// the process, so each node is this test binary run again, inside
// its namespace, as TestNetnsRole with the role in the environment
// (SPINDLE_NETNS_ROLE and the settings below); the test itself runs the
// links (see netns.DelayLine) and reads what the nodes report. They need
// root and the ip command, and skip without them.

// netnsEnv is the prefix of the settings a node run by these tests reads.
const netnsEnv = "SPINDLE_NETNS_"

// netnsBlock returns block i of a file made from seed: 1 MiB of
// pseudo-random bytes, which both ends make for themselves.
func netnsBlock(seed uint64, i int) []byte {
	var key [32]byte
	copy(key[:], fmt.Sprintf("%d/%d", seed, i))
	data := make([]byte, spindle.MaxBlockSize)
	rand.NewChaCha8(key).Read(data)
	return data
}

// netnsRefs returns the refs of the n blocks of the file made from seed.
func netnsRefs(seed uint64, n int) []spindle.Ref {
	var out []spindle.Ref
	for i := range n {
		out = append(out, blocks.RefOf(netnsBlock(seed, i)))
	}
	return out
}

// A netnsProc is a node run by the tests in a namespace.
type netnsProc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   syncBuffer // What it printed, both streams.
	done  chan struct{}
	err   error // Once done is closed.
}

// startNetns runs a node in ns with the role and settings given (KEY=value,
// KEY without the prefix). The node stops when the test ends.
func startNetns(t testing.TB, ns *netns.NS, name, role string, settings ...string) *netnsProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &netnsProc{name: name, done: make(chan struct{})}
	p.cmd = ns.Command(exe, "-test.run=^TestNetnsRole$", "-test.count=1", "-test.timeout=30m")
	p.cmd.Env = append(os.Environ(), netnsEnv+"ROLE="+role)
	for _, s := range settings {
		p.cmd.Env = append(p.cmd.Env, netnsEnv+s)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stdin.Close() // A serving node stops when its input ends.
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() || os.Getenv("SPINDLE_NETNS_LOG") == "1" {
			t.Logf("output of %s:\n%s", name, p.out.String())
		}
	})
	return p
}

// addr waits until the node has written its address to file, and
// returns it.
func (p *netnsProc) addr(t testing.TB, file string) string {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if data, err := os.ReadFile(file); err == nil && len(data) > 0 {
			return string(data)
		}
		select {
		case <-p.done:
			t.Fatalf("%s ended before it was ready: %v\n%s", p.name, p.err, p.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 3 minutes:\n%s", p.name, p.out.String())
		}
	}
}

// waitLine waits, at most limit, until the node has printed a line
// starting with prefix, and returns it.
func (p *netnsProc) waitLine(t testing.TB, prefix string, limit time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		for line := range strings.Lines(p.out.String()) {
			if strings.HasPrefix(line, prefix) {
				return strings.TrimSpace(line)
			}
		}
		select {
		case <-p.done:
			t.Fatalf("%s ended before it printed %q: %v\n%s", p.name, prefix, p.err, p.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not printed %q after %v:\n%s", p.name, prefix, limit, p.out.String())
		}
	}
}

// result waits for the node to end, at most limit, and returns the
// figures it reported (lines "RESULT key=value ...").
func (p *netnsProc) result(t testing.TB, limit time.Duration) map[string]string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("%s still running after %v:\n%s", p.name, limit, p.out.String())
	}
	if p.err != nil {
		t.Fatalf("%s failed: %v\n%s", p.name, p.err, p.out.String())
	}
	res := make(map[string]string)
	for line := range strings.Lines(p.out.String()) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "RESULT "); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				res[k] = v
			}
		}
	}
	return res
}

func atoiOr(s string, def int) int {
	if n, err := strconv.Atoi(s); err == nil {
		return n
	}
	return def
}

// TestNetnsRole is a node run by the tests in this file in a namespace;
// run otherwise, it skips. Its settings (each prefixed SPINDLE_NETNS_):
//
//	ROLE      serve: hold BLOCKS blocks made from SEED, announce them,
//	          write ADDRFILE, and run until the input ends;
//	          relay: the same, offering relay service;
//	          get: fetch those blocks through the network (see getRole);
//	          reach: reach the node PEER behind NAT (see reachRole).
//	HOME      the node's home; LISTEN its one listen address.
//	BOOT      the addresses to join through, comma-separated.
//	CACHE     the node's cache of fetched blocks, bytes (-1: none).
//	VERBOSE   1: a serving node prints its reachability, addresses and
//	          routing table size every 5 s (shown if the test fails, or
//	          with SPINDLE_NETNS_LOG=1).
func TestNetnsRole(t *testing.T) {
	role := os.Getenv(netnsEnv + "ROLE")
	if role == "" {
		t.Skip("a node that the namespace tests run in a namespace of their own")
	}
	if role == "rawsend" || role == "rawrecv" {
		rawRole(t, role) // Plain TCP, no node.
		return
	}
	get := func(k string) string { return os.Getenv(netnsEnv + k) }
	cfg := Config{
		Home:      get("HOME"),
		Listen:    []string{get("LISTEN")},
		Writers:   []string{"all"},
		NoPortMap: true,
		Relay:     role == "relay",
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	}
	if c := get("CACHE"); c != "" {
		cfg.CacheBytes = int64(atoiOr(c, 0))
	}
	if b := get("BOOT"); b != "" {
		for _, a := range strings.Split(b, ",") {
			cfg.Bootstrap = append(cfg.Bootstrap, spindle.PeerAddr(a))
		}
	}
	ctx := context.Background()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	n, err := New(sctx, cfg)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	seed := uint64(atoiOr(get("SEED"), 1))
	count := atoiOr(get("BLOCKS"), 0)
	switch role {
	case "serve", "relay":
		var refs []spindle.Ref
		for i := range count {
			ref, err := n.store.Put(ctx, netnsBlock(seed, i))
			if err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
		if len(refs) > 0 {
			if err := n.replica.Announce(refs...); err != nil {
				t.Fatal(err)
			}
		}
		addr := fmt.Sprintf("%s/p2p/%s", cfg.Listen[0], n.Host().ID())
		if err := spindle.ReplaceFile(get("ADDRFILE"), []byte(addr), 0o600, false); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		if os.Getenv(netnsEnv+"VERBOSE") == "1" {
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Go(func() {
				for {
					fmt.Fprintf(os.Stderr, "%s reachability %s addrs %v dht %d\n", time.Now().Format(time.TimeOnly), n.reachability(), n.Host().Addrs(), n.DHT().RoutingTable().Size())
					select {
					case <-done:
						return
					case <-time.After(5 * time.Second):
					}
				}
			})
		}
		io.Copy(io.Discard, os.Stdin)
		close(done)
	case "get":
		getRole(t, n, seed, count)
	case "reach":
		reachRole(t, n, seed, count)
	default:
		t.Fatalf("unknown role %q", role)
	}
}

// getRole waits until every block made from seed has WANT providers,
// then fetches them all through the node's replicated store (the path of
// every get through a node that lacks the blocks) and reports
// "RESULT bytes=… seconds=…". With CHECK=1 it compares every block with
// what it should be. With RESUME=1 the first fetch stops halfway, as a
// client that gave up would, and a second fetch gets the whole file:
// it reports cached= (blocks the first left in the node's cache) and
// refetched= (blocks the second fetched through the network).
func getRole(t *testing.T, n *Node, seed uint64, count int) {
	ctx := context.Background()
	refs := netnsRefs(seed, count)
	want := atoiOr(os.Getenv(netnsEnv+"WANT"), 1)
	check := os.Getenv(netnsEnv+"CHECK") == "1"
	deadline := time.Now().Add(5 * time.Minute)
	var (
		wg    sync.WaitGroup
		slots = make(chan struct{}, 16)
		mu    sync.Mutex
		short []string
	)
	for _, ref := range refs {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			c, _ := cid.Decode(string(ref))
			for {
				fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				provs, err := n.DHT().FindProviders(fctx, c)
				cancel()
				if err == nil && len(provs) >= want {
					return
				}
				if time.Now().After(deadline) {
					mu.Lock()
					short = append(short, fmt.Sprintf("%d providers of %s found, want %d (%v)", len(provs), ref, want, err))
					mu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if len(short) > 0 {
		t.Fatalf("%d blocks short of providers after 5 minutes; the first: %s", len(short), short[0])
	}
	errStop := errors.New("stopped halfway")
	got := make([]bool, count)
	fetch := func(stopAt int) error {
		done := 0
		return n.replica.GetMany(ctx, refs, func(i int, data []byte) error {
			if check && !bytes.Equal(data, netnsBlock(seed, i)) {
				return fmt.Errorf("block %d has the wrong bytes", i)
			}
			got[i] = true
			if done++; done == stopAt {
				return errStop
			}
			return nil
		})
	}
	switch os.Getenv(netnsEnv + "RESUME") {
	case "cut":
		// The test cuts the link once half the blocks are here, and mends
		// it when the first fetch has failed.
		in := bufio.NewReader(os.Stdin)
		var done int
		err := n.replica.GetMany(ctx, refs, func(i int, data []byte) error {
			if check && !bytes.Equal(data, netnsBlock(seed, i)) {
				return fmt.Errorf("block %d has the wrong bytes", i)
			}
			if done++; done == count/2 {
				fmt.Println("HALF")
			}
			return nil
		})
		if err == nil {
			t.Fatal("the first fetch succeeded across a cut link")
		}
		before := n.replica.Stats().CachedBlocks
		fmt.Printf("FAILED %d blocks cached: %v\n", before, oneLine(err.Error()))
		if _, err := in.ReadString('\n'); err != nil {
			t.Fatalf("waiting for the link to be mended: %v", err)
		}
		// The node rejoins through the peer it joined through, as it
		// would through those it remembers.
		deadline := time.Now().Add(2 * time.Minute)
		for n.join(ctx, n.boot, true) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("cannot reach the bootstrap peer again after the link was mended")
			}
			time.Sleep(time.Second)
		}
		for n.DHT().RoutingTable().Size() == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the routing table stays empty after the link was mended")
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Right after the mend, on a loaded machine, the provider lookup
		// may still time out (the far side's dial backoff, a routing table
		// of one): a user would try again, and so does the test, a few
		// times. What a failed try fetched stays cached, so the count of
		// blocks fetched after the cut is the same either way.
		start := time.Now()
		for try := 1; ; try++ {
			err := fetch(-1)
			if err == nil {
				break
			}
			if try == 3 {
				t.Fatalf("second fetch, try %d: %v", try, err)
			}
			fmt.Fprintf(os.Stderr, "second fetch, try %d: %v\n", try, err)
		}
		after := n.replica.Stats().CachedBlocks
		fmt.Printf("RESULT cached=%d refetched=%d seconds=%.2f\n", before, after-before, time.Since(start).Seconds())
	case "1":
		if err := fetch(count / 2); !errors.Is(err, errStop) {
			t.Fatalf("first fetch: %v", err)
		}
		before := n.replica.Stats().CachedBlocks
		if before < count/2 {
			t.Fatalf("%d blocks cached after the first fetch stopped at %d", before, count/2)
		}
		clear(got)
		start := time.Now()
		if err := fetch(-1); err != nil {
			t.Fatalf("second fetch: %v", err)
		}
		secs := time.Since(start).Seconds()
		after := n.replica.Stats().CachedBlocks
		fmt.Printf("RESULT cached=%d refetched=%d seconds=%.2f\n", before, after-before, secs)
	default:
		start := time.Now()
		if err := fetch(-1); err != nil {
			t.Fatal(err)
		}
		secs := time.Since(start).Seconds()
		var served []string
		for p, n := range n.replica.Served() {
			served = append(served, fmt.Sprintf("%s:%d", p, n))
		}
		st := n.replica.Stats()
		fmt.Printf("RESULT bytes=%d seconds=%.3f served=%s hedged=%d stolen=%d cut=%d\n", count*spindle.MaxBlockSize, secs, strings.Join(served, ","), st.FetchHedged, st.FetchStolen, st.FetchCut)
	}
	for i, ok := range got {
		if !ok {
			t.Fatalf("block %d not delivered", i)
		}
	}
}

// reachRole reaches the node PEER, which is behind NAT (its address
// PRIVATE cannot be dialled from here): it waits until the DHT gives a
// relayed address for it (/p2p-circuit, through a relay's reservation),
// drops every other way to it, connects through that address, and gets
// the blocks made from seed from it. It reports how it is connected
// in the end: "RESULT via=relay" or "via=direct" (hole punching turned the
// relayed connection into a direct one).
func reachRole(t *testing.T, n *Node, seed uint64, count int) {
	ctx := context.Background()
	pid, err := peer.Decode(os.Getenv(netnsEnv + "PEER"))
	if err != nil {
		t.Fatal(err)
	}
	h := n.Host()
	// The private address is not reachable from here.
	priv, err := ma.NewMultiaddr(os.Getenv(netnsEnv + "PRIVATE"))
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(network.WithForceDirectDial(ctx, "test"), 5*time.Second)
	err = h.Connect(dctx, peer.AddrInfo{ID: pid, Addrs: []ma.Multiaddr{priv}})
	cancel()
	if err == nil {
		t.Fatalf("dialled %s at its private address %s: the NAT lets connections in", pid, priv)
	}

	var relayed []ma.Multiaddr
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	for len(relayed) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no relayed address of %s after 5 minutes; it has %v", pid, h.Peerstore().Addrs(pid))
		}
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ai, err := n.DHT().FindPeer(fctx, pid)
		cancel()
		if err == nil {
			for _, a := range ai.Addrs {
				if _, err := a.ValueForProtocol(ma.P_CIRCUIT); err == nil {
					relayed = append(relayed, a)
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "%s relayed address found after %v\n", time.Now().Format(time.TimeOnly), time.Since(start).Round(time.Second))
	// Only the relayed way, and no connection the peer opened itself.
	h.Network().ClosePeer(pid)
	h.Peerstore().ClearAddrs(pid)
	// A dial the swarm gave up on at once ("no addresses": the relayed
	// addresses were dropped while the peer was being closed, as happens
	// on a loaded machine) is tried again, three times in all.
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = h.Connect(cctx, peer.AddrInfo{ID: pid, Addrs: relayed})
		cancel()
		if err == nil || try == 3 || !strings.Contains(err.Error(), "no addresses") {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("connect to %s through %v: %v", pid, relayed, err)
	}
	r := p2p.NewRemoteStore(h, pid)
	defer r.Close()
	for i, ref := range netnsRefs(seed, count) {
		gctx, cancel := context.WithTimeout(ctx, time.Minute)
		data, err := r.Get(gctx, ref)
		cancel()
		if err != nil {
			t.Fatalf("block %d from %s: %v", i, pid, err)
		}
		if !bytes.Equal(data, netnsBlock(seed, i)) {
			t.Fatalf("block %d from %s has the wrong bytes", i, pid)
		}
	}
	// Hole punching, if it works through this NAT, runs in the
	// background once the relayed connection is up.
	via := "relay"
	for range 100 {
		for _, c := range h.Network().ConnsToPeer(pid) {
			if _, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT); err != nil {
				via = "direct"
			}
		}
		if via == "direct" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Printf("RESULT via=%s relayed=%s\n", via, relayed[0])
}

// netnsFileBlocks is the size in blocks of the file moved across the
// slow link: 64 MiB (long enough for loss and delay to show in the rate;
// docs/performance.md gives the time), or SPINDLE_NETNS_MIB.
func netnsFileBlocks() int {
	return atoiOr(os.Getenv("SPINDLE_NETNS_MIB"), 64)
}

// slowLink makes two namespaces joined by a link of 100 ms round trip,
// 1% loss each way and 20 Mbit/s each way, and returns them with the
// addresses of their ends.
func slowLink(t *testing.T) (a, b *netns.NS, aIP, bIP string, line *netns.DelayLine) {
	netns.Check(t)
	netns.Need(t, "tc")
	p := netns.Prefix()
	a, b = netns.New(t, p+"a"), netns.New(t, p+"b")
	aIP, bIP = "10.9.0.1", "10.9.0.2"
	line = netns.NewDelayLine(t, a, aIP, b, bIP, netns.Link{Delay: 50 * time.Millisecond, Loss: 0.01, Rate: "20mbit"})
	return a, b, aIP, bIP, line
}

// Two nodes across a link of 100 ms round trip, 1% loss and 20 Mbit/s:
// a file held by one is fetched whole, byte for byte, through the
// other's replicated store, however long it takes (the timeouts scale
// with the bytes asked for).
func TestNetnsSlowLink(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a file across a slow link for a minute or more; skipped with -short")
	}
	t.Parallel() // Each in namespaces of its own, mostly waiting on slow links.
	a, b, aIP, bIP, line := slowLink(t)
	blocks := netnsFileBlocks()
	dir := t.TempDir()
	addrFile := dir + "/addr"
	srv := startNetns(t, a, "holder", "serve", "HOME="+dir+"/a", "LISTEN=/ip4/"+aIP+"/tcp/4001", "ADDRFILE="+addrFile, "BLOCKS="+strconv.Itoa(blocks), "SEED=7")
	addr := srv.addr(t, addrFile)
	get := startNetns(t, b, "getter", "get", "HOME="+dir+"/b", "LISTEN=/ip4/"+bIP+"/tcp/4001", "BOOT="+addr, "BLOCKS="+strconv.Itoa(blocks), "SEED=7", "CHECK=1")
	res := get.result(t, 25*time.Minute)
	secs, _ := strconv.ParseFloat(res["seconds"], 64)
	st := line.Stats()
	t.Logf("%d MiB across 100 ms RTT, 1%% loss, 20 Mbit/s in %.1f s (%.2f MB/s); the line carried %d packets and dropped %d",
		blocks, secs, float64(blocks*spindle.MaxBlockSize)/secs/1e6, st.Packets, st.Dropped)
	if st.Dropped == 0 {
		t.Errorf("the line dropped no packets at 1%% loss")
	}
}

// A get across the slow link that stops halfway leaves the blocks it
// fetched in the node's cache; the get of the whole file then fetches
// only the others through the network.
func TestNetnsResume(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a file across a slow link; skipped with -short")
	}
	t.Parallel() // Each in namespaces of its own, mostly waiting on slow links.
	a, b, aIP, bIP, _ := slowLink(t)
	const blocks = 8
	dir := t.TempDir()
	addrFile := dir + "/addr"
	srv := startNetns(t, a, "holder", "serve", "HOME="+dir+"/a", "LISTEN=/ip4/"+aIP+"/tcp/4001", "ADDRFILE="+addrFile, "BLOCKS="+strconv.Itoa(blocks), "SEED=8")
	addr := srv.addr(t, addrFile)
	get := startNetns(t, b, "getter", "get", "HOME="+dir+"/b", "LISTEN=/ip4/"+bIP+"/tcp/4001", "BOOT="+addr, "BLOCKS="+strconv.Itoa(blocks), "SEED=8", "CHECK=1", "RESUME=1")
	res := get.result(t, 15*time.Minute)
	cached, refetched := atoiOr(res["cached"], -1), atoiOr(res["refetched"], -1)
	if cached < blocks/2 || refetched != blocks-cached {
		t.Fatalf("first get left %d blocks; the second fetched %d; want at least %d and the rest (%d)", cached, refetched, blocks/2, blocks-cached)
	}
	t.Logf("the first get stopped with %d of %d blocks; the second fetched %d", cached, blocks, refetched)
}

// A get across the slow link loses the link halfway (every packet
// dropped) and fails; once the link is back, the node rejoins and the get
// of the whole file fetches only the blocks the first did not bring.
func TestNetnsResumeAfterCut(t *testing.T) {
	if testing.Short() {
		t.Skip("moves a file across a slow link and waits for it to fail; skipped with -short")
	}
	t.Parallel() // Each in namespaces of its own, mostly waiting on slow links.
	a, b, aIP, bIP, line := slowLink(t)
	const blocks = 24 // 12 MiB after the half: seconds for the test to cut the link in time.
	dir := t.TempDir()
	addrFile := dir + "/addr"
	srv := startNetns(t, a, "holder", "serve", "HOME="+dir+"/a", "LISTEN=/ip4/"+aIP+"/tcp/4001", "ADDRFILE="+addrFile, "BLOCKS="+strconv.Itoa(blocks), "SEED=12")
	addr := srv.addr(t, addrFile)
	get := startNetns(t, b, "getter", "get", "HOME="+dir+"/b", "LISTEN=/ip4/"+bIP+"/tcp/4001", "BOOT="+addr, "BLOCKS="+strconv.Itoa(blocks), "SEED=12", "CHECK=1", "RESUME=cut")
	get.waitLine(t, "HALF", 10*time.Minute)
	line.Cut(true)
	failed := get.waitLine(t, "FAILED", 10*time.Minute)
	line.Cut(false)
	t.Logf("with the link cut: %s", failed)
	if _, err := io.WriteString(get.stdin, "mended\n"); err != nil {
		t.Fatal(err)
	}
	res := get.result(t, 10*time.Minute)
	cached, refetched := atoiOr(res["cached"], -1), atoiOr(res["refetched"], -1)
	if cached < blocks/2 || cached >= blocks || refetched != blocks-cached {
		t.Fatalf("the first get left %d blocks; the second fetched %d; want at least %d, not all, and the rest (%d)", cached, refetched, blocks/2, blocks-cached)
	}
	t.Logf("the link was cut with %d of %d blocks fetched; the get after it was mended fetched %d", cached, blocks, refetched)
}

// A node behind a NAT (an nftables masquerade rule on its router), which
// nothing outside can connect to, is reached anyway: it reserves a slot
// on a relay (a node run with Relay), advertises the relayed address in
// the DHT, and a third node connects through it and gets blocks.
func TestNetnsNAT(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for AutoNAT and the relay client to act; skipped with -short")
	}
	t.Parallel() // Each in namespaces of its own, mostly waiting on slow links.
	netns.Check(t)
	netns.Need(t, "nft")
	// home (the node behind NAT) -- router (masquerade) -- out (the
	// relay, which also routes) -- far (the node that reaches home).
	// The relay and the far node are in namespaces of their own because
	// an AutoNAT server does not dial back an address with its own IP.
	p := netns.Prefix()
	home, router, out, far := netns.New(t, p+"h"), netns.New(t, p+"r"), netns.New(t, p+"o"), netns.New(t, p+"f")
	_, routerOut := netns.Veth(t, out, "11.20.0.2/24", router, "11.20.0.1/24")
	netns.Veth(t, out, "11.30.0.1/24", far, "11.30.0.2/24")
	netns.Veth(t, router, "192.168.7.1/24", home, "192.168.7.2/24")
	out.Forward(t)
	far.Route(t, "default", "11.30.0.1")
	router.Route(t, "default", "11.20.0.2")
	home.Route(t, "default", "192.168.7.1")
	router.Masquerade(t, routerOut)
	// The outside networks have public addresses (11.0.0.0/8, which no
	// one announces): AutoNAT does not test private ones, and a relay
	// offers its service only once AutoNAT finds it public. The
	// namespaces have no way out, so nothing leaves this machine.

	dir := t.TempDir()
	relay := startNetns(t, out, "relay", "relay", "HOME="+dir+"/r", "LISTEN=/ip4/11.20.0.2/tcp/4001", "ADDRFILE="+dir+"/raddr", "VERBOSE=1")
	raddr := relay.addr(t, dir+"/raddr")
	const blocks = 2
	priv := "/ip4/192.168.7.2/tcp/4001"
	behind := startNetns(t, home, "behind NAT", "serve", "HOME="+dir+"/h", "LISTEN="+priv, "BOOT="+raddr, "ADDRFILE="+dir+"/haddr", "BLOCKS="+strconv.Itoa(blocks), "SEED=9", "VERBOSE=1")
	haddr := behind.addr(t, dir+"/haddr")
	id := haddr[strings.LastIndex(haddr, "/")+1:]
	reach := startNetns(t, far, "outside", "reach", "HOME="+dir+"/f", "LISTEN=/ip4/11.30.0.2/tcp/4001", "BOOT="+raddr, "PEER="+id, "PRIVATE="+priv, "BLOCKS="+strconv.Itoa(blocks), "SEED=9")
	res := reach.result(t, 8*time.Minute)
	if res["via"] == "" {
		t.Fatalf("the outside node reported nothing:\n%s", reach.out.String())
	}
	t.Logf("the node behind NAT was reached through %s, and is connected %s in the end", res["relayed"], res["via"])
}

// BenchmarkNetnsGet1GiB gets a 1 GiB file through a node that holds none
// of its blocks, from 1 provider and from 3 that each hold all of it,
// every node a process in a namespace of its own. Each provider's link
// to the getter is limited by tbf to SPINDLE_NETNS_RATE (200mbit unless
// set; "none" for no limit), so that each provider is a bottleneck of its
// own, as machines at home are behind their uplinks: fetching from
// several at once is then visible as such, where on loopback all nodes
// would share this machine's two cores. The getter's namespace routes
// between the providers'. SPINDLE_NETNS_BENCH_MIB changes the size.
// The figure is the getter's, from its first request to its last block,
// and is reported as MB/s.
func BenchmarkNetnsGet1GiB(b *testing.B) {
	for _, providers := range []int{1, 3} {
		b.Run(fmt.Sprintf("providers=%d", providers), func(b *testing.B) { benchNetnsGet(b, providers) })
	}
}

func benchNetnsGet(b *testing.B, providers int) {
	netns.Check(b)
	rate := os.Getenv("SPINDLE_NETNS_RATE")
	if rate == "" {
		rate = "200mbit"
	}
	if rate != "none" {
		netns.Need(b, "tc")
	}
	size := atoiOr(os.Getenv("SPINDLE_NETNS_BENCH_MIB"), 1024)
	p := netns.Prefix()
	g := netns.New(b, p+"g")
	g.Forward(b)
	dir := b.TempDir()
	var boot []string
	for i := range providers {
		ns := netns.New(b, fmt.Sprintf("%sp%d", p, i))
		dev, _ := netns.Veth(b, ns, fmt.Sprintf("10.80.%d.2/24", i), g, fmt.Sprintf("10.80.%d.1/24", i))
		ns.Route(b, "default", fmt.Sprintf("10.80.%d.1", i))
		if rate != "none" {
			ns.Rate(b, dev, rate)
		}
		settings := []string{fmt.Sprintf("HOME=%s/p%d", dir, i), fmt.Sprintf("LISTEN=/ip4/10.80.%d.2/tcp/4001", i),
			fmt.Sprintf("ADDRFILE=%s/addr%d", dir, i), "BLOCKS=" + strconv.Itoa(size), "SEED=10"}
		if i > 0 {
			settings = append(settings, "BOOT="+boot[0])
		}
		proc := startNetns(b, ns, fmt.Sprintf("provider %d", i), "serve", settings...)
		boot = append(boot, proc.addr(b, fmt.Sprintf("%s/addr%d", dir, i)))
	}
	var mbps []float64
	for b.Loop() {
		get := startNetns(b, g, "getter", "get", "HOME="+b.TempDir(), "LISTEN=/ip4/10.80.0.1/tcp/4002", "BOOT="+strings.Join(boot, ","),
			"BLOCKS="+strconv.Itoa(size), "SEED=10", "WANT="+strconv.Itoa(providers), "CACHE=-1")
		res := get.result(b, 20*time.Minute)
		secs, err := strconv.ParseFloat(res["seconds"], 64)
		if err != nil || secs <= 0 {
			b.Fatalf("the getter reported %v", res)
		}
		mbps = append(mbps, float64(size*spindle.MaxBlockSize)/secs/1e6)
	}
	var sum float64
	for _, m := range mbps {
		sum += m
	}
	b.ReportMetric(sum/float64(len(mbps)), "MB/s")
}
