package keyraft

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// TestLaggingFollowerLeavesJudgingToLeader cuts a follower off, so that its
// replica lags, and makes on the leader the changes that later requests
// depend on: a registration, a domain admin key, config changes. On the
// lagging follower each such request, which its replica would refuse
// (NotExist, Permission, Invalid for a sequence that does not follow),
// comes back as Transient ErrNotLeader for the caller to forward, and the
// leader accepts it. Malformed requests are still refused at once on the
// follower with Invalid.
func TestLaggingFollowerLeavesJudgingToLeader(t *testing.T) {
	ctx := ctxT(t)
	ms := openMembers(t, 3, false)
	all := &liveSet{ms: ms}
	op, admin := newSigner(t, "op@example.com"), newSigner(t, "admin@example.com")
	for _, ch := range []*keylog.Change{
		signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub}),
		signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangePolicy, Arg: keylog.PolicyDomain}),
	} {
		if err := onLeader(ctx, all, func(c *Cluster) error { return c.Change(ctx, ch) }); err != nil {
			t.Fatalf("change %s: %v", ch.Kind, err)
		}
	}
	leader := leaderOf(t, ms)
	var follower *member
	for _, m := range ms {
		if m != leader {
			follower = m
			break
		}
	}
	eventually(t, "the follower applies the domain policy", func() bool { return follower.c.Config().Seq == 2 })

	trans := func(m *member) *raft.InmemTransport { return m.c.trans.(*raft.InmemTransport) }
	trans(follower).DisconnectAll()
	rest := &liveSet{}
	for _, m := range ms {
		if m != follower {
			trans(m).Disconnect(raft.ServerAddress(follower.id))
			rest.ms = append(rest.ms, m)
		}
	}
	// Should the follower have been elected meanwhile, it steps down once
	// its lease runs out, and the other two elect a leader.
	eventually(t, "the cut-off member does not lead", func() bool { return !follower.c.IsLeader() })

	// Changes the follower does not see, made wherever the leader is.
	mustOnLeader := func(what string, f func(c *Cluster) error) {
		t.Helper()
		if err := onLeader(ctx, rest, f); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	domain := signedChange(t, op, &keylog.Change{Seq: 3, Kind: keylog.ChangeDomain, Arg: "example.com", Key: admin.pub})
	mustOnLeader("register the domain admin key", func(c *Cluster) error { return c.Change(ctx, domain) })
	annKey := newSigner(t, ann)
	annV1 := register(t, annKey)
	annGrant := grantFor(t, admin, annV1)
	mustOnLeader("register ann", func(c *Cluster) error { return c.PutGranted(ctx, annV1, annGrant) })
	if follower.c.Version(ann) != 0 || follower.c.Config().Seq != 2 {
		t.Fatalf("the follower's replica does not lag: ann at version %d, config %d", follower.c.Version(ann), follower.c.Config().Seq)
	}

	bobV1 := register(t, newSigner(t, bob))
	bobGrant := grantFor(t, admin, bobV1)
	annV2 := update(t, annV1, annKey.pub, annKey, "12D3KooWHostB")
	cam := &spindle.User{Name: annCam, PublicKey: newSigner(t, annCam).pub, Version: 1}
	if err := keylog.Sign(cam, annKey); err != nil {
		t.Fatal(err)
	}
	admit := signedChange(t, op, &keylog.Change{Seq: 4, Kind: keylog.ChangeAdmit, Key: newSigner(t, "node@example.com").pub})
	for _, tc := range []struct {
		what  string
		stale spindle.Kind // What the follower's replica says of the request.
		do    func(c *Cluster) error
	}{
		{"a registration granted by a domain admin key the follower has not seen", spindle.Permission,
			func(c *Cluster) error { return c.PutGranted(ctx, bobV1, bobGrant) }},
		{"an update of a user the follower has not seen", spindle.NotExist,
			func(c *Cluster) error { return c.Put(ctx, annV2) }},
		{"a +suffix user of a base user the follower has not seen", spindle.Permission,
			func(c *Cluster) error { return c.Put(ctx, cam) }},
		{"a config change that follows one the follower has not seen", spindle.Invalid,
			func(c *Cluster) error { return c.Change(ctx, admit) }},
	} {
		var stale error
		follower.c.fsm.mu.RLock()
		if strings.HasPrefix(tc.what, "a config change") {
			_, stale = follower.c.fsm.st.checkChange(admit, true)
		} else {
			u, grant := annV2, spindle.Signature(nil)
			switch {
			case strings.Contains(tc.what, "domain admin"):
				u, grant = bobV1, bobGrant
			case strings.Contains(tc.what, "+suffix"):
				u = cam
			}
			_, stale = follower.c.fsm.st.check(u, grant, true)
		}
		follower.c.fsm.mu.RUnlock()
		if !errors.Is(stale, tc.stale) {
			t.Fatalf("%s: the follower's replica says %v, want %v: the test does not show what it means to", tc.what, stale, tc.stale)
		}
		if err := tc.do(follower.c); !errors.Is(err, ErrNotLeader) || !errors.Is(err, spindle.Transient) {
			t.Errorf("%s, on the lagging follower: %v, want Transient ErrNotLeader", tc.what, err)
		}
		if err := onLeader(ctx, rest, tc.do); err != nil {
			t.Errorf("%s, on the leader: %v", tc.what, err)
		}
	}

	// Malformed requests are refused on the follower at once.
	bad := clone(bobV1)
	bad.Signature = nil
	badChange := signedChange(t, op, &keylog.Change{Seq: 5, Kind: keylog.ChangePolicy, Arg: "closed"})
	for _, tc := range []struct {
		what string
		err  error
	}{
		{"the reserved name", follower.c.Put(ctx, register(t, newSigner(t, spindle.AllUsers)))},
		{"an unsigned record", follower.c.Put(ctx, bad)},
		{"an oversized countersignature", follower.c.PutGranted(ctx, bobV1, make(spindle.Signature, keylog.MaxSignatureLen+1))},
		{"an unknown policy", follower.c.Change(ctx, badChange)},
		{"a join without a member key", follower.c.Join(ctx, signedChange(t, op, &keylog.Change{Seq: 5, Kind: keylog.ChangeAddMember, Arg: "nonsense", Key: op.pub}))},
	} {
		if !errors.Is(tc.err, spindle.Invalid) || errors.Is(tc.err, ErrNotLeader) {
			t.Errorf("%s on the follower: %v, want Invalid", tc.what, tc.err)
		}
	}
}

// onLeader runs f on whichever live member leads, and again, on the
// leader then, while it fails with Transient (no leader, or leadership
// lost on a loaded machine), as a client whose request is forwarded does.
func onLeader(ctx context.Context, live *liveSet, f func(c *Cluster) error) error {
	for {
		var err error = spindle.E(spindle.Transient, "no leader")
		for _, m := range live.members() {
			if m.c.IsLeader() {
				err = f(m.c)
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

// TestNewLeaderTermBarrier checks that the first request a leader judges
// in a term waits for a Raft barrier (one log entry more than the
// request's own), so that it is judged on a replica that holds every
// change committed before the election, and that later ones do not.
func TestNewLeaderTermBarrier(t *testing.T) {
	c := memCluster(t)
	before := c.raft.LastIndex()
	mustPut(t, c, register(t, newSigner(t, ann)))
	if got := c.raft.LastIndex() - before; got != 2 {
		t.Errorf("the first Put of the term added %d log entries, want 2 (a barrier and the batch)", got)
	}
	before = c.raft.LastIndex()
	mustPut(t, c, register(t, newSigner(t, bob)))
	if got := c.raft.LastIndex() - before; got != 1 {
		t.Errorf("the second Put of the term added %d log entries, want 1", got)
	}
}
