package lease

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
)

// clock is a fake time that tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_800_000_000, 0)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func digest(i int) blocks.Digest {
	return blocks.Digest(sha256.Sum256([]byte(fmt.Sprint("block ", i))))
}

func digests(from, n int) []blocks.Digest {
	out := make([]blocks.Digest, n)
	for i := range out {
		out[i] = digest(from + i)
	}
	return out
}

func TestGrantExpireRenew(t *testing.T) {
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now, MaxTerm: time.Hour})
	ds := digests(0, 3)
	if n, err := tb.Grant("hostA", 10*time.Minute, ds); n != 3 || err != nil {
		t.Fatalf("grant: %d, %v", n, err)
	}
	if !tb.Live(ds[0]) || tb.Live(digest(99)) {
		t.Fatal("lease not live, or a block never leased is")
	}
	clk.Add(9 * time.Minute)
	tb.Grant("hostA", 10*time.Minute, ds[:1]) // Renew one.
	clk.Add(2 * time.Minute)
	if !tb.Live(ds[0]) || tb.Live(ds[1]) {
		t.Fatalf("after 11 min: renewed live %v (want true), other live %v (want false)", tb.Live(ds[0]), tb.Live(ds[1]))
	}
	// A term beyond MaxTerm is cut to it.
	tb.Grant("hostB", 100*time.Hour, ds[1:2])
	clk.Add(time.Hour + time.Second)
	if tb.Live(ds[1]) {
		t.Fatal("a lease outlived MaxTerm")
	}
	tb.Prune()
	if st := tb.Stats(); st.Leases != 0 || st.Blocks != 0 {
		t.Fatalf("after pruning everything expired: %+v", st)
	}
	if _, err := tb.Grant("", time.Hour, ds); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("grant to no host: %v", err)
	}
	if _, err := tb.Grant("h", 0, ds); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("grant for no time: %v", err)
	}
}

// LiveFrom tells one dir host's live leases from another's, so that a
// node keeps the blocks its own dir host leases.
func TestLiveFrom(t *testing.T) {
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now, MaxTerm: time.Hour})
	tb.Grant("self", 10*time.Minute, digests(0, 1))
	tb.Grant("other", time.Hour, digests(0, 2))
	if !tb.LiveFrom(digest(0), "self") || tb.LiveFrom(digest(1), "self") || tb.LiveFrom(digest(0), "nobody") {
		t.Fatal("LiveFrom does not tell the hosts' leases apart")
	}
	clk.Add(11 * time.Minute)
	if tb.LiveFrom(digest(0), "self") || !tb.LiveFrom(digest(0), "other") {
		t.Fatal("LiveFrom counts an expired lease, or misses a live one")
	}
}

// One dir host's leases never cut short another's: a host renewing for
// a shorter term changes only its own lease.
func TestHostsIndependent(t *testing.T) {
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now})
	d := digest(1)
	tb.Grant("honest", 10*time.Hour, []blocks.Digest{d})
	tb.Grant("hostile", time.Second, []blocks.Digest{d})
	clk.Add(time.Hour)
	if !tb.Live(d) {
		t.Fatal("a short lease from another host ended the honest one")
	}
}

func TestQuotas(t *testing.T) {
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now, PeerLeases: 10, MaxLeases: 15, MaxTerm: time.Hour, Own: "me"})
	// The node's own leases are not bound by the peer quota.
	if n, err := tb.Grant("me", time.Hour, digests(500, 11)); n != 11 || err != nil {
		t.Fatalf("own leases beyond the peer quota: %d, %v", n, err)
	}
	tb.Grant("me", time.Second, digests(500, 11))
	clk.Add(2 * time.Second)
	tb.Prune()
	n, err := tb.Grant("greedy", time.Hour, digests(0, 12))
	if n != 10 || !errors.Is(err, spindle.Permission) {
		t.Fatalf("over the peer quota: granted %d, %v; want 10 and Permission", n, err)
	}
	if !tb.PausedUntil().IsZero() {
		t.Fatal("a peer over its own quota paused collection")
	}
	// Renewals of leases held pass whatever the quota.
	if n, err := tb.Grant("greedy", time.Hour, digests(0, 10)); n != 10 || err != nil {
		t.Fatalf("renewal at quota: %d, %v", n, err)
	}
	n, err = tb.Grant("other", time.Hour, digests(100, 8))
	if n != 5 || !errors.Is(err, spindle.Permission) {
		t.Fatalf("over the total quota: granted %d, %v; want 5 and Permission", n, err)
	}
	// The table is full and a lease was refused: nothing may be
	// collected, even blocks nobody leases, until MaxTerm has passed.
	if tb.PausedUntil().IsZero() {
		t.Fatal("a full table refused a lease and collection did not pause")
	}
	clk.Add(time.Hour + time.Second)
	if !tb.PausedUntil().IsZero() {
		t.Fatal("the pause did not end")
	}
}

func TestTableSurvivesRestart(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "leases", "journal")
	tb, err := OpenTable(path, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	tb.Grant("a", time.Hour, digests(0, 100))
	tb.Grant("b", 2*time.Hour, digests(50, 100))
	tb.Grant("c", time.Minute, digests(1000, 2*MaxDigests+1)) // Several records.
	tb.Grant("a", 3*time.Hour, digests(0, 10))
	if err := tb.Close(); err != nil {
		t.Fatal(err)
	}
	tb, err = OpenTable(path, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if st := tb.Stats(); st.Leases != 200+2*MaxDigests+1 || st.Blocks != 150+2*MaxDigests+1 || st.Hosts != 3 || tb.Damage() != nil {
		t.Fatalf("reopened: %+v, damage %v", st, tb.Damage())
	}
	clk.Add(150 * time.Minute)
	for i, want := range map[int]bool{0: true, 9: true, 10: false, 49: false, 50: false, 149: false} {
		if got := tb.Live(digest(i)); got != want {
			t.Errorf("block %d live %v, want %v", i, got, want)
		}
	}
}

// A journal cut short in a crash, or damaged, opens with what it still
// holds, and collection pauses: a lost lease must not free a block.
func TestDamagedJournalPauses(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "journal")
	tb, err := OpenTable(path, Config{Now: clk.Now, MaxTerm: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	tb.Grant("a", time.Hour, digests(0, 5))
	tb.Grant("a", time.Hour, digests(5, 5))
	tb.Close()
	fi, _ := os.Stat(path)
	if err := os.Truncate(path, fi.Size()-7); err != nil {
		t.Fatal(err)
	}
	tb, err = OpenTable(path, Config{Now: clk.Now, MaxTerm: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(tb.Damage(), spindle.Integrity) || tb.PausedUntil().IsZero() {
		t.Fatalf("torn journal: damage %v, paused until %v", tb.Damage(), tb.PausedUntil())
	}
	if st := tb.Stats(); st.Leases != 5 {
		t.Fatalf("torn journal kept %d leases, want the first record's 5", st.Leases)
	}
	tb.Close()
	// The pause is in the journal: a second restart keeps it.
	tb, err = OpenTable(path, Config{Now: clk.Now, MaxTerm: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if tb.Damage() != nil || tb.PausedUntil().IsZero() {
		t.Fatalf("second open: damage %v, paused until %v", tb.Damage(), tb.PausedUntil())
	}
}

func TestCompaction(t *testing.T) {
	clk := newClock()
	path := filepath.Join(t.TempDir(), "journal")
	tb, err := OpenTable(path, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ds := digests(0, 2000)
	for range 30 { // 30 renewals of the same leases: ~2 MB of journal.
		tb.Grant("a", time.Hour, ds)
		clk.Add(time.Minute)
	}
	before := tb.Stats().JournalSize
	if err := tb.Prune(); err != nil {
		t.Fatal(err)
	}
	after := tb.Stats().JournalSize
	if after*10 > before {
		t.Fatalf("journal of %d bytes compacted to %d", before, after)
	}
	tb.Grant("b", time.Hour, digests(5000, 1))
	tb.Close()
	tb, err = OpenTable(path, Config{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	if st := tb.Stats(); st.Leases != 2001 || tb.Damage() != nil {
		t.Fatalf("after compaction and reopening: %+v, %v", st, tb.Damage())
	}
}

func put(t *testing.T, s spindle.BlockStore, i int) blocks.Digest {
	t.Helper()
	ref, err := s.Put(context.Background(), []byte(fmt.Sprint("block ", i)))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := blocks.ParseRef(ref)
	return d
}

func held(s *mem.Store, d blocks.Digest) bool {
	_, err := s.Get(context.Background(), d.Ref())
	return err == nil
}

func TestCollector(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now})
	store := new(mem.Store)
	c := NewCollector(tb, store, 10*time.Minute, clk.Now)
	var gone []spindle.Ref
	c.OnCollect = func(refs []spindle.Ref) { gone = append(gone, refs...) }
	g := c.Guard()
	leased, shared, unleased := put(t, g, 1), put(t, g, 2), put(t, g, 3)
	tb.Grant("a", time.Hour, []blocks.Digest{leased, shared})
	tb.Grant("b", 2*time.Hour, []blocks.Digest{shared})

	// Many passes within the lease: nothing leased goes, the unleased
	// block goes once its grace is over.
	for range 5 {
		clk.Add(3 * time.Minute)
		if _, err := c.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if !held(store, leased) || !held(store, shared) || held(store, unleased) {
		t.Fatalf("after 15 min: leased %v shared %v unleased %v; want true true false",
			held(store, leased), held(store, shared), held(store, unleased))
	}
	if len(gone) != 1 || gone[0] != unleased.Ref() {
		t.Fatalf("OnCollect got %v", gone)
	}
	// Host a stops renewing (its file is deleted): its block goes a
	// grace after the lease ends; the block host b still leases stays.
	clk.Add(time.Hour)
	res, _ := c.Pass(ctx)
	if !held(store, leased) || res.Waiting != 1 {
		t.Fatalf("a block went as soon as its lease ended, or was not counted as waiting: %+v", res)
	}
	clk.Add(11 * time.Minute)
	res, _ = c.Pass(ctx)
	if held(store, leased) || !held(store, shared) || res.Collected != 1 || res.Leased != 1 {
		t.Fatalf("after its lease and grace: leased held %v, shared held %v, %+v", held(store, leased), held(store, shared), res)
	}
}

// A block put again restarts its grace: a new file with the contents of
// a deleted one keeps its block until its dir host leases it.
func TestPutRestartsGrace(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now})
	store := new(mem.Store)
	c := NewCollector(tb, store, 10*time.Minute, clk.Now)
	d := put(t, c.Guard(), 1)
	c.Pass(ctx)
	clk.Add(9 * time.Minute)
	put(t, c.Guard(), 1)
	clk.Add(2 * time.Minute)
	if res, _ := c.Pass(ctx); !held(store, d) || res.Waiting != 1 {
		t.Fatalf("a block put again 2 minutes ago was collected: %+v", res)
	}
	clk.Add(10 * time.Minute)
	if c.Pass(ctx); held(store, d) {
		t.Fatal("not collected after the grace")
	}
}

// While collection is paused, nothing is deleted, but what would be is
// counted.
func TestPausedCollectsNothing(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now})
	store := new(mem.Store)
	c := NewCollector(tb, store, time.Minute, clk.Now)
	d := put(t, c.Guard(), 1)
	tb.Pause(clk.Now().Add(time.Hour))
	c.Pass(ctx)
	clk.Add(30 * time.Minute)
	res, _ := c.Pass(ctx)
	if !held(store, d) || !res.Paused {
		t.Fatalf("paused pass: held %v, %+v", held(store, d), res)
	}
	clk.Add(31 * time.Minute)
	if res, _ := c.Pass(ctx); held(store, d) || res.Collected != 1 {
		t.Fatalf("after the pause: held %v, %+v", held(store, d), res)
	}
}

// Puts racing with passes: a block put again after its grace ran out is
// held when Put returns and stays held, whatever pass was under way.
func TestPutRacesPass(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	tb := NewTable(Config{Now: clk.Now})
	store := new(mem.Store)
	c := NewCollector(tb, store, time.Minute, clk.Now)
	g := c.Guard()
	d := put(t, g, 1)
	collected := 0
	for i := range 300 {
		clk.Add(2 * time.Minute) // The block's grace is over.
		done := make(chan PassResult)
		go func() {
			res, _ := c.Pass(ctx)
			done <- res
		}()
		if i%2 == 0 {
			put(t, g, 1)
			if !held(store, d) {
				t.Fatalf("round %d: Put returned but the block is gone", i)
			}
		}
		res := <-done
		collected += res.Collected
		if i%2 == 0 && !held(store, d) {
			t.Fatalf("round %d: a pass deleted a block put during it", i)
		}
		if !held(store, d) {
			put(t, g, 1)
		}
	}
	if collected == 0 {
		t.Fatal("no pass ever collected the block: the test did not test the race")
	}
}

func TestMessages(t *testing.T) {
	r := &Request{User: "ann@example.com", Term: 2 * time.Hour, Digests: digests(0, 3)}
	got, err := UnmarshalRequest(r.Marshal())
	if err != nil || got.User != r.User || got.Term != r.Term || len(got.Digests) != 3 || got.Digests[2] != r.Digests[2] {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	b := r.Marshal()
	for _, bad := range [][]byte{nil, {2}, b[:len(b)-1], append(b, 0)} {
		if _, err := UnmarshalRequest(bad); !errors.Is(err, spindle.Invalid) {
			t.Errorf("UnmarshalRequest(%x): %v, want Invalid", bad, err)
		}
	}
	rep := &Reply{Granted: 7, Refused: 2, Reason: "quota"}
	if got, err := UnmarshalReply(rep.Marshal()); err != nil || *got != *rep {
		t.Fatalf("reply round trip: %+v, %v", got, err)
	}
}

func FuzzUnmarshalRequest(f *testing.F) {
	f.Add((&Request{User: "ann@example.com", Term: time.Hour, Digests: digests(0, 2)}).Marshal())
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := UnmarshalRequest(b)
		if err != nil {
			return
		}
		again, err := UnmarshalRequest(r.Marshal())
		if err != nil || again.User != r.User || again.Term != r.Term || len(again.Digests) != len(r.Digests) {
			t.Fatalf("decoded request does not round-trip: %+v, %v", again, err)
		}
	})
}

func FuzzJournal(f *testing.F) {
	var b []byte
	b = appendRecord(b, &record{kind: recGrant, host: "a", exp: 5, digests: digests(0, 2)})
	b = appendRecord(b, &record{kind: recHold, exp: 9})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		tb := NewTable(Config{})
		tb.replay(bytes.NewReader(b))
	})
}

func FuzzUnmarshalReply(f *testing.F) {
	f.Add((&Reply{Granted: 3, Refused: 1, Reason: "quota"}).Marshal())
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := UnmarshalReply(b)
		if err != nil {
			return
		}
		again, err := UnmarshalReply(r.Marshal())
		if err != nil || *again != *r {
			t.Fatalf("decoded reply does not round-trip: %+v, %v", again, err)
		}
	})
}
