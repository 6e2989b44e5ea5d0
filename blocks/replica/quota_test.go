package replica_test

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"

	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// quotaNode starts a node alone on loopback whose blocks and quota
// journal are in dir, so that another started on dir is the same node
// restarted.
func quotaNode(t *testing.T, dir string, cfg replica.Config) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	local, err := disk.Open(filepath.Join(dir, "blocks"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Memory: 256 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d, err := dht.New(ctx, h, nil)
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	cfg.QuotaFile = filepath.Join(dir, "quotas")
	s, err := replica.New(h, d, local, cfg)
	if err != nil {
		d.Close()
		h.Close()
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	nd := &node{h: h, d: d, local: local, store: s, cancel: scancel}
	srv, scfg := s.Server(func(peer.ID) bool { return false }, nil)
	p2p.ServeBlocks(sctx, h, srv, scfg)
	t.Cleanup(func() { nd.stop(); local.Close() })
	return nd
}

// A flood is what replicaflood reports.
type flood struct {
	stored, most int64
	out          string
}

// runReplicaFlood runs the hostile peer bin against nd.
func runReplicaFlood(t *testing.T, bin string, nd *node, args ...string) flood {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args = append([]string{"-node", string(p2p.Addrs(nd.h)[0])}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("replicaflood: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`stored (\d+) in \d+ of \d+ blocks; most from one identity (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("replicaflood printed:\n%s", out)
	}
	f := flood{out: string(out)}
	f.stored, _ = strconv.ParseInt(string(m[1]), 10, 64)
	f.most, _ = strconv.ParseInt(string(m[2]), 10, 64)
	return f
}

// A hundred fresh identities that each claim to serve the DHT push junk
// as replicas: each stores no more than its quota, all together no more
// than the hold limit; and a peer that has used its quota still has none
// after the node restarts.
func TestReplicaFloodBoundedAcrossRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a hostile peer and starts loopback nodes")
	}
	const (
		size      = 64 << 10
		peerLimit = 4 * size
		holdLimit = 64 * size
	)
	bin := filepath.Join(t.TempDir(), "replicaflood")
	if out, err := exec.Command("go", "build", "-o", bin, "spindle.dev/simulations/hostile/replicaflood").CombinedOutput(); err != nil {
		t.Fatalf("go build replicaflood: %v\n%s", err, out)
	}
	cfg := replica.Config{HoldLimit: holdLimit, PeerHoldLimit: peerLimit, RepairInterval: -1}

	nd := quotaNode(t, t.TempDir(), cfg)
	start := time.Now()
	f := runReplicaFlood(t, bin, nd, "-ids", "100", "-blocks", "8", "-size", fmt.Sprint(size))
	took := time.Since(start)
	if f.most > peerLimit || f.stored > holdLimit || f.stored == 0 {
		t.Errorf("100 identities stored %d bytes, at most %d from one; want at most %d in all, %d from one:\n%s", f.stored, f.most, holdLimit, peerLimit, f.out)
	}
	if st := nd.store.Stats(); st.HeldBytes > holdLimit {
		t.Errorf("the node holds %d bytes, limit %d", st.HeldBytes, holdLimit)
	}
	t.Logf("100 fresh identities, 8 blocks of %d KiB each, in %v:\n%s", size>>10, took.Round(time.Millisecond), f.out)

	// One identity, the same across a restart.
	dir := t.TempDir()
	nd = quotaNode(t, dir, replica.Config{PeerHoldLimit: peerLimit, RepairInterval: -1})
	f = runReplicaFlood(t, bin, nd, "-ids", "1", "-blocks", "8", "-size", fmt.Sprint(size), "-seed", "7")
	if f.stored != peerLimit {
		t.Fatalf("one identity stored %d bytes under a quota of %d:\n%s", f.stored, peerLimit, f.out)
	}
	nd.stop()
	nd.local.(io.Closer).Close()
	nd = quotaNode(t, dir, replica.Config{PeerHoldLimit: peerLimit, RepairInterval: -1})
	f = runReplicaFlood(t, bin, nd, "-ids", "1", "-blocks", "8", "-size", fmt.Sprint(size), "-seed", "7")
	want := fmt.Sprintf("takes up to %d from one node", peerLimit)
	if f.stored != 0 || !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(f.out) {
		t.Errorf("after a restart the identity that used its quota stored %d more bytes, want 0 and %q:\n%s", f.stored, want, f.out)
	}

	// Once its blocks are collected, the identity has its quota again.
	ctx := context.Background()
	l := nd.local.(spindle.BlockLister)
	var refs []spindle.Ref
	if err := l.List(ctx, func(ref spindle.Ref) error { refs = append(refs, ref); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if err := l.Delete(ctx, ref); err != nil {
			t.Fatal(err)
		}
	}
	if err := nd.store.Forget(refs...); err != nil {
		t.Fatal(err)
	}
	f = runReplicaFlood(t, bin, nd, "-ids", "1", "-blocks", "8", "-size", fmt.Sprint(size), "-seed", "7")
	if f.stored != peerLimit {
		t.Errorf("after its %d blocks were collected the identity stored %d bytes, want its quota %d:\n%s", len(refs), f.stored, peerLimit, f.out)
	}
}
