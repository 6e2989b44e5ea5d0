package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p-kad-dht/provider/stats"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
	"spindle.dev/p2p"
)

// Server returns the store and the configuration with which a node serves
// blocks to other peers ([p2p.ServeBlocks]). isUser reports whether a peer
// is a signed-in user who may store blocks (the node's own rule), and
// isReader whether it is a signed-in user at all.
//
// A user's Put is replicated as by [Store.Put] (a shortfall of copies is
// not reported: the block protocol has no warnings), and a reader's Get
// may fetch from other nodes: a node serves its users whatever they may
// read, wherever it is held. Any other peer is taken for another node of the
// network: it may fetch only what this node holds or has cached, so that
// no request of a stranger sets off a search of the network, and it may
// push a block for replication only if
//
//   - it is a server of the private DHT (in this node's routing table,
//     or speaking the DHT protocol, which a routing table of k peers a
//     bucket cannot all hold) and, in a network that admits only its
//     members, one of them (Config.Member),
//   - this node is among the 2r+2 nodes of its routing table nearest to
//     the block's key, where Put places copies (so that a peer cannot
//     choose which node it fills without grinding block contents), not
//     counting nodes that cannot prove they hold the blocks they take
//     (see responsible), and
//   - the blocks held here, counted from the local store, stay within
//     Config.HoldLimit with it (a block held already is always taken),
//     and the copies this peer pushed that are still held stay within
//     Config.PeerHoldLimit (counted across restarts; see quota.go).
//
// A push refused for the limit fails with [spindle.Full], which the
// pushing node's Store takes as a cue to place the copy on the next
// nearest node, and to try this one last for a while. The limit bounds
// the disk that other nodes, misbehaving ones included, can fill here;
// the second rule bounds which blocks they can place, and a block no dir
// host leases is collected after the lease grace.
//
// A has request is answered from the local store, and so is a prove
// request: a block in the cache is neither kept nor announced, so it is
// not held.
//
// A pushed block is held and announced like one put here. Once
// [Store.Drain] has started, pushes from other nodes are refused (as
// Transient), so that they go to a node that stays.
func (s *Store) Server(isUser, isReader func(peer.ID) bool) (spindle.BlockStore, p2p.BlockServerConfig) {
	srv := &server{s: s, isUser: isUser, isReader: isReader}
	return srv, p2p.BlockServerConfig{CanPut: func(p peer.ID) bool { return isUser(p) || s.isMember(p) }, Has: s.holds, Held: s.local.Get}
}

// holds reports whether the local store holds ref intact: the answer to
// another holder's has request (a block in the cache does not count; it
// is neither kept nor announced).
func (s *Store) holds(ctx context.Context, ref spindle.Ref) (bool, error) {
	return blocks.Holds(ctx, s.local, ref)
}

type server struct {
	s        *Store
	isUser   func(peer.ID) bool
	isReader func(peer.ID) bool
}

func (srv *server) user(ctx context.Context) (peer.ID, bool) {
	p, ok := p2p.BlockPeer(ctx)
	return p, ok && srv.isUser(p)
}

func (srv *server) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "replica.Serve"
	if p, ok := p2p.BlockPeer(ctx); ok && (srv.isUser(p) || srv.isReader != nil && srv.isReader(p)) {
		return srv.s.GetForClient(ctx, ref)
	}
	data, err := srv.s.local.Get(ctx, ref)
	if errors.Is(err, spindle.NotExist) {
		if c, ok := srv.s.cache.get(ref); ok {
			return c, nil
		}
	}
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return data, nil
}

// Recycle implements [blocks.Recycler]: a block Get returned, once sent,
// goes back to where it came from for reuse, a block fetched from
// another node to p2p's buffers ([p2p.RecycleBlock]) and one read from
// the local store to it, if it lends its buffers. Copies from the cache
// are left to the garbage collector.
func (srv *server) Recycle(block []byte) {
	if cap(block) == spindle.MaxStoredBlockSize {
		p2p.RecycleBlock(block)
		return
	}
	if r, ok := srv.s.local.(blocks.Recycler); ok {
		r.Recycle(block)
	}
}

func (srv *server) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "replica.Serve"
	_, isUser := srv.user(ctx)
	if isUser {
		if !srv.s.admitted(srv.s.h.ID()) {
			return "", spindle.E(op, spindle.Permission, fmt.Sprintf("node %s is not a member of its network, which admits only its members, so no other node would keep or find the blocks put here; put through a member node, or have an operator admit this one (spin key node add %s)", srv.s.h.ID(), srv.s.h.ID()))
		}
		if shard.Is(data) {
			// A shard of a block the client erasure-codes: one
			// copy, on a node apart from its siblings (stripe.go).
			return srv.s.PutShard(ctx, data)
		}
		ref, _, err := srv.s.PutCopies(ctx, data)
		return ref, err
	}
	if srv.s.draining() {
		srv.s.refuse()
		return "", spindle.E(op, spindle.Transient, "this node is leaving the network and takes no replicas")
	}
	ref, _, err := blocks.Receive(data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	k, err := keyOf(ref)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if !srv.s.responsible(ctx, string(k), ref, data) {
		srv.s.refuse()
		return "", spindle.E(op, spindle.Permission, fmt.Sprintf("block %s: this node is not among the nearest to its key", ref))
	}
	n := int64(len(data))
	p, _ := p2p.BlockPeer(ctx)
	if err := srv.s.quota.charge(p, ref, n); err != nil {
		srv.s.refuseFull(errors.Is(err, spindle.Full))
		return "", spindle.E(op, err)
	}
	if err := srv.s.admit(ctx, ref, n); err != nil {
		srv.s.quota.release(ref)
		return "", spindle.E(op, err)
	}
	got, err := srv.s.local.Put(ctx, data)
	if err != nil {
		srv.s.unadmit(n)
		srv.s.quota.release(ref)
		return "", spindle.E(op, err)
	}
	srv.s.announce(k)
	return got, nil
}

// admitted reports whether p may hold replicas and be a provider: any
// peer in an open network, a member node in one that admits only its
// members (Config.Member).
func (s *Store) admitted(p peer.ID) bool {
	return s.cfg.Member == nil || s.cfg.Member(p)
}

// isMember reports whether p is a server of the private DHT, and, in a
// network that admits only its members, one of them: one in this
// node's routing table, or one that said so when it connected (libp2p's
// identify protocol lists the DHT protocol). A routing table holds only
// k = 20 peers a bucket, so in a network of more than about a hundred
// nodes most writers are not in it, and pushes from them were refused:
// writers got fewer than r copies, and r = 3 did worse than r = 2.
func (s *Store) isMember(p peer.ID) bool {
	if !s.admitted(p) {
		return false
	}
	if s.dht.RoutingTable().Find(p) != "" {
		return true
	}
	ok, err := s.h.Peerstore().SupportsProtocols(p, p2p.DHTProtocol)
	return err == nil && len(ok) > 0
}

// responsible reports whether this node is among the 2r+2 nodes of its
// routing table nearest to key, not counting nodes that take copies and
// keep none: those that lately failed to prove they hold a block (see
// proof.go), and, when this node is not among the nearest otherwise, those
// of the nodes nearer than it that fail a challenge with the block data
// being pushed (whose ref is ref). Sybils nearest to a key thus cannot
// keep honest nodes from taking its copies. A node nearer than this one
// that does not hold the block says so and still counts, so a pusher still
// cannot choose which honest node it fills.
func (s *Store) responsible(ctx context.Context, key string, ref spindle.Ref, data []byte) bool {
	slack := 2*s.cfg.Replicas + 2
	target := kb.ConvertKey(key)
	nearest := s.withoutUnproven(s.dht.RoutingTable().NearestPeers(target, 2*slack+s.unprovenCount()))
	self := s.h.ID()
	var nearer []peer.ID
	for _, p := range nearest {
		if !kb.Closer(self, p, key) {
			nearer = append(nearer, p)
		}
	}
	if len(nearer) < slack {
		return true
	}
	if len(nearer) >= 2*slack {
		return false // Too far out to be worth challenging the nodes nearer.
	}
	ch := blocks.NewChallenge(data)
	failed := make([]bool, len(nearer))
	var wg sync.WaitGroup
	for i, p := range nearer {
		wg.Go(func() {
			r, err := s.remote(p)
			if err != nil {
				return
			}
			pctx, cancel := context.WithTimeout(ctx, s.cfg.BaseTimeout)
			defer cancel()
			if err := r.Prove(pctx, ref, ch); errors.Is(err, p2p.ErrProofFailed) || errors.Is(err, p2p.ErrNoProofs) {
				s.noteProofFailure(p, err)
				failed[i] = true
			}
		})
	}
	wg.Wait()
	n := 0
	for _, f := range failed {
		if !f {
			n++
		}
	}
	return n < slack
}

func (s *Store) refuse() {
	s.mu.Lock()
	s.refused++
	s.mu.Unlock()
}

// refuseFull counts a push refused for a quota (full) or another reason.
func (s *Store) refuseFull(full bool) {
	s.mu.Lock()
	s.refused++
	if full {
		s.full++
	}
	s.mu.Unlock()
}

// PeerHeld returns the bytes of the copies peer p pushed here that are
// still held: what counts against Config.PeerHoldLimit.
func (s *Store) PeerHeld(p peer.ID) int64 { return s.quota.held(p) }

// Stats describes a Store, for a node's status report.
type Stats struct {
	CachedBlocks   int   // Blocks in the cache of fetched blocks.
	CachedBytes    int64 // Their bytes.
	HeldBytes      int64 // Bytes of blocks held here, as last counted plus those put since.
	HoldLimit      int64 // Config.HoldLimit.
	ReplicaRefused int64 // Pushes from other nodes refused, for any reason.
	ReplicaFull    int64 // Of those, the pushes refused for the hold limit.
	PushedFull     int64 // Pushes to other nodes that they refused as full.
	ProofsFailed   int64 // Challenges other nodes failed or could not answer (see proof.go).
	Unproven       int   // Nodes not counted as holders for now, having failed one.

	// Repair (see [Store.Repair]).
	RepairBacklog   int       // Blocks found short of r live copies and not yet fixed.
	RepairMissing   int       // The copies those blocks lack, to have r each.
	RepairSweepLeft int       // Blocks of the current sweep not yet checked.
	RepairRounds    int64     // Rounds run since the start.
	RepairChecked   int64     // Blocks checked in all rounds.
	RepairShort     int64     // Times a block was found short of copies.
	RepairPushed    int64     // Copies pushed to other nodes.
	RepairFixed     int64     // Times a short block was brought back to r copies.
	RepairFailed    int64     // Times a short block could not be.
	RepairDeferred  int64     // Times a short block waited for the bytes budget.
	LastRepair      time.Time // End of the last round; zero if none ran.
	LastRepairError string    // Why the last round failed, if it did.
	Draining        bool      // Drain has started.

	// Homes (see home.go).
	Trimmed    int64 // Copies deleted here because the r nodes nearest to their blocks hold them.
	HomeScans  int64 // Scans of the blocks held here for nodes that connected.
	HomePushed int64 // Copies those scans pushed to the nodes.

	// Fetches from providers (see hedge.go).
	FetchHedged int64 // Providers asked while waiting for others.
	FetchCut    int64 // Fetches from a provider cut for falling far behind.
	FetchPeers  int   // Peers whose fetches are remembered.

	// Stripes (see stripe.go).
	StripeMoved int64 // Bytes of shards pushed to or fetched from other nodes.
}

// Stats returns the Store's figures. The announcements are described by
// the sweeping provider's own statistics, [Store.ProviderStats].
func (s *Store) Stats() Stats {
	var st Stats
	st.CachedBlocks, st.CachedBytes = s.cache.stats()
	s.mu.Lock()
	st.HeldBytes, st.HoldLimit = s.held, s.cfg.HoldLimit
	st.ReplicaRefused, st.ReplicaFull, st.PushedFull = s.refused, s.full, s.pushFull
	st.ProofsFailed, st.Unproven = s.failed, len(s.unproven)
	st.StripeMoved = s.stripeMoved
	s.mu.Unlock()
	s.repairStats(&st)
	s.seen.stats(&st)
	return st
}

// CacheMax returns the bound of the cache of fetched blocks, 0 if there is
// no cache.
func (s *Store) CacheMax() int64 { return max(s.cfg.CacheBytes, 0) }

// ProviderStats returns the statistics of the sweeping provider that
// announces the blocks held here: keys scheduled and provided, queues,
// the next reprovide, connectivity.
func (s *Store) ProviderStats(ctx context.Context) (stats.Stats, error) {
	st, err := s.prov.Stats(ctx)
	if err != nil {
		return st, spindle.E(spindle.Op("replica.ProviderStats"), spindle.Transient, err)
	}
	return st, nil
}
