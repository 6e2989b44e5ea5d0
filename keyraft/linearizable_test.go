package keyraft

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// The linearizability check records what clients saw of registrations,
// updates and leader-routed lookups (LookupLatest) while the cluster's
// leader is cut off and killed, and asks porcupine whether some order of
// the operations, each taking effect between its call and its return,
// explains every answer. A name's record is modelled by its owner (the
// client whose registration won) and version.

type linOp struct {
	kind    byte // 'r' register, 'u' update, 'l' lookup.
	name    int
	client  int   // Who registers or updates.
	version int64 // The version an update makes.
}

type linOut struct {
	ok      bool  // Register or update accepted; for a lookup, found.
	exist   bool  // Register refused: the name is taken.
	owner   int   // Lookup: the owner of the record found.
	version int64 // Lookup: its version.
}

type linState struct {
	owner   int // -1: not registered.
	version int64
}

var linModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, o := range history {
			n := o.Input.(linOp).name
			by[n] = append(by[n], o)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return linState{owner: -1} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(linState), input.(linOp), output.(linOut)
		switch in.kind {
		case 'r':
			if s.owner < 0 {
				return out.ok, linState{owner: in.client, version: 1}
			}
			return out.exist, s
		case 'u':
			ok := out.ok && s.owner == in.client && s.version == in.version-1
			return ok, linState{owner: in.client, version: in.version}
		case 'l':
			if s.owner < 0 {
				return !out.ok, s
			}
			return out.ok && out.owner == s.owner && out.version == s.version, s
		}
		return false, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(linOp), output.(linOut)
		return fmt.Sprintf("%c name%d client%d v%d -> %+v", in.kind, in.name, in.client, in.version, out)
	},
}

// TestLinearizableModelCatchesStaleRead checks that the model refuses a
// history in which a lookup, called after an update returned, sees the
// version before it: the check below can fail.
func TestLinearizableModelCatchesStaleRead(t *testing.T) {
	h := []porcupine.Operation{
		{ClientId: 0, Input: linOp{kind: 'r', name: 0, client: 0}, Call: 0, Output: linOut{ok: true}, Return: 10},
		{ClientId: 0, Input: linOp{kind: 'u', name: 0, client: 0, version: 2}, Call: 20, Output: linOut{ok: true}, Return: 30},
		{ClientId: 1, Input: linOp{kind: 'l', name: 0}, Call: 40, Output: linOut{ok: true, owner: 0, version: 1}, Return: 50},
	}
	if porcupine.CheckOperations(linModel, h) {
		t.Fatal("a stale read after a completed update passed the check")
	}
	h[2].Output = linOut{ok: true, owner: 0, version: 2}
	if !porcupine.CheckOperations(linModel, h) {
		t.Fatal("a linearizable history failed the check")
	}
}

// TestLinearizable runs six clients against five in-memory members while a
// chaos goroutine repeatedly cuts the leader and one follower off from the
// rest (a minority partition) and heals it, then kills the leader.
func TestLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the cluster under partitions for several seconds; skipped with -short")
	}
	const (
		clients = 6
		names   = 4
	)
	runFor := 6 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ms := openMembers(t, 5, false)
	live := &liveSet{ms: append([]*member(nil), ms...)}
	trans := func(m *member) *raft.InmemTransport { return m.c.trans.(*raft.InmemTransport) }
	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }

	var (
		hmu     sync.Mutex
		history []porcupine.Operation
		keyMu   sync.Mutex
		ownerOf = map[spindle.PublicKey]int{} // Each registration's key, and the client that made it.
	)
	record := func(c int, in linOp, call int64, out linOut) {
		hmu.Lock()
		history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: now()})
		hmu.Unlock()
	}
	nameOf := func(i int) spindle.UserName { return spindle.UserName(fmt.Sprintf("lin%d@example.com", i)) }

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			owned := map[int]struct {
				rec *spindle.User
				key *testSigner
			}{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := rng.IntN(names)
				own, isOwner := owned[n]
				switch {
				case isOwner && rng.IntN(2) == 0:
					u := keylog.Next(own.rec)
					if err := keylog.Sign(u, own.key); err != nil {
						t.Error(err)
						return
					}
					call := now()
					if err := putRouted(ctx, live, u); err != nil {
						t.Errorf("client %d: update of %s: %v", c, u.Name, err)
						return
					}
					record(c, linOp{kind: 'u', name: n, client: c, version: u.Version}, call, linOut{ok: true})
					own.rec = u
					owned[n] = own
				case !isOwner && rng.IntN(3) == 0:
					k := newSigner(t, nameOf(n))
					keyMu.Lock()
					ownerOf[k.pub] = c
					keyMu.Unlock()
					u := register(t, k)
					call := now()
					err := putRouted(ctx, live, u)
					switch {
					case err == nil:
						record(c, linOp{kind: 'r', name: n, client: c}, call, linOut{ok: true})
						owned[n] = struct {
							rec *spindle.User
							key *testSigner
						}{u, k}
					case errors.Is(err, spindle.Exist):
						record(c, linOp{kind: 'r', name: n, client: c}, call, linOut{exist: true})
					default:
						t.Errorf("client %d: registration of %s: %v", c, u.Name, err)
						return
					}
				default:
					call := now()
					u, err := lookupRouted(ctx, live, nameOf(n))
					switch {
					case err == nil:
						keyMu.Lock()
						o, known := ownerOf[u.PublicKey]
						keyMu.Unlock()
						if !known {
							t.Errorf("lookup of %s found a key no client made", u.Name)
							return
						}
						record(c, linOp{kind: 'l', name: n}, call, linOut{ok: true, owner: o, version: u.Version})
					case errors.Is(err, spindle.NotExist):
						record(c, linOp{kind: 'l', name: n}, call, linOut{})
					default:
						t.Errorf("client %d: lookup of %s: %v", c, nameOf(n), err)
						return
					}
				}
			}
		})
	}

	// Chaos: cut the leader and one follower off from the other three,
	// heal, and repeat; then kill the leader.
	deadline := time.Now().Add(runFor)
	for round := 0; time.Now().Before(deadline); round++ {
		time.Sleep(300 * time.Millisecond)
		alive := live.members()
		l := leaderOf(t, alive)
		if round == 5 {
			live.kill(t, l)
			continue
		}
		var minority, majority []*member
		minority = append(minority, l)
		for _, m := range alive {
			if m == l {
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
		time.Sleep(500 * time.Millisecond)
		for _, a := range minority {
			for _, b := range majority {
				trans(a).Connect(raft.ServerAddress(b.id), trans(b))
				trans(b).Connect(raft.ServerAddress(a.id), trans(a))
			}
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	kinds := map[byte]int{}
	for _, o := range history {
		kinds[o.Input.(linOp).kind]++
	}
	t.Logf("%d operations: %d registrations, %d updates, %d lookups", len(history), kinds['r'], kinds['u'], kinds['l'])
	if kinds['r'] == 0 || kinds['u'] == 0 || kinds['l'] == 0 {
		t.Fatalf("history lacks a kind of operation: %v", kinds)
	}
	res, info := porcupine.CheckOperationsVerbose(linModel, history, time.Minute)
	switch res {
	case porcupine.Illegal:
		for _, part := range info.PartialLinearizationsOperations() {
			t.Logf("a longest linearizable prefix: %d operations", len(part))
			break
		}
		t.Fatal("the history is not linearizable")
	case porcupine.Unknown:
		t.Log("porcupine could not decide within a minute; the history is not judged")
	}
}

// lookupRouted is a client's leader-routed lookup: LookupLatest on the
// live member that leads, retried on Transient failures.
func lookupRouted(ctx context.Context, live *liveSet, name spindle.UserName) (*spindle.User, error) {
	for {
		var (
			u   *spindle.User
			err error = spindle.E(spindle.Transient, "no leader")
		)
		for _, m := range live.members() {
			if m.c.IsLeader() {
				u, err = m.c.LookupLatest(ctx, name)
				break
			}
		}
		if err == nil || !errors.Is(err, spindle.Transient) {
			return u, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
