package keyraft

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
)

// converged waits until every member holds the same state as want.
func converged(t *testing.T, want *Cluster, ms ...*Cluster) {
	t.Helper()
	for _, m := range ms {
		eventually(t, "member "+m.ID()+" converges", func() bool {
			return bytes.Equal(snapshotBytesLocked(t, m), snapshotBytesLocked(t, want))
		})
	}
}

func snapshotBytesLocked(t *testing.T, c *Cluster) []byte { return snapshotBytes(t, c.fsm) }

// TestPartition isolates the leader of a three-member in-memory cluster:
// the majority elects a new leader and goes on, the isolated member cannot
// commit, and after the partition heals it catches up.
func TestPartition(t *testing.T) {
	ctx := ctxT(t)
	ms := openMembers(t, 3, false)
	leader := leaderOf(t, ms)
	populate(t, leader.c, 0, 3)
	trans := func(m *member) *raft.InmemTransport { return m.c.trans.(*raft.InmemTransport) }

	var rest []*member
	for _, m := range ms {
		if m != leader {
			rest = append(rest, m)
		}
	}
	// Cut the leader off in both directions.
	trans(leader).DisconnectAll()
	for _, m := range rest {
		trans(m).Disconnect(raft.ServerAddress(leader.id))
	}
	nl := leaderOf(t, rest)
	mustPutT(t, nl.c, register(t, newSigner(t, bob)))

	// The old leader cannot commit: whatever it answers is not success.
	err := leader.c.Put(ctx, register(t, newSigner(t, ann)))
	if !errors.Is(err, spindle.Transient) {
		t.Errorf("Put on the isolated member: %v, want Transient", err)
	}
	if _, err := leader.c.Lookup(ctx, bob); !errors.Is(err, spindle.NotExist) {
		t.Errorf("isolated member knows of bob: %v", err)
	}

	// Heal: the old member rejoins as a follower and catches up.
	for _, m := range rest {
		trans(leader).Connect(raft.ServerAddress(m.id), trans(m))
		trans(m).Connect(raft.ServerAddress(leader.id), trans(leader))
	}
	mustPutT(t, leaderOf(t, ms).c, register(t, newSigner(t, "carol@example.com")))
	converged(t, leaderOf(t, ms).c, leader.c, rest[0].c, rest[1].c)
	if _, err := leader.c.Lookup(ctx, ann); !errors.Is(err, spindle.NotExist) {
		t.Errorf("uncommitted registration of ann survived the partition: %v", err)
	}
}

// TestJoinBySnapshot grows a one-member cluster whose early log is
// compacted into a snapshot, over loopback TCP with bolt on disk: the new
// members receive the snapshot, replay the rest, and survive a restart.
func TestJoinBySnapshot(t *testing.T) {
	ctx := ctxT(t)
	tn := newTCPNet()
	small := func(c *raft.Config) {
		fast(c)
		c.TrailingLogs = 2
		c.SnapshotThreshold = 1 << 20 // Only the explicit snapshot below.
	}
	open := func(id, dir string, bootstrap bool) *Cluster {
		c, err := Open(ctx, Config{
			Dir: dir, ID: id, Listener: tn.listen(t, id), Dial: tn.dial,
			Bootstrap: bootstrap, Logger: testLogger(t).With("m", id), tune: small, ApplyTimeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := open("12D3KooWFirst", t.TempDir(), true)
	populate(t, first, 0, 30)
	if err := first.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	populate(t, first, 30, 3)

	dirs := []string{t.TempDir(), t.TempDir()}
	second := open("12D3KooWSecond", dirs[0], false)
	third := open("12D3KooWThird", dirs[1], false)
	addVoter(t, []*Cluster{first}, second.ID())
	addVoter(t, []*Cluster{first, second}, third.ID())
	converged(t, first, second, third)

	// A follower restarts from its own disk and catches up on what it missed.
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	populate(t, first, 33, 2)
	third = open("12D3KooWThird", dirs[1], false)
	converged(t, first, second, third)
	ids, err := third.Members(ctx)
	if err != nil || len(ids) != 3 {
		t.Errorf("Members after restart = %v, %v", ids, err)
	}
}
