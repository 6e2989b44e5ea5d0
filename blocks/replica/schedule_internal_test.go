package replica

import (
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/p2p"
)

// storeWithRates returns a Store holding only what ranking and windows
// read: each peer has served a block well, at the rate given (bytes per
// second), and has the fetches in progress given.
func storeWithRates(rates map[peer.ID]float64, inflight map[peer.ID]int) *Store {
	s := &Store{inflight: inflight, remotes: make(map[peer.ID]*p2p.RemoteStore), idleSince: make(map[peer.ID]time.Time)}
	s.seen.peers = make(map[peer.ID]peerScore)
	now := time.Now()
	for p, r := range rates {
		s.seen.peers[p] = peerScore{v: scoreServed, at: now, rate: r}
	}
	return s
}

// A block goes to the provider that would bring it first: a provider
// four times as fast is given more blocks in flight before a slow one
// gets its first, and no more than its window.
func TestRankByRateAndWindow(t *testing.T) {
	const fast, slow = peer.ID("fast"), peer.ID("slow")
	mib := float64(spindle.MaxBlockSize)
	rates := map[peer.ID]float64{fast: 4 * mib, slow: mib}
	for _, tc := range []struct {
		inFast, inSlow int
		first          peer.ID
	}{
		{0, 0, fast},
		{2, 0, fast}, // 3 blocks at 4 MiB/s arrive before 1 at 1 MiB/s.
		{4, 0, slow}, // 5 would not.
		{6, 1, fast}, // 7 at 4 MiB/s against 2 at 1 MiB/s.
		{9, 1, slow},
	} {
		s := storeWithRates(rates, map[peer.ID]int{fast: tc.inFast, slow: tc.inSlow})
		pool := []peer.ID{slow, fast}
		s.rank(pool)
		if pool[0] != tc.first {
			t.Errorf("with %d fetches in flight from the fast provider and %d from the slow one, %s ranked first, want %s", tc.inFast, tc.inSlow, pool[0], tc.first)
		}
	}
	s := storeWithRates(rates, map[peer.ID]int{})
	if w, ws := s.window(fast), s.window(slow); w != 8 || ws != minWindow {
		t.Errorf("windows %d for 4 MiB/s and %d for 1 MiB/s, want 8 and %d", w, ws, minWindow)
	}
	if w := s.window(peer.ID("unknown")); w != initialWindow {
		t.Errorf("window of a provider not seen yet = %d, want %d", w, initialWindow)
	}
	// The fast provider's window full: the slow one has room, and is
	// asked, though it would bring the block later.
	s = storeWithRates(rates, map[peer.ID]int{fast: 8})
	pool := []peer.ID{slow, fast}
	s.rank(pool)
	if i := s.roomAt(pool, time.Now()); i < 0 || pool[i] != slow {
		t.Fatalf("with the fast provider's window full, roomAt = %d in %v, want the slow one", i, pool)
	}
	s = storeWithRates(rates, map[peer.ID]int{fast: 8, slow: 2})
	if i := s.roomAt(pool, time.Now()); i != -1 {
		t.Fatalf("with both windows full, roomAt = %d, want -1 (wait)", i)
	}
}

// An idle provider steals a block queued deep at a slow one only once it
// has been idle a while, and only if it would bring the block well
// before the slow one.
func TestStealFromSlowProvider(t *testing.T) {
	const fast, slow = peer.ID("fast"), peer.ID("slow")
	mib := float64(spindle.MaxBlockSize)
	s := storeWithRates(map[peer.ID]float64{fast: 4 * mib, slow: mib}, map[peer.ID]int{slow: 4})
	now := time.Now()
	deep := &attempt{r: p2p.NewRemoteStore(nil, slow), start: now, queued: 4} // 4 s to go.
	near := &attempt{r: p2p.NewRemoteStore(nil, slow), start: now, queued: 1} // 1 s to go, a stolen copy would take 0.25 s.
	s.idleSince[fast] = now
	if s.stealable([]peer.ID{fast}, []*attempt{deep}, now) {
		t.Errorf("a provider idle for no time yet stole a block")
	}
	later := now.Add(stealIdle)
	if !s.stealable([]peer.ID{fast}, []*attempt{deep}, later) {
		t.Errorf("an idle fast provider did not steal a block 4 s from arriving")
	}
	if s.stealable([]peer.ID{fast}, []*attempt{near.withStart(now.Add(-800 * time.Millisecond))}, later) {
		t.Errorf("an idle fast provider stole a block about to arrive")
	}
	s.inflight[fast] = 1
	if s.stealable([]peer.ID{fast}, []*attempt{deep}, later) {
		t.Errorf("a busy provider stole a block")
	}
}

func (a *attempt) withStart(t time.Time) *attempt {
	b := *a
	b.start = t
	return &b
}
