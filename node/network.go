package node

// The network's member nodes.
//
// Which nodes may be servers of the DHT, hold replicas and be providers
// is the network's policy, recorded in the key cluster's configuration
// (keylog.ChangeNetwork, keylog.ChangeAddNode): open, or members only,
// where the members are the nodes the operators admitted and the key
// cluster's own members. Every node follows it: a member of the key
// cluster from its own replica (every second), any other node by asking
// the cluster (with its members, every memberRefresh). The node keeps the
// newest view it was given, by the configuration's sequence number, so a
// member answering from an older configuration cannot reopen a network;
// it writes it to networkFile in its home and reads it back when it
// starts, so a restart while the cluster cannot be reached keeps the list
// it had. While the cluster cannot be reached, the last list stays in
// force: a node admitted meanwhile is refused, and one removed is still
// taken, until the cluster answers again.
//
// A node that has never had an answer and has no file (a new node whose
// cluster did not answer the first status request) treats the network as
// open until one comes, and logs it: refusing every peer would also cut
// it off from the DHT through which it finds its cluster, and what an
// open network lets a stranger do is bounded (challenges, quotas, hedged
// reads). The answer comes within memberRefresh of the cluster's return.
//
// The view is enforced by the DHT (dht.MembersOnly) and the replica store
// (replica.Config.Member); each change of it is applied to the routing
// table at once (dht.Restrict). Clients, whatever their peer ID, still
// use the client protocol and, signed in, store and read blocks through
// their node as before.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p/dht"
)

// networkFile, in a node's home, holds the last view of the network's
// members the node was given (see netView).
const networkFile = "network-members"

// networkRefresh is how often a member of the key cluster reads the
// network's members from its replica.
const networkRefresh = time.Second

// A netView is what a node knows of its network's policy and members.
// It is never changed once made.
type netView struct {
	Seq     int64    `json:"seq"`     // Configuration changes applied; -1 while the node knows nothing.
	Network string   `json:"network"` // keylog.NetworkOpen or keylog.NetworkMembers.
	Nodes   []string `json:"nodes"`   // Member nodes' peer IDs, sorted.

	members map[peer.ID]bool
}

// newNetView makes a view of a configuration; peer IDs that do not
// decode are skipped.
func newNetView(seq int64, network string, nodes []string) *netView {
	if network == "" {
		network = keylog.NetworkOpen // From a member older than network policies.
	}
	v := &netView{Seq: seq, Network: network, Nodes: slices.Sorted(slices.Values(nodes)), members: make(map[peer.ID]bool)}
	for _, id := range v.Nodes {
		if p, err := peer.Decode(id); err == nil {
			v.members[p] = true
		}
	}
	return v
}

func (v *netView) same(o *netView) bool {
	return v.Seq == o.Seq && v.Network == o.Network && slices.Equal(v.Nodes, o.Nodes)
}

// isNetMember reports whether p may be a server of the node's DHT, hold
// replicas and be a provider: in an open network any node, else the
// network's members. Until the node has learnt its network, any node is
// (see above; the routing table is brought in line once it learns).
// Asked of the node itself, it reports whether the node may hold blocks
// for others (see replica.Config.Member).
func (n *Node) isNetMember(p peer.ID) bool {
	v := n.netView.Load()
	if v == nil || v.Network == keylog.NetworkOpen {
		return true
	}
	return v.members[p]
}

// setNetView makes v the node's view of the network, unless it knows a
// newer configuration already, writes it to the home and applies it to
// the routing table.
func (n *Node) setNetView(v *netView) {
	n.netMu.Lock()
	defer n.netMu.Unlock()
	cur := n.netView.Load()
	if cur != nil && (cur.Seq > v.Seq || cur.same(v)) {
		return
	}
	n.netView.Store(v)
	if n.cfg.Home != "" && v.Seq >= 0 {
		data, err := json.Marshal(v)
		if err == nil {
			err = spindle.ReplaceFile(filepath.Join(n.cfg.Home, networkFile), data, 0o600, true)
		}
		if err != nil {
			n.log.Warn("cannot keep the network's members in the home", "err", err)
		}
	}
	var dropped, added int
	if d := n.DHT(); d != nil {
		dropped, added = dht.Restrict(d, n.isNetMember)
	}
	n.log.Info("network members", "network", v.Network, "members", len(v.Nodes), "config", v.Seq, "dropped", dropped, "added", added)
	if v.Network == keylog.NetworkMembers && !v.members[n.host.ID()] {
		n.log.Warn("this node is not a member of its network, which admits only its members: it holds no blocks for others and serves no user's puts; an operator admits it with: spin key node add " + n.host.ID().String())
	}
}

// loadNetView reads the view kept in the home, if any.
func (n *Node) loadNetView() {
	if n.cfg.Home == "" {
		return
	}
	data, err := os.ReadFile(filepath.Join(n.cfg.Home, networkFile))
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var v netView
	if err == nil {
		err = json.Unmarshal(data, &v)
	}
	if err == nil && v.Network != keylog.NetworkOpen && v.Network != keylog.NetworkMembers {
		err = fmt.Errorf("unknown network policy %q", v.Network)
	}
	if err != nil {
		n.log.Warn("ignoring the network's members kept in the home; the cluster is asked again", "err", err)
		return
	}
	n.setNetView(newNetView(v.Seq, v.Network, v.Nodes))
}

// learnNetwork looks at the key cluster's configuration once: the
// node's own replica, or a member's status.
func (n *Node) learnNetwork(ctx context.Context) error {
	st := n.kst()
	if st.keys != nil {
		c := st.keys.Config()
		n.setNetView(newNetView(c.Seq, c.Network, c.Nodes))
		return nil
	}
	resp, err := st.rkeys.status(ctx)
	if err != nil {
		return err
	}
	n.learnNetworkStatus(resp.Status)
	return nil
}

// learnNetworkStatus takes the network's members from a member's status.
func (n *Node) learnNetworkStatus(s *wire.ClusterStatus) {
	if s != nil {
		n.setNetView(newNetView(s.Seq, s.Network, s.Nodes))
	}
}

// startNetwork looks at the key cluster once the node has one, and then,
// if the node is a member of it, every networkRefresh (a node that is
// none learns with its members: see remoteKeys.refreshMembers).
func (n *Node) startNetwork(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	err := n.learnNetwork(lctx)
	cancel()
	if err != nil && n.netView.Load() == nil {
		n.log.Warn("the key cluster does not say yet which nodes are the network's members; the network is taken as open until it does", "err", oneLine(err.Error()))
	}
	n.bg.Go(func() {
		t := time.NewTicker(networkRefresh)
		defer t.Stop()
		for {
			select {
			case <-n.ctx.Done():
				return
			case <-t.C:
			}
			if n.kst().keys != nil {
				n.learnNetwork(n.ctx)
			}
		}
	})
}
