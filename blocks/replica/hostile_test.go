package replica_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
)

// slowProviders starts simulations/hostile/slowprovider, built into a
// temporary directory: n hostile DHT servers that join through boot,
// announce themselves as providers of refs and answer gets at 64 bytes a
// second. It returns once all have announced; they stop at the end of
// the test.
func slowProviders(t *testing.T, boot spindle.PeerAddr, n int, refs []spindle.Ref) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "slowprovider")
	if out, err := exec.Command("go", "build", "-o", bin, "spindle.dev/simulations/hostile/slowprovider").CombinedOutput(); err != nil {
		t.Fatalf("go build slowprovider: %v\n%s", err, out)
	}
	var list []string
	for _, r := range refs {
		list = append(list, string(r))
	}
	cmd := exec.Command(bin, "-boot", string(boot), "-n", fmt.Sprint(n), "-rate", "64", "-life", "2m", "-refs", strings.Join(list, ","))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	t.Cleanup(func() {
		stdin.Close() // The program ends when its input does.
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	ready := make(chan error, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		providers := 0
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "provider "):
				providers++
			case line == "ready":
				ready <- nil
			}
		}
		io.Copy(io.Discard, stdout)
		err := cmd.Wait()
		ready <- fmt.Errorf("slowprovider exited (%d providers announced): %v\n%s", providers, err, stderr.String())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("slowprovider not ready after 45s")
	}
}

// publicFile returns a file of n random bytes and the refs of its blocks
// as packing plain stores them (eeintegrity alike): the file's bytes cut
// at spindle.MaxBlockSize, each named by its hash, which anyone who
// knows the file can compute before it is written.
func publicFile(rnd *rand.Rand, n int) ([][]byte, []spindle.Ref) {
	data := randomBlock(rnd, n)
	var parts [][]byte
	var refs []spindle.Ref
	for len(data) > 0 {
		k := min(len(data), spindle.MaxBlockSize)
		parts, refs = append(parts, data[:k]), append(refs, blocks.RefOf(data[:k]))
		data = data[k:]
	}
	return parts, refs
}

// waitAllProviders waits until node from finds the holder and at least
// others more providers of ref. (waitProviders finds at most 20.)
func waitAllProviders(t *testing.T, from *node, ref spindle.Ref, holder *node, others int) {
	t.Helper()
	c, err := cid.Decode(string(ref))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		found := make(map[peer.ID]bool)
		for ai := range from.d.FindProvidersAsync(ctx, c, 0) {
			found[ai.ID] = true
		}
		cancel()
		if found[holder.h.ID()] && len(found) >= others+1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s finds %d providers of %s (the holder among them: %v), want the holder and %d more", from.h.ID(), len(found), ref, found[holder.h.ID()], others)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Twenty slow providers, announced before the honest holder writes a
// public file, cost a reader little: a read through a node that holds
// none of it takes at most twice as long as a read of a file of the same
// size that only the honest holder provides (or the noise floor, on a
// loaded machine). The reader races the providers, hedges after a delay
// set from the block times it has seen, and cuts those that fall behind.
func TestSlowProvidersCostLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a hostile program")
	}
	const (
		size    = 16 << 20 // Bytes in each file.
		sybils  = 20
		noise   = 500 * time.Millisecond // Added to twice the honest time, for a loaded machine.
		timeout = 20 * time.Second       // Far below what a reader that waits for a slow provider would take.
	)
	nodes := newNet(t, 5, replica.Config{Replicas: 3, CacheBytes: -1, BaseTimeout: 5 * time.Second})
	holder, honestReader, reader, lastReader := nodes[1], nodes[2], nodes[3], nodes[4]
	rnd := rand.New(rand.NewPCG(27, 3))
	alone, aloneRefs := publicFile(rnd, size)
	attacked, attackedRefs := publicFile(rnd, size)

	slowProviders(t, p2p.Addrs(nodes[0].h)[0], sybils, attackedRefs)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range alone {
		for _, data := range [][]byte{alone[i], attacked[i]} {
			if _, err := holder.local.Put(ctx, data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := holder.store.Announce(append(aloneRefs, attackedRefs...)...); err != nil {
		t.Fatal(err)
	}
	for _, ref := range aloneRefs {
		waitProviders(t, honestReader, ref, 1)
		waitProviders(t, lastReader, ref, 1)
	}
	for _, ref := range attackedRefs {
		waitAllProviders(t, reader, ref, holder, sybils) // The situation under test.
	}

	read := func(z *node, refs []spindle.Ref, want [][]byte) time.Duration {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		err := z.store.GetMany(ctx, refs, func(i int, data []byte) error {
			if !bytes.Equal(data, want[i]) {
				return fmt.Errorf("block %d: other bytes", i)
			}
			return nil
		})
		d := time.Since(start)
		if err != nil {
			t.Fatalf("read of %d blocks after %v: %v", len(refs), d, err)
		}
		return d
	}
	// The honest time is the faster of two fresh readers, one before
	// the attacked read and one after, so that neither the machine
	// warming up nor cooling down favours the attacked read.
	honest := read(honestReader, aloneRefs, alone)
	hostile := read(reader, attackedRefs, attacked)
	honest = min(honest, read(lastReader, aloneRefs, alone))
	st := reader.store.Stats()
	t.Logf("%d MiB: honest holder alone %v, with %d slow providers %v, ratio %.2f (%d hedges, %d cut)",
		size>>20, honest.Round(time.Millisecond), sybils, hostile.Round(time.Millisecond), float64(hostile)/float64(honest), st.FetchHedged, st.FetchCut)
	if st.FetchHedged == 0 {
		t.Error("the reader never hedged: the slow providers were never asked")
	}
	if hostile > 2*honest+noise {
		t.Fatalf("with %d slow providers a read took %v, more than twice the %v of the honest holder alone (+%v)", sybils, hostile, honest, noise)
	}
}

// A reader cuts a holder that falls far behind when another is left to
// ask: with five holders that send nothing ranked before the one honest
// holder (which lied to this reader once, so it is asked last), the
// block still arrives long before the whole timeout of one fetch. The
// reader then asks the holder that served it first: the silent ones are
// not asked for the next blocks.
func TestBehindHoldersCut(t *testing.T) {
	const base = 5 * time.Second
	cfg := replica.Config{Replicas: 3, Parallel: 1, CacheBytes: -1, BaseTimeout: base}
	// The reader, with r above the holders, chooses among all of them
	// (it waits for the provider grace, not for r providers).
	readerCfg := cfg
	readerCfg.Replicas = 7
	nodes := newNetEach(t, 7, func(i int) replica.Config {
		if i == 6 {
			return readerCfg
		}
		return cfg
	}, func(int) spindle.BlockStore { return new(mem.Store) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	honest, reader := nodes[5], nodes[6]
	rnd := rand.New(rand.NewPCG(12, 13))
	x, y := randomBlock(rnd, 200000), randomBlock(rnd, 1000)
	next := [][]byte{randomBlock(rnd, 1000), randomBlock(rnd, 1000), randomBlock(rnd, 1000)}
	for _, nd := range nodes[:6] {
		for _, b := range append([][]byte{x}, next...) {
			if _, err := nd.local.Put(ctx, b); err != nil {
				t.Fatal(err)
			}
			if err := nd.store.Announce(blocks.RefOf(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := honest.local.Put(ctx, y); err != nil {
		t.Fatal(err)
	}
	if err := honest.store.Announce(blocks.RefOf(y)); err != nil {
		t.Fatal(err)
	}
	for _, b := range append([][]byte{x}, next...) {
		waitAllProviders(t, reader, blocks.RefOf(b), honest, 5)
	}
	waitProviders(t, reader, blocks.RefOf(y), 1)

	// The honest holder lies about y: the reader will ask it last.
	honest.corrupt.Store(true)
	yctx, ycancel := context.WithTimeout(ctx, time.Second)
	reader.store.Get(yctx, blocks.RefOf(y))
	ycancel()
	honest.corrupt.Store(false)
	if honest.served.Load() != 1 {
		t.Fatalf("the honest holder was asked %d times for y, want once", honest.served.Load())
	}

	for _, nd := range nodes[:5] {
		nd.hang.Store(true)
	}
	xctx, xcancel := context.WithTimeout(ctx, base*4/5)
	defer xcancel()
	start := time.Now()
	got, err := reader.store.Get(xctx, blocks.RefOf(x))
	if err != nil || !bytes.Equal(got, x) {
		t.Fatalf("Get with five holders behind, after %v: %v", time.Since(start), err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get with five holders behind took %v", d)
	}
	if st := reader.store.Stats(); st.FetchCut == 0 {
		t.Fatalf("no fetch was cut: %+v", st)
	}

	asked := func() (n int64) {
		for _, nd := range nodes[:5] {
			n += nd.hung.Load()
		}
		return n
	}
	before := asked()
	for i, b := range next {
		got, err := reader.store.Get(xctx, blocks.RefOf(b))
		if err != nil || !bytes.Equal(got, b) {
			t.Fatalf("Get of next block %d: %v", i, err)
		}
	}
	if n := asked() - before; n != 0 {
		t.Fatalf("the silent holders were asked %d times for the next blocks; the reader should ask the holder that served it first", n)
	}
}

// A reader waiting for a holder that sends nothing asks another after
// the hedge delay, without waiting to cut the first: the block comes
// from the second while the first is still being waited for.
func TestSilentHolderHedged(t *testing.T) {
	nodes := newNet(t, 4, replica.Config{Replicas: 3, Parallel: 1, CacheBytes: -1, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	silent, honest, reader := nodes[0], nodes[1], nodes[3]
	rnd := rand.New(rand.NewPCG(14, 15))
	var xs [][]byte
	for range 3 {
		xs = append(xs, randomBlock(rnd, 100000))
	}
	y := randomBlock(rnd, 1000)
	for _, nd := range []*node{silent, honest} {
		for _, x := range xs {
			if _, err := nd.local.Put(ctx, x); err != nil {
				t.Fatal(err)
			}
			if err := nd.store.Announce(blocks.RefOf(x)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := honest.local.Put(ctx, y); err != nil {
		t.Fatal(err)
	}
	if err := honest.store.Announce(blocks.RefOf(y)); err != nil {
		t.Fatal(err)
	}
	for _, x := range xs {
		waitAllProviders(t, reader, blocks.RefOf(x), honest, 1)
	}
	waitProviders(t, reader, blocks.RefOf(y), 1)

	// The honest holder lies about y, so that the reader ranks it
	// below the silent one, which it has not seen fail.
	honest.corrupt.Store(true)
	yctx, ycancel := context.WithTimeout(ctx, time.Second)
	reader.store.Get(yctx, blocks.RefOf(y))
	ycancel()
	honest.corrupt.Store(false)

	silent.hang.Store(true)
	for i, x := range xs {
		before := reader.store.Stats()
		hung := silent.hung.Load()
		got, err := reader.store.Get(ctx, blocks.RefOf(x))
		if err != nil || !bytes.Equal(got, x) {
			t.Fatalf("Get of block %d with a silent holder: %v", i, err)
		}
		if silent.hung.Load() == hung {
			continue // The reader asked the honest holder first: no test.
		}
		after := reader.store.Stats()
		if after.FetchHedged != before.FetchHedged+1 || after.FetchCut != before.FetchCut {
			t.Fatalf("block %d: the reader hedged %d times and cut %d, want once and none", i, after.FetchHedged-before.FetchHedged, after.FetchCut-before.FetchCut)
		}
		return
	}
	t.Fatal("the reader never asked the silent holder: the test did not exercise the hedge")
}

// When every provider of a block falls behind and none is left to ask,
// a reader asks the nodes nearest to its key as well, where Put places
// copies, rather than wait out the providers: a holder whose
// announcement has not landed still serves the block in time.
func TestBehindProvidersThenNearest(t *testing.T) {
	const base = 5 * time.Second
	nodes := newNet(t, 6, replica.Config{Replicas: 3, Parallel: 1, CacheBytes: -1, BaseTimeout: base, RepairInterval: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	reader, quiet := nodes[5], nodes[2]
	x := randomBlock(rand.New(rand.NewPCG(16, 17)), 50000)
	ref := blocks.RefOf(x)
	for _, nd := range nodes[:2] {
		if _, err := nd.local.Put(ctx, x); err != nil {
			t.Fatal(err)
		}
		if err := nd.store.Announce(ref); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := quiet.local.Put(ctx, x); err != nil { // Held, not announced.
		t.Fatal(err)
	}
	waitProviders(t, reader, ref, 2)
	nodes[0].hang.Store(true)
	nodes[1].hang.Store(true)
	xctx, xcancel := context.WithTimeout(ctx, base*3/5)
	defer xcancel()
	start := time.Now()
	got, err := reader.store.Get(xctx, ref)
	if err != nil || !bytes.Equal(got, x) {
		t.Fatalf("Get with both providers silent, after %v: %v", time.Since(start), err)
	}
	if nodes[0].hung.Load()+nodes[1].hung.Load() == 0 {
		t.Fatal("the silent providers were never asked: the test did not exercise the fallback")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Get with both providers silent took %v", d)
	}
}
