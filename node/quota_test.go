package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"spindle.dev"
)

// quotaNode starts a node with cfg's limits, for writers all, on TCP only.
func quotaNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg.Home, cfg.NoSocket, cfg.Listen, cfg.Writers, cfg.Logger = t.TempDir(), true, []string{"/ip4/127.0.0.1/tcp/0"}, []string{"all"}, testLogger(t)
	n, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// A writer's quota counts the files in their tree: a put that would pass
// it is refused with a Full error that says the usage and the quota, and
// stores nothing of the file and no entry; a delete frees its bytes at
// once; another writer's quota is their own.
func TestQuotaRefusesAndStoresNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := quotaNode(t, Config{DefaultQuota: 2 << 20, Quotas: map[spindle.UserName]int64{"bob@example.com": 8 << 20}})
	ann := fwdDial(t, n, newKeys(t, "ann@example.com"))
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 3<<19) // 1.5 MiB
	rand.Read(first)
	if _, err := ann.Put(ctx, "ann@example.com/first", bytes.NewReader(first), spindle.EEPack, nil); err != nil {
		t.Fatalf("a put within the quota: %v", err)
	}
	blocks, held, err := n.store.(usageStore).Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second := make([]byte, 1<<20)
	rand.Read(second)
	_, err = ann.Put(ctx, "ann@example.com/second", bytes.NewReader(second), spindle.EEPack, nil)
	if !errors.Is(err, spindle.Full) || !strings.Contains(err.Error(), "quota for ann@example.com is 2.0 MiB") || !strings.Contains(err.Error(), "spin rm") {
		t.Fatalf("a put past the quota: %v; want Full naming the quota and what to do", err)
	}
	t.Logf("refused: %v", err)
	if _, err := ann.Lookup(ctx, "ann@example.com/second", false); !errors.Is(err, spindle.NotExist) {
		t.Errorf("the refused file has an entry: %v", err)
	}
	if b2, h2, _ := n.store.(usageStore).Usage(ctx); b2 != blocks || h2 != held {
		t.Errorf("the refused put stored blocks: %d blocks, %d bytes, were %d, %d", b2, h2, blocks, held)
	}
	mustRead(t, ann, "ann@example.com/first", first)

	// Bob has a quota of his own.
	bob := fwdDial(t, n, newKeys(t, "bob@example.com"))
	if err := bob.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 5<<20)
	rand.Read(big)
	if _, err := bob.Put(ctx, "bob@example.com/big", bytes.NewReader(big), spindle.EEPack, nil); err != nil {
		t.Fatalf("bob's put within his own quota: %v", err)
	}

	// A delete frees its bytes at once.
	if err := ann.Delete(ctx, "ann@example.com/first"); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Put(ctx, "ann@example.com/second", bytes.NewReader(second), spindle.EEPack, nil); err != nil {
		t.Fatalf("a put after a delete made room: %v", err)
	}
	mustRead(t, ann, "ann@example.com/second", second)
}

// RateUp holds the blocks a node serves over the network to the rate set,
// within 10% over 30 s.
func TestRateUpHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("reads for 30 s")
	}
	const rateUp = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := quotaNode(t, Config{RateUp: rateUp})
	annKeys := newKeys(t, "ann@example.com")
	ann := fwdDial(t, n, annKeys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 30*rateUp)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	// A fresh client, so that nothing is cached.
	reader := fwdDial(t, n, annKeys)
	start := time.Now()
	mustRead(t, reader, "ann@example.com/f", data)
	took := time.Since(start)
	got := float64(len(data)) / took.Seconds()
	t.Logf("read %d MiB in %v: %.0f KiB/s at a limit of %d KiB/s", len(data)>>20, took.Round(time.Millisecond), got/1024, rateUp>>10)
	if got > 1.1*rateUp || got < 0.8*rateUp {
		t.Errorf("served at %.0f KiB/s, want within 10%% of %d KiB/s (and not far below)", got/1024, rateUp>>10)
	}
}
