package node

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/client"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
	"spindle.dev/pack"
)

// middleWorld is a holder H, which runs the key cluster, hosts ann's tree
// and holds every block of her files (one copy each), and a node M in the
// middle, which uses H's key cluster, holds none of the blocks and caches
// none (so that every read through it crosses to H). ann has a client on
// H and on M over loopback TCP, and one on M's Unix socket, as spin on
// M's machine reaches it.
type middleWorld struct {
	h, m         *Node
	direct, via  *client.Client // Over TCP.
	viaSocket    *client.Client
	annKeys      *pack.Keys
	name         spindle.PathName
	data         []byte
	blocksOfFile []spindle.Ref
}

func newMiddleWorld(tb testing.TB, size int, mcfg Config) *middleWorld {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := New(ctx, Config{Home: tb.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Replicas: 1, Logger: testLogger(tb)})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	mcfg.Home = tb.TempDir()
	mcfg.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	mcfg.Writers = []string{"all"}
	mcfg.Replicas = 1
	mcfg.KeyServers = h.Addrs()[:1]
	mcfg.Logger = testLogger(tb)
	m, err := New(ctx, mcfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Close() })
	for _, n := range []*Node{h, m} {
		waitFor(tb, 30*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= 1 })
	}
	w := &middleWorld{h: h, m: m, name: "ann@example.com/big"}
	direct, annKeys := dialWithKeys(tb, h, "ann@example.com")
	w.direct = direct
	w.data = make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(w.data)
	e, err := direct.Put(ctx, w.name, bytes.NewReader(w.data), spindle.EEPack, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for _, b := range e.Blocks {
		w.blocksOfFile = append(w.blocksOfFile, b.Ref)
		if _, err := m.store.Get(ctx, b.Ref); err == nil {
			tb.Fatalf("node M holds block %s of the file: the world is not as the test needs", b.Ref)
		}
	}
	w.annKeys = annKeys
	w.via = fwdDial(tb, m, annKeys)
	w.viaSocket, err = client.Dial(ctx, client.Config{Keys: annKeys, Node: m.SocketAddr(), Logger: testLogger(tb), KeyLog: filepath.Join(tb.TempDir(), "keylog")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.viaSocket.Close() })
	return w
}

// read reads the file through c, checking what it reads, and returns
// how long it took.
func (w *middleWorld) read(tb testing.TB, c *client.Client) time.Duration {
	tb.Helper()
	start := time.Now()
	f, err := c.Open(context.Background(), w.name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var check checkingWriter
	check.want = w.data
	if _, err := io.Copy(&check, f); err != nil {
		tb.Fatal(err)
	}
	d := time.Since(start)
	if check.bad || check.off != len(w.data) {
		tb.Fatalf("read %d bytes, matching %v; want the %d bytes put", check.off, !check.bad, len(w.data))
	}
	return d
}

// processCPU returns the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// checkingWriter compares what it is written with want, keeping nothing.
type checkingWriter struct {
	want []byte
	off  int
	bad  bool
}

func (w *checkingWriter) Write(p []byte) (int, error) {
	if w.off+len(p) > len(w.want) || !bytes.Equal(p, w.want[w.off:w.off+len(p)]) {
		w.bad = true
	}
	w.off += len(p)
	return len(p), nil
}

// BenchmarkMiddleGet reads a 64 MiB file (ee) from its holder H directly
// and through a node M that holds none of its blocks and caches none,
// taking turns in each iteration so that the ratios of the rates are
// measured under the same load: middle/direct is the user's own node M,
// reached over its Unix socket as spin reaches it, against the holder
// reached over loopback TCP as a client on another machine would;
// middle-tcp/direct reaches M over loopback TCP too. Nodes and clients are
// all in the test process, on one machine: the TLS of every TCP hop, both
// ends of it, counts against the same cores; the CPU time of the process
// per MiB read is reported for direct and middle (M's socket).
func BenchmarkMiddleGet(b *testing.B) {
	w := newMiddleWorld(b, 64<<20, Config{CacheBytes: -1})
	w.read(b, w.via) // The providers found, the streams open.
	w.read(b, w.viaSocket)
	w.read(b, w.direct)
	var direct, middle, middleTCP time.Duration
	var directCPU, middleCPU time.Duration
	timed := func(c *client.Client, wall, cpu *time.Duration) {
		before := processCPU()
		*wall += w.read(b, c)
		*cpu += processCPU() - before
	}
	var unused time.Duration
	b.SetBytes(int64(3 * len(w.data)))
	b.ResetTimer()
	for i := range b.N {
		turns := []func(){
			func() { timed(w.direct, &direct, &directCPU) },
			func() { timed(w.viaSocket, &middle, &middleCPU) },
			func() { timed(w.via, &middleTCP, &unused) },
		}
		for k := range turns {
			turns[(i+k)%len(turns)]()
		}
	}
	b.StopTimer()
	mib := float64(len(w.data)*b.N) / (1 << 20)
	b.ReportMetric(float64(directCPU.Microseconds())/1000/mib, "direct-cpu-ms/MiB")
	b.ReportMetric(float64(middleCPU.Microseconds())/1000/mib, "middle-cpu-ms/MiB")
	mb := float64(len(w.data)*b.N) / 1e6
	b.ReportMetric(mb/direct.Seconds(), "direct-MB/s")
	b.ReportMetric(mb/middle.Seconds(), "middle-MB/s")
	b.ReportMetric(mb/middleTCP.Seconds(), "middle-tcp-MB/s")
	b.ReportMetric(direct.Seconds()/middle.Seconds(), "middle/direct")
	b.ReportMetric(direct.Seconds()/middleTCP.Seconds(), "middle-tcp/direct")
}

// lyingStore serves the blocks it is given with one byte flipped,
// counting what it serves.
type lyingStore struct {
	blocks map[spindle.Ref][]byte
	served atomic.Int64
}

func (s *lyingStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, ok := s.blocks[ref]
	if !ok {
		return nil, spindle.E(spindle.NotExist, "no block "+string(ref))
	}
	s.served.Add(1)
	data = bytes.Clone(data)
	data[len(data)/2] ^= 0x40
	return data, nil
}

func (s *lyingStore) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	return "", spindle.E(spindle.Permission, "a liar takes no blocks")
}

// lyingHolder starts a peer of the DHT joined through boot that
// announces itself as a provider of every block in held and answers gets
// for them with wrong bytes.
func lyingHolder(t *testing.T, boot spindle.PeerAddr, held map[spindle.Ref][]byte) *lyingStore {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	d, err := dht.New(ctx, h, []spindle.PeerAddr{boot})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	liar := &lyingStore{blocks: held}
	p2p.ServeBlocks(ctx, h, liar, p2p.BlockServerConfig{})
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("the liar knows %d peers", d.RoutingTable().Size()) },
		func() bool { return d.RoutingTable().Size() >= 2 })
	for ref := range held {
		c, err := cid.Decode(string(ref))
		if err != nil {
			t.Fatal(err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
		err = d.Provide(pctx, c, true)
		pcancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	return liar
}

// A holder that lies about the blocks of a file is bypassed through a
// node in the middle that passes blocks on unchecked: the reader finds
// the liar's bytes wrong, asks again, and the node, checking this time,
// gets them from the honest holder. Every read returns the file.
func TestMiddleBypassesLyingHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two networked nodes and a lying peer")
	}
	w := newMiddleWorld(t, 8<<20, Config{CacheBytes: -1})
	ctx := context.Background()
	held := make(map[spindle.Ref][]byte)
	for _, ref := range w.blocksOfFile {
		data, err := w.h.store.Get(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		held[ref] = data
	}
	liar := lyingHolder(t, w.h.Addrs()[0], held)
	// The node in the middle picks among the two providers at random
	// until one has served it well: read until the liar has been asked.
	for i := 0; liar.served.Load() == 0; i++ {
		if i == 20 {
			t.Fatal("the lying holder was never asked in 20 reads: the test did not exercise the check")
		}
		w.read(t, []*client.Client{w.viaSocket, w.via}[i%2])
	}
	t.Logf("the liar served %d blocks, each bypassed", liar.served.Load())
	w.read(t, w.viaSocket)
}

// A block that rots on its holder's disk is caught, through a node in the
// middle that passes blocks on unchecked as from the holder directly: the
// holder's store finds the damage when it reads the block and sets the
// copy aside, and the reader gets an error, never the rotten bytes. (The
// same from the holder directly: the scenario corrupt-block-detected.)
func TestMiddleCorruptHolderDiskCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two networked nodes")
	}
	w := newMiddleWorld(t, 3<<20/2, Config{CacheBytes: -1})
	d, err := blocks.ParseRef(w.blocksOfFile[0])
	if err != nil {
		t.Fatal(err)
	}
	// A block of 1 MiB is kept in a file of its own, named by its digest
	// (see package blocks/disk; nodetest.FindBlock finds small ones too).
	var file string
	filepath.WalkDir(filepath.Join(w.h.cfg.Home, "blocks"), func(p string, de fs.DirEntry, err error) error {
		if err == nil && de.Name() == hex.EncodeToString(d[:]) {
			file = p
		}
		return nil
	})
	if file == "" {
		t.Fatalf("no file of its own for block %s under %s", w.blocksOfFile[0], w.h.cfg.Home)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*client.Client{w.viaSocket, w.direct} {
		f, err := c.Open(context.Background(), w.name)
		if err == nil {
			var check checkingWriter
			check.want = w.data
			_, err = io.Copy(&check, f)
			f.Close()
			if check.bad {
				t.Fatal("the reader was given the rotten bytes")
			}
		}
		if err == nil {
			t.Fatal("a file whose block rotted on its only holder's disk read without an error")
		}
		t.Logf("read: %v", err)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Fatalf("the rotten block file is still in place (%v); want it set aside", err)
	}
}

// A peer that announces the shards of an erasure-coded file and serves
// them wrong is bypassed too: the reader checks each shard the node
// passes on, asks again for a wrong one, and the node, checking that
// time, gets it from its holder.
func TestErasureLyingShardHolderBypassed(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven networked nodes and a lying peer")
	}
	const count = 7
	nodes := make([]*Node, count)
	nodes[0] = ecNode(t, t.TempDir(), nil)
	boot := nodes[0].Addrs()[:1]
	var wg sync.WaitGroup
	for i := 1; i < count; i++ {
		home := t.TempDir()
		wg.Go(func() { nodes[i] = ecNode(t, home, boot) })
	}
	wg.Wait()
	for _, n := range nodes {
		t.Cleanup(func() { n.Close() })
	}
	for _, n := range nodes {
		waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("%s knows %d peers", n.Host().ID(), n.DHT().RoutingTable().Size()) },
			func() bool { return n.DHT().RoutingTable().Size() >= count-1 })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ann, keys := dialWithKeys(t, nodes[0], "ann@example.com")
	data := make([]byte, 3*spindle.MaxBlockSize+77)
	rand.NewChaCha8([32]byte{8}).Read(data)
	name := spindle.PathName("ann@example.com/striped")
	e, err := ann.Put(ctx, name, bytes.NewReader(data), spindle.EEPack, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, stripes, err := pack.Stripes(e)
	if err != nil || len(stripes) != len(e.Blocks) {
		t.Fatalf("entry's stripes: %d of %d blocks, %v", len(stripes), len(e.Blocks), err)
	}
	held := make(map[spindle.Ref][]byte)
	for _, refs := range stripes {
		for _, r := range refs {
			for _, n := range nodes {
				if sh, err := n.store.Get(ctx, r); err == nil {
					held[r] = sh
					break
				}
			}
			if held[r] == nil {
				t.Fatalf("no node holds shard %s", r)
			}
		}
	}
	liar := lyingHolder(t, boot[0], held)
	reader := client.Config{Keys: keys, Node: nodes[count-1].DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")}
	for i := 0; liar.served.Load() == 0; i++ {
		if i == 20 {
			t.Fatal("the lying holder was never asked in 20 reads: the test did not exercise the check")
		}
		c, err := client.Dial(ctx, reader)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		f.Close()
		c.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d with a lying shard holder: %d bytes, %v; want the file", i, len(got), err)
		}
	}
	t.Logf("the liar served %d shards, each bypassed", liar.served.Load())
}
