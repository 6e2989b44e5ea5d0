package replica_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
)

// A sink is a running simulations/hostile/sink: a sybil DHT server that
// answers every push "stored" and every has request yes, and keeps
// nothing.
type sink struct {
	id    peer.ID
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// lines passes each line written to it to fn, and keeps the last few.
type lines struct {
	mu   sync.Mutex
	part []byte
	tail []string
	fn   func(string)
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.part[:i])
		l.part = l.part[i+1:]
		if l.fn != nil {
			l.fn(line)
		}
		if l.tail = append(l.tail, line); len(l.tail) > 20 {
			l.tail = l.tail[1:]
		}
	}
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.tail, "\n")
}

// startSinks builds the hostile sink program and starts n of them, each
// joining the network through boot, and waits until each is ready.
func startSinks(t *testing.T, n int, boot spindle.PeerAddr) []*sink {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sink")
	build := exec.Command("go", "build", "-o", bin, "spindle.dev/simulations/hostile/sink")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sink: %v\n%s", err, out)
	}
	var sinks []*sink
	for range n {
		ready := make(chan peer.ID, 1)
		var id peer.ID
		out := &lines{fn: func(line string) {
			if a, ok := strings.CutPrefix(line, "addr "); ok && id == "" {
				if ai, err := p2p.ParsePeerAddr(spindle.PeerAddr(a)); err == nil {
					id = ai.ID
				}
			}
			if line == "ready" {
				ready <- id
			}
		}}
		errs := new(lines)
		cmd := exec.Command(bin, "-bootstrap", string(boot))
		cmd.Stdout, cmd.Stderr = out, errs
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting a sink: %v", err)
		}
		s := &sink{cmd: cmd, stdin: stdin}
		t.Cleanup(func() {
			// A sink exits when its input ends; one that does not is
			// killed.
			s.stdin.Close()
			done := time.AfterFunc(5*time.Second, func() { s.cmd.Process.Kill() })
			s.cmd.Wait()
			done.Stop()
		})
		select {
		case s.id = <-ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("a sink was not ready after 30 s; its stderr:\n%s", errs)
		}
		sinks = append(sinks, s)
	}
	return sinks
}

// provide has every sink announce itself as a provider of refs.
func (s *sink) provide(t *testing.T, refs []spindle.Ref) {
	t.Helper()
	for _, ref := range refs {
		if _, err := fmt.Fprintf(s.stdin, "provide %s\n", ref); err != nil {
			t.Fatalf("telling a sink to provide: %v", err)
		}
	}
}

// waitRoutingTables waits until the routing table of every node holds
// want peers.
func waitRoutingTables(t *testing.T, nodes []*node, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, nd := range nodes {
		for nd.d.RoutingTable().Size() < want {
			if time.Now().After(deadline) {
				t.Fatalf("routing table of %s holds %d of %d peers", nd.h.ID(), nd.d.RoutingTable().Size(), want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			nd.d.GetClosestPeers(ctx, string(nd.h.ID()))
			cancel()
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// pickBlocks returns n random blocks of size bytes for each of which ok
// holds of all the nodes sorted by distance to its key, nearest first.
func pickBlocks(t *testing.T, rnd *rand.Rand, all []peer.ID, n, size int, ok func(byDistance []peer.ID) bool) [][]byte {
	t.Helper()
	var out [][]byte
	for try := 0; len(out) < n; try++ {
		if try == 100000 {
			t.Fatalf("found %d of %d blocks to test with", len(out), n)
		}
		data := randomBlock(rnd, size)
		d, err := blocks.ParseRef(blocks.RefOf(data))
		if err != nil {
			t.Fatal(err)
		}
		if ok(kb.SortClosestPeers(all, kb.ConvertKey(string(d.Multihash())))) {
			out = append(out, data)
		}
	}
	return out
}

// sybilNet starts nHonest nodes configured by cfg, on disk stores, and
// nSinks sinks that join through the first, and waits until every honest
// node knows every other node. It returns the honest nodes, the sinks,
// and the IDs of all.
func sybilNet(t *testing.T, nHonest, nSinks int, cfg replica.Config) ([]*node, []*sink, []peer.ID) {
	t.Helper()
	nodes := newNetEach(t, nHonest, func(int) replica.Config { return cfg }, diskStores(t))
	sinks := startSinks(t, nSinks, p2p.Addrs(nodes[0].h)[0])
	waitRoutingTables(t, nodes, nHonest+nSinks-1)
	var all []peer.ID
	for _, s := range sinks {
		all = append(all, s.id)
	}
	for _, nd := range nodes {
		all = append(all, nd.h.ID())
	}
	return nodes, sinks, all
}

// challenge asks holder to prove it holds the block, from the first
// running node of nodes[1:] other than holder.
func challenge(nodes []*node, holder peer.ID, ref spindle.Ref, data []byte) error {
	var from *node
	for _, nd := range nodes[1:] {
		if !nd.stopped && nd.h.ID() != holder {
			from = nd
			break
		}
	}
	r := p2p.NewRemoteStore(from.h, holder)
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return r.Prove(ctx, ref, blocks.NewChallenge(data))
}

// Ten sybil sinks join a network of five honest nodes. An honest node
// the sinks crowd out of a block's nearest nodes still takes its copy;
// every copy a put counts is held by a node that proves it holds the
// block, and by no sink; after the writer's node stops, every block reads; and repair
// does not believe the sinks' yes and their provider records, but makes
// the missing copies on honest nodes.
func TestSybilSinksCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 10 sink processes; skipped with -short")
	}
	const (
		nHonest = 5
		nSinks  = 10
		nBlocks = 6
		size    = 64 << 10
	)
	nodes, sinks, all := sybilNet(t, nHonest, nSinks, repairConfig())
	// An honest node that the sinks push out of the 2r+2 nodes nearest
	// to a block's key, where a node takes pushed copies, takes one once
	// the sinks nearer than it fail its challenge: so every honest node
	// takes the copies of blocks near it, however many sinks are nearer.
	// Here a push goes straight to an honest node with at least 8 nodes
	// nearer to the block than itself (a key far from a node's ID always
	// has one).
	isHonest := make(map[peer.ID]*node)
	for _, nd := range nodes[1:] {
		isHonest[nd.h.ID()] = nd
	}
	rnd := rand.New(rand.NewPCG(27, 2))
	var far *node
	extra := pickBlocks(t, rnd, all, 1, 5000, func(byDistance []peer.ID) bool {
		for _, p := range byDistance[2*3+2:] {
			if nd := isHonest[p]; nd != nil {
				far = nd
				return true
			}
		}
		return false
	})[0]
	{
		r := p2p.NewRemoteStore(nodes[0].h, far.h.ID())
		pctx, pcancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := r.Put(pctx, extra)
		pcancel()
		r.Close()
		if err != nil || !far.has(blocks.RefOf(extra)) {
			t.Fatalf("push to an honest node with sinks nearest the block: %v; want it taken", err)
		}
	}

	datas := make([][]byte, nBlocks)
	for i := range datas {
		datas[i] = randomBlock(rnd, size)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	writer := nodes[0]
	refs := make([]spindle.Ref, nBlocks)
	for i, data := range datas {
		ref, copies, err := writer.store.PutCopies(ctx, data)
		if err != nil {
			t.Fatalf("Put: %v", err)
		}
		refs[i] = ref
		have := holders(nodes, ref)
		if copies > len(have) {
			t.Errorf("block %d: put counted %d copies; honest nodes %v hold %d", i, copies, have, len(have))
		}
		if copies != 3 {
			t.Errorf("block %d: put counted %d copies, want 3 (on honest nodes)", i, copies)
		}
		for _, h := range have[1:] {
			if err := challenge(nodes, nodes[h].h.ID(), ref, data); err != nil {
				t.Errorf("block %d: honest holder %d fails a challenge: %v", i, h, err)
			}
		}
		for _, s := range sinks[:3] {
			if err := challenge(nodes, s.id, ref, data); !errors.Is(err, p2p.ErrProofFailed) {
				t.Errorf("block %d: a sink's challenge: %v, want ErrProofFailed", i, err)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The sinks announce every block, as sybils that watch the DHT's
	// traffic for block addresses would.
	for _, s := range sinks {
		s.provide(t, refs)
	}
	for _, ref := range refs {
		waitProviders(t, nodes[1], ref, nSinks)
	}

	writer.stop()
	readAfterWriterStopped(ctx, t, nodes, nHonest, refs, datas)

	var res replica.RepairResult
	for _, nd := range nodes[1:] {
		r, err := nd.store.Repair(ctx)
		if err != nil {
			t.Fatalf("Repair: %v", err)
		}
		res.Short += r.Short
		res.Fixed += r.Fixed
	}
	if res.Short == 0 {
		t.Errorf("repair found no block short of copies with the writer gone: %+v", res)
	}
	for i, ref := range refs {
		have := holders(nodes, ref)
		if len(have) < 3 {
			t.Errorf("block %d after repair: honest running nodes %v hold it, want 3 (repair believed the sinks: %+v)", i, have, res)
		}
		for _, h := range have {
			if err := challenge(nodes, nodes[h].h.ID(), ref, datas[i]); err != nil {
				t.Errorf("block %d: honest holder %d fails a challenge after repair: %v", i, h, err)
			}
		}
	}
}

// Sybil sinks nearest to a block's key cannot talk its honest holders
// out of their copies: a holder beyond a block's home trims its copy only
// when every home node proves it holds the block, and sinks that say yes
// prove nothing.
func TestSybilSinksCannotTrimCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 10 sink processes; skipped with -short")
	}
	cfg := repairConfig()
	cfg.TrimGrace = time.Nanosecond
	nodes, sinks, all := sybilNet(t, 3, 10, cfg)
	isSink := make(map[peer.ID]bool)
	for _, s := range sinks {
		isSink[s.id] = true
	}
	// The block's home, its 3 nearest nodes, is all sinks.
	data := pickBlocks(t, rand.New(rand.NewPCG(27, 3)), all, 1, 20000, func(near []peer.ID) bool {
		return isSink[near[0]] && isSink[near[1]] && isSink[near[2]]
	})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	ref := blocks.RefOf(data)
	for _, nd := range nodes {
		if _, err := nd.local.Put(ctx, data); err != nil {
			t.Fatal(err)
		}
		if err := nd.store.Announce(ref); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range sinks {
		s.provide(t, []spindle.Ref{ref})
	}
	waitProviders(t, nodes[0], ref, len(sinks)+len(nodes)-1)

	// Two rounds on each holder: the first finds the copy beyond the
	// home, the second would trim it after the grace.
	var res replica.RepairResult
	for range 2 {
		for _, nd := range nodes {
			r, err := nd.store.Repair(ctx)
			if err != nil {
				t.Fatalf("Repair: %v", err)
			}
			res.Checked += r.Checked
			res.Trimmed += r.Trimmed
		}
	}
	if res.Checked != 2*len(nodes) {
		t.Fatalf("repair rounds checked %d blocks, want %d", res.Checked, 2*len(nodes))
	}
	if got := holders(nodes, ref); res.Trimmed != 0 || len(got) != len(nodes) {
		t.Fatalf("after repair with the block's home all sinks, honest nodes %v hold it and %d copies were trimmed; want all %d holding it", got, res.Trimmed, len(nodes))
	}
}

// A node far from a block's key refuses a push of it even after
// challenging the nodes nearer to the key: they answer honestly that they
// do not hold it, and so still count, and a pusher cannot choose which
// honest node it fills.
func TestFarNodeRefusesPush(t *testing.T) {
	nodes := newNet(t, 12, repairConfig())
	var ids []peer.ID
	byID := make(map[peer.ID]*node)
	for _, nd := range nodes {
		ids = append(ids, nd.h.ID())
		byID[nd.h.ID()] = nd
	}
	// The farthest of the nodes from the key is the 12th, with 11 nodes
	// nearer: more than the 2r+2 = 8 that make it not responsible, fewer
	// than the 16 beyond which it does not challenge them.
	data := pickBlocks(t, rand.New(rand.NewPCG(27, 4)), ids, 1, 5000, func(byDistance []peer.ID) bool {
		return byDistance[len(byDistance)-1] != nodes[0].h.ID()
	})[0]
	d, err := blocks.ParseRef(blocks.RefOf(data))
	if err != nil {
		t.Fatal(err)
	}
	all := kb.SortClosestPeers(ids, kb.ConvertKey(string(d.Multihash())))
	far := byID[all[len(all)-1]]
	r := p2p.NewRemoteStore(nodes[0].h, far.h.ID())
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := r.Put(ctx, data); !errors.Is(err, spindle.Permission) {
		t.Fatalf("push to the node farthest from the block's key: %v, want Permission", err)
	}
	if far.has(blocks.RefOf(data)) {
		t.Fatal("the farthest node took the block")
	}
}

// readAfterWriterStopped reads every block, once the writer (nodes[0])
// has stopped, through a node that holds no copy of it if there is one
// (else the last honest node), and checks its bytes.
func readAfterWriterStopped(ctx context.Context, t *testing.T, nodes []*node, nHonest int, refs []spindle.Ref, datas [][]byte) {
	t.Helper()
	for i, ref := range refs {
		reader := nodes[nHonest-1]
		for _, nd := range nodes[1:] {
			if !nd.has(ref) {
				reader = nd
				break
			}
		}
		gctx, gcancel := context.WithTimeout(ctx, 20*time.Second)
		got, err := reader.store.Get(gctx, ref)
		gcancel()
		if err != nil || !bytes.Equal(got, datas[i]) {
			t.Errorf("block %d after the writer stopped: %d bytes, %v", i, len(got), err)
		}
	}
}
