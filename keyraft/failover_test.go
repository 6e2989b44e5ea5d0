package keyraft

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// liveSet is the members a test's clients may talk to; killing one takes it
// out.
type liveSet struct {
	mu sync.Mutex
	ms []*member
}

func (l *liveSet) members() []*member {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*member(nil), l.ms...)
}

func (l *liveSet) kill(t testing.TB, m *member) {
	l.mu.Lock()
	for i, o := range l.ms {
		if o == m {
			l.ms = append(l.ms[:i:i], l.ms[i+1:]...)
			break
		}
	}
	l.mu.Unlock()
	if err := m.c.Close(); err != nil {
		t.Errorf("close %s: %v", m.id, err)
	}
}

// putRouted is a client's registration: it sends u to whichever live
// member leads, and on a Transient failure (no leader, leader lost, outcome
// unknown) tries again, as a client whose request may or may not have
// committed does. Repeating a committed record is not an error, so a
// retried registration is acknowledged once and applied once.
func putRouted(ctx context.Context, live *liveSet, u *spindle.User) error {
	for {
		var err error = spindle.E(spindle.Transient, "no leader")
		for _, m := range live.members() {
			if m.c.IsLeader() {
				err = m.c.Put(ctx, u)
				break
			}
		}
		if err == nil || !errors.Is(err, spindle.Transient) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestLeaderKilledDuringRegistrations kills the leader of a three-member
// cluster (loopback TCP, bolt on disk) while clients make 1,000 concurrent
// registrations. Every acknowledged registration must then be on every
// member, once; the killed member, restarted after the others compacted
// their log into a snapshot, catches up from the snapshot and the log.
func TestLeaderKilledDuringRegistrations(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := openMembersTuned(t, 3, true, func(c *raft.Config) {
		fast(c)
		c.TrailingLogs = 2
		c.SnapshotThreshold = 1 << 20 // Only the explicit snapshot below.
	})
	live := &liveSet{ms: append([]*member(nil), ms...)}
	us := make([]*spindle.User, n)
	for i := range us {
		us[i] = register(t, newSigner(t, spindle.UserName(fmt.Sprintf("k%d@example.com", i))))
	}

	var acked atomic.Int64
	third := make(chan struct{})
	var once sync.Once
	errs := make([]error, n)
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for range 32 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				errs[i] = putRouted(ctx, live, us[i])
				if errs[i] == nil && acked.Add(1) == int64(n/3) {
					once.Do(func() { close(third) })
				}
			}
		})
	}
	<-third
	killed := leaderOf(t, live.members())
	live.kill(t, killed)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("registration %d: %v", i, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	rest := live.members()
	nl := leaderOf(t, rest)
	converged(t, nl.c, clusters(rest...)...)
	checkOnce := func(m *member) {
		t.Helper()
		m.c.fsm.mu.RLock()
		defer m.c.fsm.mu.RUnlock()
		st := m.c.fsm.st
		if st.size() != int64(n) {
			t.Errorf("%s holds %d records, want %d", m.id, st.size(), n)
		}
		for _, u := range us {
			idx := st.users[u.Name]
			if len(idx) != 1 || !sameRecord(st.entries[idx[0]].rec, u) {
				t.Errorf("%s holds %s at %v, want once", m.id, u.Name, idx)
				return
			}
		}
	}
	for _, m := range rest {
		checkOnce(m)
	}

	// The survivors compact their log, move on, and the killed member
	// restarts from its disk: it gets the snapshot, then the log after it.
	for _, m := range rest {
		if err := m.c.raft.Snapshot().Error(); err != nil {
			t.Fatal(err)
		}
	}
	later := register(t, newSigner(t, "later@example.com"))
	for range 20 {
		populateRouted(t, ctx, live)
	}
	if err := putRouted(ctx, live, later); err != nil {
		t.Fatal(err)
	}
	reopen(t, killed)
	eventually(t, "restarted member has the later record", func() bool {
		_, err := killed.c.Lookup(ctx, later.Name)
		return err == nil
	})
	converged(t, leaderOf(t, rest).c, killed.c)
	if s := killed.c.raft.Stats()["last_snapshot_index"]; s == "0" || s == "" {
		t.Errorf("the restarted member caught up without a snapshot (last snapshot index %q)", s)
	}
	chk, err := keylog.NewChecker(ms[0].c.VerifierKey(), ms[1].c.VerifierKey(), ms[2].c.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chk.VerifyLookup(ctx, mustProof(t, killed.c, later.Name), later.Name, killed.c); err != nil {
		t.Errorf("proof from the restarted member: %v", err)
	}
}

var routedSeq atomic.Int64

// populateRouted registers one fresh user through the leader.
func populateRouted(t *testing.T, ctx context.Context, live *liveSet) {
	t.Helper()
	name := spindle.UserName(fmt.Sprintf("r%d@example.com", routedSeq.Add(1)))
	if err := putRouted(ctx, live, register(t, newSigner(t, name))); err != nil {
		t.Fatal(err)
	}
}

// TestFiveMembers runs a five-member cluster: it goes on with two members
// gone; cut into a minority of two (with the leader) and a majority of
// three, the minority commits nothing and the majority goes on; healed,
// all agree and the minority's attempts left no trace.
func TestFiveMembers(t *testing.T) {
	ctx := ctxT(t)
	ms := openMembers(t, 5, false)
	all := &liveSet{ms: append([]*member(nil), ms...)}
	for range 3 {
		populateRouted(t, ctx, all)
	}
	leader := leaderOf(t, ms)
	converged(t, leader.c, clusters(ms...)...)
	trans := func(m *member) *raft.InmemTransport { return m.c.trans.(*raft.InmemTransport) }

	var minority, majority []*member
	minority = append(minority, leader)
	for _, m := range ms {
		if m == leader {
			continue
		}
		if len(minority) < 2 {
			minority = append(minority, m)
		} else {
			majority = append(majority, m)
		}
	}
	for _, a := range minority {
		for _, b := range majority {
			trans(a).Disconnect(raft.ServerAddress(b.id))
			trans(b).Disconnect(raft.ServerAddress(a.id))
		}
	}
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	lost := register(t, newSigner(t, "lost@example.com"))
	for _, m := range minority {
		if err := m.c.Put(short, lost); err == nil {
			t.Errorf("minority member %s accepted a write", m.id)
		} else if !errors.Is(err, spindle.Transient) {
			t.Errorf("minority member %s: %v, want Transient", m.id, err)
		}
	}
	if err := putRouted(ctx, &liveSet{ms: majority}, register(t, newSigner(t, bob))); err != nil {
		t.Fatal(err)
	}

	// Heal.
	for _, a := range minority {
		for _, b := range majority {
			trans(a).Connect(raft.ServerAddress(b.id), trans(b))
			trans(b).Connect(raft.ServerAddress(a.id), trans(a))
		}
	}
	live := &liveSet{ms: append([]*member(nil), ms...)}
	populateRouted(t, ctx, live)
	converged(t, leaderOf(t, ms).c, clusters(ms...)...)
	for _, m := range ms {
		if _, err := m.c.Lookup(ctx, lost.Name); !errors.Is(err, spindle.NotExist) {
			t.Errorf("%s: the minority's write survived: %v", m.id, err)
		}
		if _, err := m.c.Lookup(ctx, bob); err != nil {
			t.Errorf("%s: the majority's write is missing: %v", m.id, err)
		}
	}

	// Two of five members go; the other three go on.
	l := leaderOf(t, ms)
	live.kill(t, l)
	live.kill(t, live.members()[0])
	populateRouted(t, ctx, live)
	rest := live.members()
	converged(t, leaderOf(t, rest).c, clusters(rest...)...)
}

func clusters(ms ...*member) []*Cluster {
	cs := make([]*Cluster, len(ms))
	for i, m := range ms {
		cs[i] = m.c
	}
	return cs
}
