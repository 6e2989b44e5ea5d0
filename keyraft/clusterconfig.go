package keyraft

import (
	"context"
	"slices"
	"strconv"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// ClusterConfig is a copy of the cluster's configuration.
type ClusterConfig struct {
	Seq       int64                        // Changes applied.
	Members   map[string]string            // Recorded members' note verifier keys, by member ID.
	Operators []spindle.PublicKey          // Sorted.
	Admitted  []spindle.PublicKey          // Node operator keys that may join; sorted.
	Policy    string                       // keylog.PolicyOpen or keylog.PolicyDomain.
	Domains   map[string]spindle.PublicKey // Domain admin keys.
	Witnesses map[string]string            // Witnesses' note verifier keys, by ID.
	Quorum    int                          // Witnesses that must cosign a head.
	Network   string                       // keylog.NetworkOpen or keylog.NetworkMembers.
	Nodes     []string                     // Peer IDs of the network's member nodes (keylog.ConfigState.NetworkMembers); sorted.
}

// Config returns this member's view of the cluster's configuration.
func (c *Cluster) Config() ClusterConfig {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	cfg := &c.fsm.st.cfg
	ws, k := cfg.Witnesses()
	return ClusterConfig{
		Seq:       cfg.Seq(),
		Witnesses: ws,
		Quorum:    k,
		Members:   cfg.Members(),
		Operators: cfg.Operators(),
		Admitted:  cfg.Admitted(),
		Policy:    cfg.Policy(),
		Domains:   cfg.Domains(),
		Network:   cfg.Network(),
		Nodes:     cfg.NetworkMembers(),
	}
}

// IsMember reports whether the configuration records member id.
func (c *Cluster) IsMember(id string) bool {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	return c.fsm.st.cfg.IsMember(id)
}

// Change applies a configuration change, signed by an operator, through
// Raft, as Put does a record. Only the leader judges it against the
// configuration, and every member checks it again when applying it; a
// member that is not the leader checks only its form (a malformed change
// is Invalid) and then returns Transient wrapping [ErrNotLeader], for the
// caller to forward the change to [Cluster.Leader]. Applying the last
// change again is not an error. Error kinds: Invalid (malformed, or a
// sequence that does not follow: a stale or replayed change), Permission
// (not signed by a current operator), NotExist (removing a key that is no
// operator's), Transient.
func (c *Cluster) Change(ctx context.Context, ch *keylog.Change) error {
	const op spindle.Op = "keyraft.Change"
	if ch == nil {
		return spindle.E(op, spindle.Invalid, "nil config change")
	}
	enc := keylog.EncodeChange(ch)
	ch, err := keylog.DecodeChange(enc)
	if err != nil {
		return spindle.E(op, err)
	}
	if err := c.leading(ctx, ""); err != nil {
		return spindle.E(op, err)
	}
	c.fsm.mu.RLock()
	dup, err := c.fsm.st.checkChange(ch, true)
	c.fsm.mu.RUnlock()
	if err != nil {
		return spindle.E(op, err)
	}
	if dup {
		return nil
	}
	if err := c.submit(ctx, &putReq{name: spindle.UserName("config change " + ch.Kind), enc: enc}); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Join adds a member: ch, a ChangeAddMember signed by the node operator
// who vouches for it (a key the operators admitted, or an operator's),
// records the member and its verifier key in the configuration, and the
// member becomes a voter. A node whose operator's key no operator admitted
// is refused with Permission and nothing changes. It runs on the leader
// (else Transient wrapping ErrNotLeader). Joining again with the same
// change is not an error, so a Join whose outcome is unknown is repeated.
func (c *Cluster) Join(ctx context.Context, ch *keylog.Change) error {
	const op spindle.Op = "keyraft.Join"
	if ch == nil || ch.Kind != keylog.ChangeAddMember {
		return spindle.E(op, spindle.Invalid, "a join request is an add-member config change")
	}
	id, err := keylog.MemberOfVerifierKey(ch.Arg)
	if err != nil {
		return spindle.E(op, err)
	}
	if err := c.Change(ctx, ch); err != nil {
		return spindle.E(op, err)
	}
	if err := c.AddVoter(ctx, id); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Leave removes a member: ch, a ChangeRemoveMember signed by an operator
// or by the node operator who vouched for the member, removes it from the
// configuration, whose log clients follow, and from the voters. It runs on
// the leader.
func (c *Cluster) Leave(ctx context.Context, ch *keylog.Change) error {
	const op spindle.Op = "keyraft.Leave"
	if ch == nil || ch.Kind != keylog.ChangeRemoveMember {
		return spindle.E(op, spindle.Invalid, "a leave request is a remove-member config change")
	}
	if err := c.Change(ctx, ch); err != nil {
		return spindle.E(op, err)
	}
	if err := c.RemoveServer(ctx, ch.Arg); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Status is what a member knows of the cluster, for `spin key members`.
type Status struct {
	ID          string   // This member.
	VerifierKey string   // This member's tree-head verifier key.
	Leader      string   // The leader's ID, or "" if none is known.
	Members     []string // The voters' IDs, sorted.
	Term        uint64   // The current Raft term.
	LastIndex   uint64   // The last Raft log index this member holds.
	Applied     uint64   // The last Raft log index applied to its state.
	Config      ClusterConfig
	Witnessed   map[string]WitnessSeen // What this member last heard from each witness.
}

// Status returns this member's view of the cluster. Error kinds:
// Transient (ctx ended before raft answered).
func (c *Cluster) Status(ctx context.Context) (*Status, error) {
	const op spindle.Op = "keyraft.Status"
	ids, err := c.Members(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	slices.Sort(ids)
	term, _ := strconv.ParseUint(c.raft.Stats()["term"], 10, 64)
	return &Status{
		ID:          c.cfg.ID,
		VerifierKey: c.vkey,
		Leader:      c.Leader(),
		Members:     ids,
		Term:        term,
		LastIndex:   c.raft.LastIndex(),
		Applied:     c.raft.AppliedIndex(),
		Config:      c.Config(),
		Witnessed:   c.WitnessesSeen(),
	}, nil
}
