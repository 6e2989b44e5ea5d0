package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
)

// A usageStore is a block store that counts what it holds.
type usageStore interface {
	Usage(ctx context.Context) (n, size int64, err error)
}

// serveStatus answers node.status: to the operator (on the operator
// protocol, through the socket), and on the client protocol only to a
// signed-in user the node admits as a writer, without the logs it hosts. Peer counts are public in any case (the DHT answers anyone
// who asks for peers), but what the node holds, and when that grows, is
// its users' business.
func (n *Node) serveStatus(ctx context.Context, operator bool) (*wire.NodeStatusResponse, error) {
	const op spindle.Op = "node.Status"
	st, err := n.Status(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if !operator {
		st.Logs = nil // Whose trees the node hosts is for its operator.
	}
	return &wire.NodeStatusResponse{Status: st}, nil
}

// serveWriterStatus answers node.status on the client protocol, to a
// writer (the method table checks that).
func (n *Node) serveWriterStatus(ctx context.Context, _ *caller, _ *wire.NodeStatusRequest) (*wire.NodeStatusResponse, error) {
	return n.serveStatus(ctx, false)
}

// serveOperatorStatus answers node.status on the operator protocol.
func (n *Node) serveOperatorStatus(ctx context.Context, _ *caller, _ *wire.NodeStatusRequest) (*wire.NodeStatusResponse, error) {
	return n.serveStatus(ctx, true)
}

// Status returns the node's state: its peers, its DHT, what it holds, and
// the directory logs it hosts.
func (n *Node) Status(ctx context.Context) (*wire.Status, error) {
	st := &wire.Status{
		Peer:         n.host.ID().String(),
		Started:      spindle.Time(n.started.UnixNano()),
		Reachability: n.reachability(),
		Peers:        len(n.host.Network().Peers()),
		Relay:        n.cfg.Relay && n.cfg.Host == nil,
	}
	for _, a := range orderAddrs(n.Addrs()) {
		st.Addrs = append(st.Addrs, string(a))
	}
	if d := n.DHT(); d != nil {
		st.DHTPeers = d.RoutingTable().Size()
	}
	if n.book != nil {
		st.Remembered = len(n.book.list())
	}
	if n.replica != nil {
		rs := n.replica.Stats()
		cacheMax := n.replica.CacheMax()
		backlog := int64(rs.RepairBacklog)
		if ps, err := n.replica.ProviderStats(ctx); err == nil {
			// The blocks the sweeping provider keeps announced.
			st.Announced = &ps.Schedule.Keys
		}
		st.CacheBytes, st.CacheMax, st.RepairBacklog = &rs.CachedBytes, &cacheMax, &backlog
		st.HoldLimit, st.ReplicaFull = &rs.HoldLimit, &rs.ReplicaFull
		missing := int64(rs.RepairMissing)
		st.RepairMissing = &missing
	}
	if n.leases != nil {
		held, leased, collectable, waiting, renewed, paused := n.leaseStats()
		st.Leases, st.LeasedBlocks, st.Collectable, st.Unleased, st.LeasesRenewed = &held, &leased, &collectable, &waiting, &renewed
		if !paused.IsZero() {
			t := spindle.Time(paused.UnixNano())
			st.CollectPaused = &t
		}
	}
	for u, why := range n.dir.Waiting() {
		st.LogsWaiting = append(st.LogsWaiting, fmt.Sprintf("%s: %s", u, oneLine(why.Error())))
	}
	for _, d := range n.dir.Damaged() {
		st.LogsDamaged = append(st.LogsDamaged, oneLine(d.Error()))
	}
	slices.Sort(st.LogsWaiting)
	if w := n.witness.Load(); w != nil {
		st.WitnessKey = w.VerifierKey()
		head, _ := w.Head()
		size := int64(0)
		if hi, err := keylog.ParseHead(head); err == nil {
			size = hi.N
		}
		st.WitnessSize = &size
		if at := w.Advanced(); !at.IsZero() {
			st.WitnessAdvanced = wireTime(at)
		}
	}
	n.keyRole(ctx, st)
	if v := n.netView.Load(); v != nil {
		st.Network, st.NetworkMembers, st.NetworkMember = v.Network, len(v.Nodes), v.Network == keylog.NetworkOpen || v.members[n.host.ID()]
	}
	if n.mirrors != nil {
		st.Logs = n.logStatus(ctx)
	}
	u, ok := n.store.(usageStore)
	if !ok {
		return nil, spindle.E(spindle.Internal, "the block store does not count what it holds")
	}
	var err error
	if st.Blocks, st.Bytes, err = u.Usage(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// logStatus reports the node's role, head, lag and last pull error for
// every directory log it holds or mirrors, by user name.
func (n *Node) logStatus(ctx context.Context) []wire.LogStatus {
	all := n.MirrorStatuses(ctx)
	users := slices.Sorted(maps.Keys(all))
	out := make([]wire.LogStatus, 0, len(users))
	for _, u := range users {
		m := all[u]
		ls := wire.LogStatus{User: u, Role: m.Role, Seq: m.Seq, Lag: m.Lag, Pulled: wireTime(m.Pulled)}
		if m.Source != "" {
			ls.Source, ls.SourceSeq = m.Source.String(), m.SourceSeq
		}
		if m.Err != nil {
			// One line: errors from libp2p's dials hold line breaks.
			ls.Err = oneLine(m.Err.Error())
		}
		for _, h := range m.Hosts {
			ls.Hosts = append(ls.Hosts, wire.LogHost{Peer: h.Peer.String(), Seq: h.Seq, Asked: wireTime(h.Asked)})
		}
		out = append(out, ls)
	}
	return out
}

// wireTime returns t for a message, nil if it is zero.
func wireTime(t time.Time) *spindle.Time {
	if t.IsZero() {
		return nil
	}
	st := spindle.Time(t.UnixNano())
	return &st
}

// keyRole fills in the node's place in its key cluster.
func (n *Node) keyRole(ctx context.Context, st *wire.Status) {
	n.joinMu.Lock()
	joining := n.joining != nil
	n.joinMu.Unlock()
	ks := n.kst()
	switch {
	case ks.keys != nil:
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := ks.keys.Status(sctx)
		cancel()
		if err != nil {
			st.KeyRole = "member"
			return
		}
		st.KeyRole, st.KeyLeader, st.KeyLast, st.KeyApplied = "follower", s.Leader, s.LastIndex, s.Applied
		if s.Leader == s.ID {
			st.KeyRole = "leader"
		}
	case joining:
		st.KeyRole = "joining"
	case ks.rkeys != nil:
		st.KeyRole = "client"
		r := ks.rkeys
		r.mu.Lock()
		if r.good >= 0 && r.good < len(r.members) {
			st.KeyMember = r.members[r.good].ID.String()
		}
		r.mu.Unlock()
	}
}
