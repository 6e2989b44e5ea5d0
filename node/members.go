package node

// Key cluster membership.
//
// The first node of a key cluster bootstraps it (spin node without
// -keyserver). Another node starts with -keyserver and uses that cluster
// remotely (forward.go) until its operator runs spin key join against it:
// the node opens a Raft replica that belongs to no cluster yet and tells
// the operator the verifier key it will sign tree heads with; the operator
// signs an add-member change for that key (keylog.ChangeAddMember) with a
// key the cluster's operators admitted; the node carries the change to the
// leader, which records the member and adds it as a voter; once the
// node's replica sees itself in the configuration, the node serves keys
// from it. The file joinedFile in its home says so, and a restarted node
// opens its replica again rather than use the cluster remotely.
//
// spin key leave is the reverse: a remove-member change for the node, then
// the node closes its replica, moves it aside (raft.left-TIME in its home)
// and uses the remaining members remotely. Started again, it needs
// -keyserver: without it, it would bootstrap a cluster of its own.
//
// Any node answers key.status (a member from its replica; a node that is
// no member by asking one) and carries key.change to the leader, where the
// cluster checks the change's signature against its operators.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// keyState is the node's key cluster: its own replica (keys), or a remote
// cluster (rkeys); ks is the one in use. It is replaced whole as the node
// joins or leaves.
type keyState struct {
	keys  *keyraft.Cluster
	rkeys *remoteKeys
	ks    keyService
}

func (n *Node) kst() *keyState { return n.keyState.Load() }

// joinedFile, in a node's home, says that the node joined a key cluster
// with spin key join: it opens its replica when it starts.
const joinedFile = "keyraft-member"

// keyServersFile, in a node's home, holds the -keyserver addresses the
// node was last started with, one a line, so that a node started again
// without them uses that key cluster still rather than starting one of
// its own, in which none of its users is registered (issue 31).
const keyServersFile = "keyservers"

// keyServersFor returns the key servers a node on home uses: those given,
// which it remembers, or else those it remembered; remembered reports the
// latter.
func keyServersFor(home string, given []spindle.PeerAddr) (servers []spindle.PeerAddr, remembered bool, err error) {
	if home == "" {
		return given, false, nil
	}
	file := filepath.Join(home, keyServersFile)
	if len(given) > 0 {
		var b strings.Builder
		for _, a := range given {
			b.WriteString(string(a))
			b.WriteByte('\n')
		}
		return given, false, spindle.ReplaceFile(file, []byte(b.String()), 0o600, true)
	}
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, spindle.E(spindle.IO, err)
	}
	for _, line := range strings.Fields(string(data)) {
		servers = append(servers, spindle.PeerAddr(line))
	}
	return servers, len(servers) > 0, nil
}

// joinWait bounds how long a joining or leaving node waits for the
// cluster: less than a client waits for an answer (30 s).
const joinWait = 25 * time.Second

func joined(home string) bool {
	if home == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(home, joinedFile))
	return err == nil
}

// openCluster opens this node's key cluster replica: with bootstrap, a new
// cluster of one if the home holds none.
func (n *Node) openCluster(ctx context.Context, bootstrap bool) (*keyraft.Cluster, error) {
	ln, err := p2p.Listen(n.host, RaftProtocol)
	if err != nil {
		return nil, err
	}
	keys, err := keyraft.Open(ctx, keyraft.Config{
		Dir:       n.cfg.Home,
		ID:        n.host.ID().String(),
		Listener:  ln,
		Dial:      n.raftDial,
		Bootstrap: bootstrap,
		// A restarted one-member cluster elects itself after one heartbeat
		// timeout; raft's 1s default suits members across the internet.
		HeartbeatTimeout: 250 * time.Millisecond,
		Logger:           n.log.With("part", "keyraft"),
		Cosign:           n.cosign,
		Witness:          n.askWitness,
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	return keys, nil
}

// raftDial connects to the key cluster member id (a peer ID), finding its
// addresses through the DHT if the node does not know them.
func (n *Node) raftDial(ctx context.Context, id string) (net.Conn, error) {
	pid, err := peer.Decode(id)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("member ID %q is not a peer ID: %v", id, err))
	}
	n.findAddrs(ctx, pid)
	return p2p.Dial(ctx, n.host, RaftProtocol, spindle.PeerAddr(id))
}

// cosign asks member id to sign the text of a tree head (keyraft.Config.Cosign).
func (n *Node) cosign(ctx context.Context, id string, text []byte) ([]byte, error) {
	pid, err := peer.Decode(id)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("member ID %q is not a peer ID: %v", id, err))
	}
	resp, err := callNode[wire.KeyCosignRequest, wire.KeyCosignResponse](ctx, n, peer.AddrInfo{ID: pid}, wire.KeyCosign, &wire.KeyCosignRequest{Head: text})
	if err != nil {
		return nil, err
	}
	return resp.Signed, nil
}

// clusterStatus returns the wire form of a member's status.
func clusterStatus(s *keyraft.Status) *wire.ClusterStatus {
	cs := clusterConfigStatus(s)
	for id, ws := range s.Witnessed {
		if cs.WitnessSize == nil {
			cs.WitnessSize, cs.WitnessAt, cs.WitnessErr = map[string]int64{}, map[string]spindle.Time{}, map[string]string{}
		}
		if !ws.At.IsZero() {
			cs.WitnessSize[id], cs.WitnessAt[id] = ws.Size, spindle.Time(ws.At.UnixNano())
		}
		if ws.Err != "" {
			cs.WitnessErr[id] = ws.Err
		}
	}
	return cs
}

func clusterConfigStatus(s *keyraft.Status) *wire.ClusterStatus {
	return &wire.ClusterStatus{
		ID:        s.ID,
		Leader:    s.Leader,
		Term:      s.Term,
		LastIndex: s.LastIndex,
		Applied:   s.Applied,
		Voters:    s.Members,
		Members:   s.Config.Members,
		Seq:       s.Config.Seq,
		Operators: s.Config.Operators,
		Admitted:  s.Config.Admitted,
		Policy:    s.Config.Policy,
		Domains:   s.Config.Domains,
		Witnesses: s.Config.Witnesses,
		Quorum:    s.Config.Quorum,
		Network:   s.Config.Network,
		Nodes:     s.Config.Nodes,
	}
}

// serveKeyStatus answers key.status on a member (forward carries it from
// a node that is none).
func (n *Node) serveKeyStatus(ctx context.Context, _ *caller, _ *wire.KeyStatusRequest) (*wire.KeyStatusResponse, error) {
	keys := n.kst().keys
	if keys == nil {
		return nil, spindle.E(spindle.Op("node.KeyStatus"), spindle.Internal, "no key cluster")
	}
	s, err := keys.Status(ctx)
	if err != nil {
		return nil, spindle.E(spindle.Op("node.KeyStatus"), err)
	}
	return &wire.KeyStatusResponse{Status: clusterStatus(s)}, nil
}

// serveKeyChange applies a configuration change on the leader, or carries
// it there from a member that does not lead.
func (n *Node) serveKeyChange(ctx context.Context, _ *caller, req *wire.KeyChangeRequest) (*wire.KeyChangeResponse, error) {
	if err := n.keyChange(ctx, req.Change); err != nil {
		return nil, err
	}
	return &wire.KeyChangeResponse{}, nil
}

// keyChange applies the encoded configuration change data (see
// serveKeyChange).
func (n *Node) keyChange(ctx context.Context, data []byte) error {
	const op spindle.Op = "node.KeyChange"
	keys := n.kst().keys
	if keys == nil {
		return spindle.E(op, spindle.Internal, "no key cluster")
	}
	ch, err := keylog.DecodeChange(data)
	if err != nil {
		return spindle.E(op, err)
	}
	switch ch.Kind {
	case keylog.ChangeAddMember:
		err = keys.Join(ctx, ch)
	case keylog.ChangeRemoveMember:
		err = keys.Leave(ctx, ch)
	default:
		err = keys.Change(ctx, ch)
	}
	if !errors.Is(err, keyraft.ErrNotLeader) {
		return err
	}
	req, eerr := encodeRequest(wire.KeyChange, &wire.KeyChangeRequest{Change: data})
	if eerr != nil {
		return spindle.E(op, eerr)
	}
	out, ferr := n.toLeader(ctx, req)
	if ferr != nil {
		return spindle.E(op, ferr)
	}
	_, err = wire.DecodeResponse(out)
	return err
}

// serveKeyJoin answers key.join, from the node's operator (see
// wire.KeyJoinRequest), on the operator protocol.
func (n *Node) serveKeyJoin(ctx context.Context, _ *caller, req *wire.KeyJoinRequest) (*wire.KeyJoinResponse, error) {
	const op spindle.Op = "node.KeyJoin"
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	st := n.kst()
	if st.keys != nil {
		return nil, spindle.E(op, spindle.Exist, "this node is a member of its key cluster already")
	}
	if n.joining == nil {
		j, err := n.openCluster(ctx, false)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		n.joining = j
	}
	j := n.joining
	if len(req.Change) == 0 {
		resp, err := st.rkeys.status(ctx)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		return &wire.KeyJoinResponse{Status: resp.Status, Verifier: []byte(j.VerifierKey())}, nil
	}
	ch, err := keylog.DecodeChange(req.Change)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if ch.Kind != keylog.ChangeAddMember || ch.Arg != j.VerifierKey() {
		return nil, spindle.E(op, spindle.Invalid, "a join is an add-member change for this node's verifier key "+j.VerifierKey())
	}
	// A join asked for again, after the first timed out, finds the node
	// recorded and a voter: it only waits. Otherwise the change goes to
	// the leader, again if a leader change cuts it short (the same
	// change again is no change).
	wctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	resp, err := st.rkeys.status(wctx)
	recorded := err == nil && resp.Status != nil && resp.Status.Members[j.ID()] == j.VerifierKey() &&
		slices.Contains(resp.Status.Voters, j.ID())
	if !recorded {
		for {
			_, err := callWith[wire.KeyChangeRequest, wire.KeyChangeResponse](wctx, st.rkeys.callRaw, wire.KeyChange, &wire.KeyChangeRequest{Change: req.Change})
			if err == nil {
				break
			}
			if !errors.Is(err, spindle.Transient) || wctx.Err() != nil {
				return nil, spindle.E(op, err)
			}
			select {
			case <-wctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// Wait until the replica holds the change that adds it, and a leader.
	for {
		s, err := j.Status(wctx)
		if err == nil && s.Leader != "" && slices.Contains(s.Members, j.ID()) && s.Config.Members[j.ID()] != "" {
			break
		}
		select {
		case <-wctx.Done():
			return nil, spindle.E(op, spindle.Transient, "the cluster accepted the join, but this node's replica has not caught up within "+joinWait.String()+"; ask again")
		case <-n.ctx.Done():
			return nil, spindle.E(op, spindle.Transient, "the node is closing")
		case <-time.After(50 * time.Millisecond):
		}
	}
	if n.cfg.Home != "" {
		if err := spindle.ReplaceFile(filepath.Join(n.cfg.Home, joinedFile), []byte(j.ID()+"\n"), 0o600, true); err != nil {
			return nil, spindle.E(op, spindle.IO, err)
		}
	}
	n.keyState.Store(&keyState{keys: j, ks: j})
	n.joining = nil
	n.log.Info("joined the key cluster", "member", j.ID(), "verifier", j.VerifierKey())
	s, err := j.Status(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return &wire.KeyJoinResponse{Status: clusterStatus(s), Verifier: []byte(j.VerifierKey())}, nil
}

// serveKeyLeave answers key.leave, from the node's operator: the node
// leaves its key cluster and uses the remaining members remotely.
func (n *Node) serveKeyLeave(ctx context.Context, _ *caller, req *wire.KeyLeaveRequest) (*wire.KeyLeaveResponse, error) {
	if err := n.keyLeave(ctx, req.Change); err != nil {
		return nil, err
	}
	return &wire.KeyLeaveResponse{}, nil
}

// keyLeave makes the node leave its key cluster by the encoded
// remove-member change data (see serveKeyLeave).
func (n *Node) keyLeave(ctx context.Context, data []byte) error {
	const op spindle.Op = "node.KeyLeave"
	n.joinMu.Lock()
	defer n.joinMu.Unlock()
	keys := n.kst().keys
	if keys == nil {
		return spindle.E(op, spindle.NotExist, "this node is no member of a key cluster")
	}
	ch, err := keylog.DecodeChange(data)
	if err != nil {
		return spindle.E(op, err)
	}
	if ch.Kind != keylog.ChangeRemoveMember || ch.Arg != keys.ID() {
		return spindle.E(op, spindle.Invalid, "a leave is a remove-member change for this node, "+keys.ID())
	}
	s, err := keys.Status(ctx)
	if err != nil {
		return spindle.E(op, err)
	}
	var others []peer.AddrInfo
	for _, id := range s.Members {
		if pid, err := peer.Decode(id); err == nil && id != keys.ID() {
			others = append(others, peer.AddrInfo{ID: pid})
		}
	}
	if len(others) == 0 {
		return spindle.E(op, spindle.Invalid, "this node is the cluster's only member; it cannot leave")
	}
	r := &remoteKeys{n: n, members: others, given: others, versions: make(map[spindle.UserName]verEntry)}
	// A leader that removes itself may learn of the outcome only from
	// the others: on a Transient error, ask them, and try again (the
	// same change again is no change).
	wctx, cancel := context.WithTimeout(ctx, joinWait)
	defer cancel()
	for {
		err := n.keyChange(wctx, data)
		if err == nil {
			break
		}
		if !errors.Is(err, spindle.Transient) {
			return spindle.E(op, err)
		}
		if resp, serr := r.status(wctx); serr == nil && resp.Status != nil &&
			resp.Status.Members[keys.ID()] == "" && !slices.Contains(resp.Status.Voters, keys.ID()) {
			break
		}
		select {
		case <-wctx.Done():
			return spindle.E(op, spindle.Transient, fmt.Errorf("the cluster did not confirm the leave within %v: %w", joinWait, err))
		case <-time.After(200 * time.Millisecond):
		}
	}
	vresp, err := callWith[wire.KeyVerifierRequest, wire.KeyVerifierResponse](ctx, r.callRaw, wire.KeyVerifier, &wire.KeyVerifierRequest{})
	if err != nil {
		return spindle.E(op, fmt.Errorf("left the cluster, but no remaining member answers: %w", err))
	}
	r.vkey = string(vresp.Verifier)
	n.keyState.Store(&keyState{rkeys: r, ks: r})
	n.bg.Go(r.followMembers)
	cerr := keys.Close()
	if n.cfg.Home != "" {
		os.Remove(filepath.Join(n.cfg.Home, joinedFile))
		if err := os.Rename(filepath.Join(n.cfg.Home, "raft"), filepath.Join(n.cfg.Home, fmt.Sprintf("raft.left-%d", time.Now().Unix()))); err != nil {
			return spindle.E(op, spindle.IO, err)
		}
	}
	if cerr != nil {
		n.log.Warn("closing the key cluster replica after leaving", "err", cerr)
	}
	n.log.Info("left the key cluster", "member", keys.ID())
	return nil
}
