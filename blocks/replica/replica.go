// Package replica keeps blocks r-fold on Spindle's private Kademlia DHT.
//
// A [Store] is a [spindle.BlockStore] in front of a node's local store. Put
// stores a block locally and pushes it, over the block exchange protocol,
// to the r−1 other nodes nearest to the block's key by XOR distance, and
// returns once r copies are durable (or says how many it got); a copy
// counts only once its node proves it holds the block (proof.go). Every
// holder announces itself as a provider of the blocks it holds through
// go-libp2p-kad-dht's sweeping provider, which batches announcements by
// keyspace region and reprovides them before the records expire. Get reads
// the local store, then a bounded cache of fetched blocks, then asks the
// DHT for providers and fetches from them, checking the hash of what
// arrives: a provider that sends wrong bytes is dropped for that fetch and
// the block is fetched elsewhere. Anyone can announce a block whose
// address it can compute, so a fetch races the providers: it asks another
// when the ones it waits for send nothing for a while, cuts those that
// fall far behind, and asks first those that served it well (hedge.go).
// For a client of the node, which checks every block itself, the fetch
// passes the bytes on unchecked, caches only what a check off its path
// finds sound, and checks when the client asks again (unchecked.go).
//
// Every holder also checks, in bounded background rounds, that each block
// it holds still has r live holders, and pushes a copy to the nearest node
// lacking it when not ([Store.Repair]); a node about to leave hands its
// blocks on first ([Store.Drain]). A node that comes back is handed the
// blocks written while it was away of which it is among the r nearest,
// and copies beyond those r nodes are trimmed after a grace (home.go).
//
// The key of a block in the DHT is the multihash of its ref, which is a
// CIDv1 with codec raw (see package blocks), so that provider records and
// XOR distances are those of the CID, as in IPFS.
//
// A node uses a Store in place of its local store, and serves blocks to
// other peers through [Store.Server]:
//
//	d, err := p2p.NewDHT(ctx, h, bootstrap)
//	rs, err := replica.New(h, d, diskStore, replica.Config{Replicas: r})
//	srv, cfg := rs.Server(canStore) // canStore: the node's signed-in writers
//	p2p.ServeBlocks(ctx, h, srv, cfg)
//	…
//	rs.Drain(ctx) // if the node leaves for good
//	rs.Close()    // before d.Close(), before h.Close()
package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p-kad-dht/provider"
	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
)

// Defaults for Config.
const (
	DefaultReplicas    = 3
	DefaultCacheBytes  = 256 << 20
	DefaultParallel    = 32
	DefaultMinRate     = 256 << 10 // bytes per second
	DefaultBaseTimeout = 15 * time.Second
	DefaultHoldLimit   = 64 << 30
	// Repair defaults are in repair.go.
)

// Config configures a Store. Zero fields take their defaults.
type Config struct {
	// Replicas is r, the number of copies Put makes of each block: the
	// local one and r−1 on the nodes nearest to the block's key.
	Replicas int
	// CacheBytes bounds the cache of blocks fetched from other nodes
	// (least recently used go first). Negative means no cache.
	CacheBytes int64
	// Parallel is the number of blocks GetMany has in flight at once.
	Parallel int
	// MinRate is the slowest transfer, in bytes per second, that a
	// network operation is given time for: each push or fetch of n bytes
	// may take BaseTimeout + n/MinRate, and a fetch queued behind others
	// on the same stream is given time for those as well. There is no
	// fixed deadline for moving data.
	MinRate int64
	// BaseTimeout is the fixed part of every network timeout: a DHT
	// lookup, a connection, one round trip.
	BaseTimeout time.Duration
	// HoldLimit bounds the bytes of blocks held here past which copies
	// that other nodes push are refused, with an error of kind
	// [spindle.Full] that the pushing node takes as a cue to place the
	// copy on the next nearest node (DefaultHoldLimit if zero). The
	// count is of every block the local store holds, including those
	// the node's own users put, which are never refused: it is taken
	// from the store when the Store starts (if the store can count what
	// it holds, as blocks/disk and blocks/mem can), and again whenever
	// blocks are collected ([Store.Forget]) or trimmed, so it goes down
	// as blocks go. See [Store.Server].
	HoldLimit int64
	// PeerHoldLimit bounds the bytes of the copies that one other node
	// may have pushed here and that are still held (DefaultPeerHoldLimit
	// if zero); a push beyond it is refused as [spindle.Full]. QuotaFile
	// names the journal in which these charges are kept across restarts
	// (the node puts it beside its store); if empty they are kept in
	// memory only. See quota.go.
	PeerHoldLimit int64
	QuotaFile     string
	// ReprovideInterval is how often the sweeping provider announces
	// every held block again (go-libp2p-kad-dht's default, 22 h, if
	// zero). Provider records live 48 h.
	ReprovideInterval time.Duration
	// RepairInterval is the time between background repair rounds
	// (DefaultRepairInterval if zero; ±25 % at random). Negative means no
	// background rounds: the node calls [Store.Repair] itself, if at all.
	RepairInterval time.Duration
	// RepairBlocks bounds the blocks one repair round checks
	// (DefaultRepairBlocks if zero), and RepairBytes the bytes it pushes
	// to other nodes (DefaultRepairBytes if zero). See [Store.Repair].
	RepairBlocks int
	RepairBytes  int64
	// TrimGrace is how long a copy held beyond its block's home (the r
	// nodes nearest to its key) waits, once every home node holds the
	// block, before a repair round deletes it (DefaultTrimGrace if zero;
	// negative means never). Keep, if set, names blocks never trimmed:
	// a node keeps those its own dir host leases. See [Store.Repair].
	TrimGrace time.Duration
	Keep      func(spindle.Ref) bool
	// Member, if set, reports whether a peer is one of the network's
	// member nodes, in a network that admits only its members (see
	// [spindle.dev/p2p/dht.MembersOnly]): then a push from any other
	// peer that is not a signed-in user is refused, no copy is pushed to
	// another, and another is never counted as a holder or asked as a
	// provider, whatever the DHT says. Nil means an open network: every
	// server of the DHT may be all of these. It must be safe for
	// concurrent use and fast.
	Member func(peer.ID) bool
}

func (c *Config) setDefaults() {
	if c.Replicas <= 0 {
		c.Replicas = DefaultReplicas
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.Parallel <= 0 {
		c.Parallel = DefaultParallel
	}
	if c.MinRate <= 0 {
		c.MinRate = DefaultMinRate
	}
	if c.BaseTimeout <= 0 {
		c.BaseTimeout = DefaultBaseTimeout
	}
	if c.HoldLimit <= 0 {
		c.HoldLimit = DefaultHoldLimit
	}
	if c.PeerHoldLimit <= 0 {
		c.PeerHoldLimit = DefaultPeerHoldLimit
	}
	if c.RepairInterval == 0 {
		c.RepairInterval = DefaultRepairInterval
	}
	if c.RepairBlocks <= 0 {
		c.RepairBlocks = DefaultRepairBlocks
	}
	if c.RepairBytes <= 0 {
		c.RepairBytes = DefaultRepairBytes
	}
	if c.TrimGrace == 0 {
		c.TrimGrace = DefaultTrimGrace
	}
}

// A Store is a replicated block store. It is safe for concurrent use.
type Store struct {
	h     host.Host
	dht   *dht.IpfsDHT
	local spindle.BlockStore
	cfg   Config
	prov  *provider.SweepingProvider
	cache *cache
	quota *quotas // Charges of the copies other nodes pushed here.

	checks chan struct{} // Checks for the cache of blocks passed on unchecked, maxChecks at most (unchecked.go).

	ctx    context.Context // Ends when the Store is closed.
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	remotes     map[peer.ID]*p2p.RemoteStore
	inflight    map[peer.ID]int         // Fetches in progress, per peer, to spread load.
	seen        seen                    // How fetches went, per peer and in all.
	held        int64                   // Bytes held in the local store, as last counted plus those put since.
	putSince    int64                   // Bytes put since the count in progress started.
	refused     int64                   // Replica pushes refused.
	full        int64                   // Replica pushes refused for Config.HoldLimit.
	fullPeer    map[peer.ID]time.Time   // Nodes that refused a push as full, and when.
	pushFull    int64                   // Pushes to other nodes that they refused as full.
	unproven    map[peer.ID]time.Time   // Nodes that could not prove they hold a block, and when (see proof.go).
	failed      int64                   // Challenges other nodes failed or could not answer.
	stripeMoved int64                   // Bytes of shards sent or fetched by stripe operations (stripe.go).
	stripes     map[[32]byte]*placement // Stripes whose shards users put here one by one, by block hash (PutShard).
	closed      bool

	countMu sync.Mutex // Held while the local store is counted; taken before mu.

	roundMu sync.Mutex // Held by a repair round or a drain.
	rmu     sync.Mutex // Guards repair.
	repair  repairProgress
}

var _ spindle.BlockStore = (*Store)(nil)

// New returns a replicated store on host h and its DHT d, in front of the
// local store. The caller closes the Store before d and h. If local is
// also a [spindle.BlockLister], every block it already holds is announced
// in the background, and background repair rounds start (see
// [Store.Repair] and Config.RepairInterval); without a lister, Repair
// and Drain fail.
func New(h host.Host, d *dht.IpfsDHT, local spindle.BlockStore, cfg Config) (*Store, error) {
	const op spindle.Op = "replica.New"
	cfg.setDefaults()
	opts := []provider.Option{
		provider.WithHost(h),
		provider.WithRouter(d),
		provider.WithMessageSender(d.MessageSender()),
		provider.WithSelfAddrs(d.FilteredAddrs),
		provider.WithReplicationFactor(d.BucketSize()),
		provider.WithAddLocalRecord(func(ctx context.Context, k mh.Multihash) error {
			return d.Provide(ctx, cid.NewCidV1(cid.Raw, k), false)
		}),
		provider.WithLoggerName("spindle-provider"),
	}
	if cfg.ReprovideInterval > 0 {
		opts = append(opts, provider.WithReprovideInterval(cfg.ReprovideInterval))
	}
	prov, err := provider.New(opts...)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, err)
	}
	quota, err := openQuotas(cfg.QuotaFile, cfg.PeerHoldLimit)
	if err != nil {
		prov.Close()
		return nil, spindle.E(op, spindle.IO, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Store{
		h: h, dht: d, local: local, cfg: cfg, prov: prov, quota: quota,
		cache:    newCache(cfg.CacheBytes),
		checks:   make(chan struct{}, maxChecks),
		ctx:      ctx,
		cancel:   cancel,
		remotes:  make(map[peer.ID]*p2p.RemoteStore),
		inflight: make(map[peer.ID]int),
		seen:     seen{peers: make(map[peer.ID]peerScore)},
		fullPeer: make(map[peer.ID]time.Time),
		unproven: make(map[peer.ID]time.Time),
		repair:   repairProgress{backlog: make(map[spindle.Ref]int), recent: make(map[spindle.Ref]recentPush), extra: make(map[spindle.Ref]time.Time)},
	}
	if err := s.recount(ctx); err != nil {
		cancel()
		prov.Close()
		quota.close()
		return nil, spindle.E(op, err)
	}
	if l, ok := local.(spindle.BlockLister); ok {
		s.wg.Go(func() { s.announceAll(l) })
		s.wg.Go(s.watchPeers)
		s.startRepair()
	}
	return s, nil
}

// Close stops announcing and closes the streams to other nodes. It does
// not close the local store, the DHT or the host.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	remotes := s.remotes
	s.remotes = nil
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	for _, r := range remotes {
		r.Close()
	}
	s.quota.close()
	return s.prov.Close()
}

// announceAll announces every block of l, in batches: the sweeping
// provider groups them by keyspace region.
func (s *Store) announceAll(l spindle.BlockLister) {
	const batch = 4096
	var keys []mh.Multihash
	flush := func() {
		if len(keys) > 0 {
			s.prov.StartProviding(false, keys...)
			keys = keys[:0]
		}
	}
	l.List(s.ctx, func(ref spindle.Ref) error {
		if k, err := keyOf(ref); err == nil {
			keys = append(keys, k)
		}
		if len(keys) == batch {
			flush()
		}
		return s.ctx.Err()
	})
	flush()
}

// announce makes this node a provider of the block named by k, and keeps
// it one: the sweeping provider reprovides it with its keyspace region.
func (s *Store) announce(k mh.Multihash) {
	s.prov.StartProviding(false, k)
}

// Announce makes this node a provider of the blocks refs, which it must
// hold, and keeps it one. Put and the blocks pushed to [Store.Server] are
// announced without it; it is for blocks that reach the local store by
// another way.
func (s *Store) Announce(refs ...spindle.Ref) error {
	const op spindle.Op = "replica.Announce"
	keys := make([]mh.Multihash, 0, len(refs))
	for _, ref := range refs {
		k, err := keyOf(ref)
		if err != nil {
			return spindle.E(op, err)
		}
		keys = append(keys, k)
	}
	if err := s.prov.StartProviding(false, keys...); err != nil {
		return spindle.E(op, spindle.Transient, err)
	}
	return nil
}

// keyOf returns the DHT key of a block: the multihash of its CID.
func keyOf(ref spindle.Ref) (mh.Multihash, error) {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, err
	}
	return d.Multihash(), nil
}

// timeout returns the time allowed to move n bytes.
func (s *Store) timeout(n int64) time.Duration {
	return s.cfg.BaseTimeout + time.Duration(n*int64(time.Second)/s.cfg.MinRate)
}

// remote returns the block store of peer p, sharing one stream among all
// calls.
func (s *Store) remote(p peer.ID) (*p2p.RemoteStore, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, spindle.E(spindle.Invalid, "replicated store is closed")
	}
	r := s.remotes[p]
	if r == nil {
		r = p2p.NewRemoteStore(s.h, p)
		s.remotes[p] = r
	}
	return r, nil
}

// Put implements [spindle.BlockStore]: it stores data here and on the
// r−1 other nodes nearest to its key, and returns when r copies are
// durable. If the network has fewer nodes that take the block, the block
// is still stored, and Put returns its ref together with a
// *[spindle.Warning] saying how many copies there are (use
// [Store.PutCopies] for the count itself). An error of any other type
// means the block was not stored here.
func (s *Store) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "replica.Put"
	ref, copies, problems, err := s.put(ctx, data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if copies < s.cfg.Replicas {
		msg := fmt.Sprintf("block %s has %d of %d copies", ref, copies, s.cfg.Replicas)
		if len(problems) > 0 {
			msg += ": " + errors.Join(problems...).Error()
		} else {
			msg += ": the network has no more nodes that can hold it"
		}
		return ref, &spindle.Warning{Problems: []error{spindle.E(op, spindle.Transient, msg)}}
	}
	return ref, nil
}

// PutCopies is Put that returns the number of durable copies made,
// including the local one, instead of a warning when there are fewer than
// r. An error means the block was not stored here.
func (s *Store) PutCopies(ctx context.Context, data []byte) (spindle.Ref, int, error) {
	ref, copies, _, err := s.put(ctx, data)
	if err != nil {
		return "", 0, spindle.E(spindle.Op("replica.PutCopies"), err)
	}
	return ref, copies, nil
}

// put stores data here and on up to r−1 nearest nodes, returning the
// copies made and why any push failed.
func (s *Store) put(ctx context.Context, data []byte) (spindle.Ref, int, []error, error) {
	ref, err := s.local.Put(ctx, data)
	if err != nil {
		return "", 0, nil, err
	}
	s.addHeld(int64(len(data)))
	k, err := keyOf(ref)
	if err != nil {
		return "", 0, nil, err
	}
	s.announce(k)
	need := s.cfg.Replicas - 1
	if need <= 0 {
		return ref, 1, nil, nil
	}
	candidates, err := s.closestPeers(ctx, k)
	if err != nil {
		// No other node known: one copy, here.
		return ref, 1, []error{err}, nil
	}
	done, problems := s.push(ctx, ref, data, blocks.NewChallenge(data), candidates, need)
	return ref, 1 + len(done), problems, nil
}

// closestPeers returns the other nodes nearest to key k, nearest first;
// in a network of members, only members.
func (s *Store) closestPeers(ctx context.Context, k mh.Multihash) ([]peer.ID, error) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.BaseTimeout)
	defer cancel()
	peers, err := s.dht.GetClosestPeers(lctx, string(k))
	if err != nil && len(peers) == 0 {
		return nil, spindle.E(spindle.Transient, fmt.Errorf("finding the nodes nearest to the block: %w", err))
	}
	self := s.h.ID()
	out := peers[:0]
	for _, p := range peers {
		if p != self && s.admitted(p) {
			out = append(out, p)
		}
	}
	return kb.SortClosestPeers(out, kb.ConvertKey(string(k))), nil
}

// push stores the block on need of the candidates, nearest first, moving
// on to the next candidate for each push that fails. A copy counts only
// once its node proves it holds the block (see proof.go); nodes that
// lately failed to are not pushed to. A node that lately refused a push
// for its hold limit ([spindle.Full]) is tried only after all the
// others. The nodes are challenged with ch, made from data, each once. It
// returns the nodes that took a copy and the failures.
func (s *Store) push(ctx context.Context, ref spindle.Ref, data []byte, ch blocks.Challenge, candidates []peer.ID, need int) ([]peer.ID, []error) {
	candidates = s.fullLast(s.withoutUnproven(candidates))
	var done []peer.ID
	var problems []error
	for need > 0 && len(candidates) > 0 {
		n := min(need, len(candidates))
		batch := candidates[:n]
		candidates = candidates[n:]
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, p := range batch {
			wg.Go(func() { errs[i] = s.pushTo(ctx, p, ref, data, ch) })
		}
		wg.Wait()
		for i, err := range errs {
			switch {
			case err == nil:
				done = append(done, batch[i])
				need--
			case errors.Is(err, spindle.Full):
				s.markFull(batch[i])
				problems = append(problems, err)
			default:
				problems = append(problems, err)
			}
		}
	}
	return done, problems
}

// pushTo stores the block on peer p, allowing time in proportion to its
// size, and then challenges p with ch to prove that it holds it: a
// node's word that it stored a copy is not a copy.
func (s *Store) pushTo(ctx context.Context, p peer.ID, ref spindle.Ref, data []byte, ch blocks.Challenge) error {
	r, err := s.remote(p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout(int64(len(data))))
	defer cancel()
	if err := r.PutRef(ctx, ref, data); err != nil {
		return err
	}
	if err := r.Prove(ctx, ref, ch); err != nil {
		s.noteProofFailure(p, err)
		return fmt.Errorf("node %s took block %s but does not prove it holds it: %w", p, ref, err)
	}
	return nil
}

// Get implements [spindle.BlockStore]: it returns the block from the
// local store, else from the cache, else from a provider found through
// the DHT, racing them (see hedge.go). A provider that sends bytes other
// than the block is dropped for this fetch and asked last after it.
func (s *Store) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "replica.Get"
	data, err := s.get(ctx, ref, newFetch())
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return data, nil
}

// getTries is how many times GetMany fetches a block whose fetch failed
// for a time (Transient: a timeout) before it gives up on the block.
const getTries = 3

// GetMany fetches the blocks refs, Config.Parallel at a time, and calls fn
// with each (never concurrently, in no particular order) until fn returns
// an error, which GetMany then returns. Providers that send wrong bytes
// are dropped for the rest of the call; a block whose fetch times out is
// fetched again, up to getTries times in all. fn must not keep data after
// it returns unless it copies it.
func (s *Store) GetMany(ctx context.Context, refs []spindle.Ref, fn func(i int, data []byte) error) error {
	const op spindle.Op = "replica.GetMany"
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := newFetch()
	next := make(chan int)
	var (
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for range min(s.cfg.Parallel, len(refs)) {
		wg.Go(func() {
			for i := range next {
				data, err := s.get(ctx, refs[i], f)
				// A fetch that timed out on a slow or lossy link,
				// or behind a busy holder, is tried again with
				// time of its own, rather than fail the whole get.
				for try := 1; err != nil && try < getTries && errors.Is(err, spindle.Transient) && ctx.Err() == nil; try++ {
					data, err = s.get(ctx, refs[i], f)
				}
				if err != nil {
					fail(spindle.E(op, err))
					continue
				}
				mu.Lock()
				if firstErr == nil {
					if err := fn(i, data); err != nil {
						firstErr = err
						cancel()
					}
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range refs {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return spindle.E(op, spindle.Transient, ctx.Err())
	}
	return firstErr
}

// A fetch is the state shared by the gets of one call: the providers
// found to send wrong bytes.
type fetch struct {
	mu  sync.Mutex
	bad map[peer.ID]bool
}

func newFetch() *fetch { return &fetch{bad: make(map[peer.ID]bool)} }

func (f *fetch) isBad(p peer.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bad[p]
}

func (f *fetch) drop(p peer.ID) {
	f.mu.Lock()
	f.bad[p] = true
	f.mu.Unlock()
}

func (s *Store) get(ctx context.Context, ref spindle.Ref, f *fetch) ([]byte, error) {
	k, err := keyOf(ref)
	if err != nil {
		return nil, err
	}
	data, err := s.local.Get(ctx, ref)
	damaged := errors.Is(err, spindle.Integrity)
	switch {
	case err == nil:
		return data, nil
	case errors.Is(err, spindle.NotExist), damaged:
		// Fetch it from the network.
	default:
		return nil, err
	}
	local := err
	data, ok := s.cache.get(ref)
	if !ok {
		if s.dht.RoutingTable().Size() == 0 {
			// No other node known: what the local store says is all
			// there is to say (a missing block, or the damage found).
			return nil, local
		}
		if data, err = s.fetch(ctx, ref, k, f); err != nil {
			if damaged && errors.Is(err, spindle.NotExist) {
				return nil, errors.Join(local, err) // The damage is the news.
			}
			return nil, err
		}
		if !damaged {
			s.keepFetched(ctx, ref, data)
		}
	}
	if damaged {
		// The local store discarded a bad copy of a block it held: hold
		// a good one again, so that the block keeps its r copies.
		s.local.Put(ctx, data)
	}
	return data, nil
}

// fetchFrom gets the block from peer p, through r, its store. It is
// given time for a largest block, and for those already queued on the
// same stream.
func (s *Store) fetchFrom(ctx context.Context, r *p2p.RemoteStore, ref spindle.Ref) ([]byte, error) {
	p := r.Peer()
	s.mu.Lock()
	s.inflight[p]++
	queued := int64(s.inflight[p])
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.inflight[p]--; s.inflight[p] <= 0 {
			delete(s.inflight, p)
		}
		s.mu.Unlock()
	}()
	unchecked := isUnchecked(ctx)
	ctx, cancel := context.WithTimeout(ctx, s.timeout(queued*spindle.MaxStoredBlockSize))
	defer cancel()
	if unchecked {
		return r.Fetch(ctx, ref) // For a client that checks it (unchecked.go).
	}
	return r.Get(ctx, ref) // Checks the hash: wrong bytes are Integrity.
}

// Forget stops announcing the blocks refs, which the local store no
// longer holds (garbage collection deleted them), and counts the bytes
// the local store holds again, for Config.HoldLimit, and the bytes
// charged to the nodes that pushed them, for Config.PeerHoldLimit.
func (s *Store) Forget(refs ...spindle.Ref) error {
	const op spindle.Op = "replica.Forget"
	keys := make([]mh.Multihash, 0, len(refs))
	for _, ref := range refs {
		k, err := keyOf(ref)
		if err != nil {
			return spindle.E(op, err)
		}
		keys = append(keys, k)
	}
	if err := s.quota.release(refs...); err != nil {
		return spindle.E(op, err)
	}
	if err := s.prov.StopProviding(keys...); err != nil {
		return spindle.E(op, spindle.Transient, err)
	}
	if err := s.recount(s.ctx); err != nil {
		return spindle.E(op, err)
	}
	return nil
}
