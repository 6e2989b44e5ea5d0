// Package node runs a Spindle peer: it wires the block store, the key
// cluster, the directory logs and the libp2p host together and serves them
// to clients over the protocol defined in node/wire. The client side, which
// the spin command drives, is node/client.
//
// Any node forwards (forward.go): a node started with Config.KeyServers
// uses a remote key cluster, and a directory request about a tree that
// another node hosts, which its user signed for that node, is carried
// there unchanged. The node in the middle can delay or refuse such a
// request but cannot act as the user: the dir host acts for whoever
// signed, never for a session the node in the middle holds.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"spindle.dev"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/blocks/shard"
	"spindle.dev/dirlog"
	dirhost "spindle.dev/dirlog/host"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// RaftProtocol carries the key cluster's Raft traffic between members.
const RaftProtocol = "/spindle/raft/1"

// Config configures a node. The zero value, with Home set, runs a node that
// stores everything under Home, listens on loopback, and admits no writers.
type Config struct {
	// Home holds the node's state: blocks/, raft/, dirlogs/ and peerkey,
	// and the Unix socket "sock" for clients on this machine. An empty
	// Home keeps everything in memory, for tests.
	Home string
	// Listen lists the multiaddrs to listen on; empty means loopback TCP and
	// QUIC on ephemeral ports.
	Listen []string
	// Writers names who may create a tree on this node and put blocks
	// through it: user names, *@domain wildcards, or "all". It does not
	// govern the copies of blocks that other nodes place here as one of
	// the nearest to their addresses: those are bounded by HoldLimit.
	Writers []string
	// Host, if set, is used instead of a new libp2p host (tests build hosts
	// over mocknet). The node does not close it.
	Host host.Host
	// Logger receives the node's log; nil means slog.Default().
	Logger *slog.Logger
	// NoSocket turns the Unix socket in Home off.
	NoSocket bool
	// Repair names users whose damaged directory logs the node repairs as
	// it starts: a flipped byte the log's chain pins is restored, and
	// otherwise the entries that verify are kept and the rest taken from
	// another dir host of the user, or, if none has them, accepted as
	// lost (see refill.go). A damaged log of another user is refilled
	// from another dir host when one has it, and otherwise not served
	// until its operator repairs it.
	Repair []spindle.UserName
	// CompactAfter, if positive, compacts a directory log into a signed
	// checkpoint once more than CompactAfter entries follow its last one
	// (see dirhost.Config.CompactAfter).
	CompactAfter int
	// Keep is how long the earlier states of a tree this node hosts stay
	// readable, for users whose key records set no window of their own
	// (spindle.User.Keep): its log entries are not compacted and the
	// blocks of its files stay leased. Zero keeps only the current state.
	Keep time.Duration
	// SessionTTL is how long a client stays signed in before it must sign
	// in again (clients do so by themselves); zero means DefaultSessionTTL.
	SessionTTL time.Duration
	// KeyPutLimit bounds the key.put requests one peer may make in a
	// minute; zero means DefaultKeyPutLimit.
	KeyPutLimit int
	// SignupsPerAddr, SignupsPerPrefix and Signups bound the new names
	// registered through this node in an hour: from one source address,
	// from one network prefix (/24 of IPv4, /48 of IPv6), and in all
	// (DefaultSignupsPerAddr, DefaultSignupsPerPrefix and DefaultSignups
	// if zero). Names carried by a member of the key cluster were
	// counted where they arrived.
	SignupsPerAddr, SignupsPerPrefix, Signups int
	// Bootstrap names peers of a network to join: multiaddrs ending in
	// /p2p/<peer ID> (see ParseBootstrap). The node remembers the peers
	// it meets in Home/peers and rejoins through them when it restarts,
	// so Bootstrap is needed the first time only.
	Bootstrap []spindle.PeerAddr
	// NoAutoNAT, NoHolePunch and NoRelayClient turn off what a node
	// runs by default to be reached from behind NAT: AutoNAT, hole
	// punching and the relay client (see p2p.NATConfig). NoPortMap
	// turns off UPnP/NAT-PMP port mapping, which a node tries only when
	// it listens on more than loopback. None applies to a Host given.
	NoAutoNAT, NoHolePunch, NoRelayClient, NoPortMap bool
	// Relay offers relay service (circuit relay v2) to other Spindle
	// nodes, once AutoNAT finds this node reachable from outside.
	Relay bool
	// Replicas is how many copies of each block a put through this node
	// makes: here and on the nodes nearest to the block's address
	// (replica.DefaultReplicas if zero).
	Replicas int
	// Erasure, if not zero, has the clients that put through this node
	// store each block as a stripe of K data and M parity shards, each
	// held once, instead of Replicas whole copies (see
	// replica.Store.PutShard). The entry of each file records the code,
	// so readers need no setting.
	Erasure shard.Scheme
	// CacheBytes bounds the cache of blocks fetched from other nodes
	// (replica.DefaultCacheBytes if zero, none if negative).
	CacheBytes int64
	// HoldLimit bounds the bytes of blocks held here past which copies
	// that other nodes push are refused (replica.DefaultHoldLimit if
	// zero; see replica.Config.HoldLimit). Blocks the Writers put count
	// towards it but are never refused.
	HoldLimit int64
	// PeerHoldLimit bounds the bytes of the copies one other node may
	// have pushed here and that are still held, counted across restarts
	// in Home/replica-quotas (replica.DefaultPeerHoldLimit if zero).
	PeerHoldLimit int64
	// LeaseTerm, LeaseRenew, LeaseGrace and CollectInterval set how
	// blocks no tree references are collected (see node/lease.go and
	// package blocks/lease): the term of the leases this node renews as
	// a dir host, how often it renews them, how long a block without a
	// lease waits before it goes, and how often a collection pass runs.
	// Zero means the default; a negative LeaseRenew or CollectInterval
	// runs no background rounds (tests run them by hand).
	LeaseTerm, LeaseRenew, LeaseGrace, CollectInterval time.Duration
	// now, if set, is the clock of leases and collection, for tests.
	now func() time.Time
	// KeyServers, if set, names members of a key cluster to use instead
	// of running one: multiaddrs ending in /p2p/<peer ID>, which double
	// as Bootstrap peers. The node carries key requests to them (see
	// forward.go).
	KeyServers []spindle.PeerAddr
	// Witness makes the node a witness of its key cluster's log (see
	// witness.go), with its state in Home/witness.
	Witness bool
	// GatewayPerAddr and GatewayConns bound the gateway's connections
	// from one address and in all (GatewayLimits' if zero).
	GatewayPerAddr, GatewayConns int
	// Quotas bound, by writer, the bytes of their files on this node,
	// and DefaultQuota those of writers it does not name; zero or less
	// means none (see quota.go).
	Quotas       map[spindle.UserName]int64
	DefaultQuota int64
	// RateUp and RateDown bound the bytes a second of blocks the node
	// sends to peers over the network and takes from them (served,
	// pushed, put); zero means no limit. Clients on the node's socket
	// are not limited.
	RateUp, RateDown int64
	// Metrics keeps Prometheus metrics of the node and of its libp2p
	// host, served by MetricsHandler (see metrics.go).
	Metrics bool
	// format replaces the node home's format, for tests of migrations.
	format *spindle.HomeFormat
}

// DefaultSessionTTL is the default Config.SessionTTL. A session also ends
// as soon as its user's key record changes.
const DefaultSessionTTL = 12 * time.Hour

// DefaultKeyPutLimit is the default Config.KeyPutLimit: enough for a
// sign-up and a few changes, too few to register names in bulk.
const DefaultKeyPutLimit = 10

// repairWait bounds the repair of one log as the node starts.
const repairWait = 30 * time.Second

// restoreWait bounds how long a restarted key-cluster member waits for
// its replica before it opens the directory logs it hosts.
const restoreWait = 5 * time.Second

// A Node is a running Spindle peer.
type Node struct {
	cfg     Config
	log     *slog.Logger
	host    host.Host
	ownHost bool
	local   host.Host          // The Unix-socket host for clients on this machine, or nil.
	store   spindle.BlockStore // The blocks held here.
	replica *replica.Store     // In front of store: the blocks across the network.
	// userBlocks is the store the block protocol serves, which the
	// client protocol uses for the blocks it carries (see
	// wire.DirBatchRequest.Blocks); called with p2p.WithBlockPeer.
	userBlocks spindle.BlockStore
	leases     *leases // Leases held and renewed, and collection.
	closeBS    func() error
	// The key cluster, which changes as the node joins or leaves it
	// (members.go).
	keyState atomic.Pointer[keyState]
	joinMu   sync.Mutex       // Held while joining or leaving.
	joining  *keyraft.Cluster // Opened to join and not a member yet, or nil.
	dir      *dirhost.Server
	mirrors  *mirrors      // The logs of other dir hosts copied here (mirror.go).
	cosigned cosignedHeads // Heads served with cosignatures (dirwitness.go).
	writers  writerSet
	started  time.Time

	dht  atomic.Pointer[dht.IpfsDHT] // Set once New has started it.
	boot []peer.AddrInfo             // The Bootstrap peers, parsed.
	book *peerBook                   // The peers remembered.
	bg   sync.WaitGroup              // Goroutines that end with ctx.

	ctx context.Context
	// keyLog is the size of the key cluster's log as the node last
	// learnt it, and when (see keyLogSize).
	keyLogMu sync.Mutex
	keyLogN  int64
	keyLogAt time.Time
	cancel   context.CancelFunc

	mu       sync.Mutex
	sessions map[peer.ID]session // Authenticated client peers.

	keyPuts *peerLimiter  // key.put requests per peer.
	signups *signupLimits // New names, per address, prefix and in all.

	signedSeen seenSigned // Signed requests taken (forward.go).
	// answers signs the answers to requests signed for this node
	// (forward.go, signAnswer); set before the client protocol is served.
	answers *p2p.PeerSigner

	// tunnels counts the tunnels carried for clients, tunnelEnds those
	// ended here (tunnel.go).
	tunnels, tunnelEnds tunnelCount
	// relayTap, if set, is given every byte the node carries for a
	// client to another dir host, in plain (forwardDir) or in a tunnel:
	// tests play with it a relay that records what it can.
	relayTap atomic.Pointer[func([]byte)]

	heads    headPub                         // Heads to publish (headpub.go).
	gossiped atomic.Int64                    // Size of the witness head last gossiped (keygossip.go).
	witness  atomic.Pointer[witness.Witness] // If Config.Witness (witness.go).
	dirHosts *dirHostCache                   // For the validator of published heads.

	// netView is what the node knows of which nodes are the network's
	// members (network.go); nil until it first looks. netMu serializes
	// changes of it.
	netView atomic.Pointer[netView]
	netMu   sync.Mutex

	metrics  *metrics          // If Config.Metrics.
	homeLock *spindle.FileLock // Held on HOME/node.lock while the node runs.
	quota    quotas            // Blocks writers put that their trees do not count yet (quota.go).
}

// A session is a client peer signed in as a user.
type session struct {
	user    spindle.UserName
	version int64     // Of the user's key record at sign-in.
	expires time.Time // After which the client must sign in again.
}

// New starts a node. On a fresh home it bootstraps a key cluster of one.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	const op spindle.Op = "node.New"
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	writers, err := parseWriters(cfg.Writers)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, err)
	}
	if !cfg.Erasure.IsZero() {
		if err := cfg.Erasure.Check(); err != nil {
			return nil, spindle.E(op, err)
		}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.KeyPutLimit <= 0 {
		cfg.KeyPutLimit = DefaultKeyPutLimit
	}
	if cfg.SignupsPerAddr <= 0 {
		cfg.SignupsPerAddr = DefaultSignupsPerAddr
	}
	if cfg.SignupsPerPrefix <= 0 {
		cfg.SignupsPerPrefix = DefaultSignupsPerPrefix
	}
	if cfg.Signups <= 0 {
		cfg.Signups = DefaultSignups
	}
	n := &Node{cfg: cfg, log: log, writers: writers, started: time.Now(), sessions: make(map[peer.ID]session),
		keyPuts: newPeerLimiter(cfg.KeyPutLimit, time.Minute, maxLimitedPeers),
		signups: newSignupLimits(cfg.SignupsPerAddr, cfg.SignupsPerPrefix, cfg.Signups)}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	if cfg.Metrics {
		n.metrics = newMetrics(n)
	}
	n.heads.kick = make(chan struct{}, 1)
	n.dirHosts = newDirHostCache()
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if cfg.Home != "" {
		if err := privateHome(cfg.Home, log); err != nil {
			return nil, spindle.E(op, err)
		}
		// The lock first: two nodes must not migrate one home at once.
		if n.homeLock, err = lockHome(cfg.Home); err != nil {
			return nil, spindle.E(op, err)
		}
		f := homeFormat()
		if cfg.format != nil {
			f = *cfg.format
		}
		f.Ignore = append(f.Ignore, homeLockFile) // Taken before the format is read.
		if err := f.OpenHome(cfg.Home); err != nil {
			return nil, spindle.E(op, err)
		}
	}

	// The host.
	if cfg.Host != nil {
		n.host = cfg.Host
	} else {
		h, err := p2p.NewHost(ctx, p2p.Config{Home: cfg.Home, ListenAddrs: cfg.Listen, NAT: n.natConfig(), Metrics: n.metricsRegisterer()})
		if err != nil {
			return nil, spindle.E(op, err)
		}
		n.host, n.ownHost = h, true
	}
	n.host.Network().Notify(&network.NotifyBundle{
		DisconnectedF: func(_ network.Network, c network.Conn) { n.forget(c.RemotePeer()) },
	})

	// The DHT, through which the node joins the network. Key servers
	// double as bootstrap peers.
	// What the node knew of the network's members when it stopped
	// holds until its key cluster tells it more (network.go).
	keyServers, remembered, err := keyServersFor(cfg.Home, cfg.KeyServers)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if remembered && !joined(cfg.Home) {
		log.Info("using the key cluster this node was last started with", "keyservers", keyServers, "file", filepath.Join(cfg.Home, keyServersFile))
	}
	n.cfg.KeyServers = keyServers
	n.cfg.Bootstrap = append(slices.Clone(cfg.Bootstrap), keyServers...)
	n.loadNetView()
	if err := n.startDHT(ctx); err != nil {
		return nil, spindle.E(op, err)
	}

	// The block store.
	if cfg.Home == "" {
		n.store = new(mem.Store)
		n.closeBS = func() error { return nil }
	} else {
		s, err := disk.Open(filepath.Join(cfg.Home, "blocks"))
		if err != nil {
			return nil, spindle.E(op, err)
		}
		n.store, n.closeBS = s, s.Close
	}

	// The key cluster: this node's own, or a remote one. A node that
	// joined a cluster (spin key join) is a member from then on, though
	// it names KeyServers still.
	if len(keyServers) > 0 && !joined(cfg.Home) {
		rkeys, err := n.openRemoteKeys(ctx, keyServers)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		n.keyState.Store(&keyState{rkeys: rkeys, ks: rkeys})
		n.bg.Go(rkeys.followMembers)
	} else {
		keys, err := n.openCluster(ctx, len(keyServers) == 0)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		n.keyState.Store(&keyState{keys: keys, ks: keys})
		// The logs below replay against the writers' key records: give
		// a restarted member a moment to apply what its replica held.
		// Logs whose keys it cannot tell yet wait (see dirhost.Server.Resume).
		rctx, cancel := context.WithTimeout(ctx, restoreWait)
		if err := keys.Restored(rctx); err != nil {
			log.Warn("key replica not restored yet; directory logs that need it wait", "err", err)
		}
		cancel()
	}

	n.startNetwork(ctx)

	if cfg.Witness {
		if err := n.openWitness(); err != nil {
			return nil, spindle.E(op, err)
		}
	}

	// The directory logs.
	// The node signs the heads of the logs it hosts with its peer
	// identity, which the owners' key records name.
	signer, err := p2p.NewPeerSigner(n.host)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	n.answers = signer
	dcfg := dirhost.Config{Keys: n.userKey, KeyHistory: n.keyHistory, KeyLogSize: n.keyLogSize, CheckPut: n.checkPut, Host: signer, Logger: log.With("part", "dirlog"), Fix: cfg.Repair, CompactAfter: cfg.CompactAfter, Retain: n.retention, Now: cfg.now, MoreRefs: shardRefs}
	if cfg.Home == "" {
		n.dir, err = dirhost.New(ctx, new(dirhost.MemStore), dcfg)
	} else {
		n.dir, err = dirhost.Open(ctx, filepath.Join(cfg.Home, "dirlogs"), dcfg)
	}
	if err != nil {
		return nil, spindle.E(op, err)
	}
	n.bg.Go(n.publishLoop)
	n.bg.Go(n.lookupLoop)
	n.bg.Go(n.resumeLoop)
	// Each damaged or repaired log was reported by dirlog as it opened.
	if n.closeBS != nil {
		if s, ok := n.store.(*disk.Store); ok {
			for _, d := range s.Damage() {
				log.Warn("block store damaged", "err", d)
			}
		}
	}

	// The socket for clients on this machine.
	if cfg.Home != "" && !cfg.NoSocket {
		if err := n.listenLocal(ctx); err != nil {
			return nil, spindle.E(op, err)
		}
	}

	// The blocks, kept Replicas-fold across the network: a put through
	// this node stores each block here and on the nodes nearest to its
	// address, and a get of a block not held here finds its holders
	// through the DHT (see package replica).
	// Every put into the local store goes through the collector's
	// guard, so that a block just put is not collected (see lease.go).
	if err := n.openLeases(); err != nil {
		return nil, spindle.E(op, err)
	}
	// Charges of the copies other nodes push here, per node, are kept
	// beside the store.
	var quotaFile string
	if cfg.Home != "" {
		quotaFile = filepath.Join(cfg.Home, "replica-quotas")
	}
	n.replica, err = replica.New(n.host, n.DHT(), n.leases.coll.Guard(), replica.Config{Replicas: cfg.Replicas, CacheBytes: cfg.CacheBytes, HoldLimit: cfg.HoldLimit, PeerHoldLimit: cfg.PeerHoldLimit, QuotaFile: quotaFile, Keep: n.leasesOwn, Member: n.isNetMember})
	if err != nil {
		return nil, spindle.E(op, err)
	}
	n.startLeases()
	blockSrv, blockCfg := n.replica.Server(n.canStore, func(p peer.ID) bool { return n.session(p) != "" })
	if n.metrics != nil {
		blockSrv = countingBlocks{BlockStore: blockSrv, m: n.metrics, user: func(p peer.ID) bool { return n.session(p) != "" }}
	}
	n.userBlocks = blockSrv

	n.startMirrors()
	// The logs the operator asked to repair first, before clients come:
	// from another dir host, or by accepting what verifies.
	for _, u := range cfg.Repair {
		rctx, cancel := context.WithTimeout(ctx, repairWait)
		if slices.ContainsFunc(n.dir.Damaged(), func(d *dirhost.Damage) bool { return d.User == u }) {
			n.refill(rctx, u, true)
		}
		cancel()
	}
	n.bg.Go(n.refillLoop)

	// Serve.
	up, down := newRateLimiter(cfg.RateUp), newRateLimiter(cfg.RateDown)
	for _, h := range n.hosts() {
		lb := limitedBlocks{BlockStore: blockSrv, n: n, up: up, down: down}
		if h == n.local {
			lb.up, lb.down = nil, nil // No network between the node and its socket.
		}
		p2p.ServeBlocks(n.ctx, h, lb, blockCfg)
		p2p.Handle(n.ctx, h, wire.ClientProtocol, wire.MaxMessage, n.ServeClient)
		p2p.HandleStream(n.ctx, h, wire.WatchProtocol, wire.MaxMessage, n.serveWatch)
		h.SetStreamHandler(p2p.TunnelProtocol, n.serveTunnel)
		if h == n.host {
			h.SetStreamHandler(p2p.TunnelEndProtocol, n.serveTunnelEnd)
		}
		if h == n.local {
			// Only the operator reaches the socket (see p2p/local.go).
			p2p.Handle(n.ctx, h, wire.OperatorProtocol, wire.MaxMessage, n.ServeOperator)
		}
	}
	log.Info("node ready", "peer", n.host.ID(), "addrs", n.Addrs(), "socket", n.SocketAddr())
	return n, nil
}

// resumeLoop serves the directory logs that wait for the key cluster
// (see dirhost.Server.Resume) as soon as their keys can be learnt: it
// tries again every resumeEvery while any waits, until the node closes.
func (n *Node) resumeLoop() {
	t := time.NewTicker(resumeEvery)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		if len(n.dir.Waiting()) == 0 {
			continue // A refill may make a log wait later.
		}
		ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
		settled, err := n.dir.Resume(ctx)
		cancel()
		if err != nil {
			n.log.Warn("directory logs waiting for the key cluster could not be read again", "err", err)
		}
		for _, u := range settled {
			n.log.Info("directory log served, now that the key cluster tells its keys", "user", u)
		}
	}
}

// homeFormat is the version of a node home's on-disk formats (see
// spindle.HomeFormat): blocks/, dirlogs/, raft/, peerkey, peers, leases,
// witness and replica-quotas. A change to any of them adds a version and a
// migration step here; see "Upgrades" in docs/operating.md.
func homeFormat() spindle.HomeFormat {
	return spindle.HomeFormat{Kind: "node home", Version: 1}
}

// resumeEvery is how often a node tries again to serve the directory
// logs that wait for the key cluster.
const resumeEvery = time.Second

// privateHome makes the node's home, mode 0700, or tightens an existing
// one whose mode lets other users in: it holds the node's private key,
// its logs and its socket. A home that cannot be tightened (another
// user's) is refused.
func privateHome(home string, log *slog.Logger) error {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return spindle.E(spindle.IO, err)
	}
	fi, err := os.Stat(home)
	if err != nil {
		return spindle.E(spindle.IO, err)
	}
	if !fi.IsDir() {
		return spindle.E(spindle.Invalid, fmt.Sprintf("node home %s is not a directory", home))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		if err := os.Chmod(home, perm&0o700); err != nil {
			return spindle.E(spindle.Permission, fmt.Sprintf("node home %s is open to other users (mode %04o) and cannot be made private: %v", home, perm, err))
		}
		log.Warn("node home was open to other users; made private", "home", home, "was", fmt.Sprintf("%04o", perm), "now", fmt.Sprintf("%04o", perm&0o700))
	}
	return nil
}

// listenLocal starts the host that serves clients on this machine through
// the Unix socket in the node's home (see p2p.NewLocalHost). A home whose
// path is too long for a socket gets none; its clients use TCP.
func (n *Node) listenLocal(ctx context.Context) error {
	path, ok := p2p.SocketPath(n.cfg.Home)
	if !ok {
		n.log.Warn("node home path too long for a Unix socket; local clients will use TCP", "path", path)
		return nil
	}
	h, err := p2p.NewLocalHost(ctx, p2p.LocalConfig{Key: n.host.Peerstore().PrivKey(n.host.ID()), Socket: path})
	if err != nil {
		return err
	}
	h.Network().Notify(&network.NotifyBundle{
		DisconnectedF: func(_ network.Network, c network.Conn) { n.forget(c.RemotePeer()) },
	})
	n.local = h
	return nil
}

// hosts returns the hosts the node serves clients on.
func (n *Node) hosts() []host.Host {
	if n.local != nil {
		return []host.Host{n.host, n.local}
	}
	return []host.Host{n.host}
}

// SocketAddr returns the address of the node's Unix socket, through which
// clients on this machine reach it fastest, or "" if it has none.
func (n *Node) SocketAddr() spindle.PeerAddr {
	if n.local == nil {
		return ""
	}
	if a := p2p.Addrs(n.local); len(a) > 0 {
		return a[0]
	}
	return ""
}

// userKey returns a user's current key from the key cluster.
func (n *Node) userKey(ctx context.Context, user spindle.UserName) (spindle.PublicKey, error) {
	u, err := n.kst().ks.Lookup(ctx, user)
	if err != nil {
		return "", err
	}
	return u.PublicKey, nil
}

// retention returns, from user's key record read once, how long the
// earlier states of user's tree are kept (the window the record sets, or
// the node's default) and the sequences of user's named snapshots. When
// the record cannot be read now, the node's default window is kept, so
// that a key cluster out of reach drops nothing it should keep, and no
// pins: their blocks stay leased until their leases run out, and the
// next renewal asks again.
func (n *Node) retention(ctx context.Context, user spindle.UserName) (time.Duration, []int64) {
	u, err := n.kst().ks.Lookup(ctx, user)
	if err != nil {
		return n.cfg.Keep, nil
	}
	var pins []int64
	for _, p := range u.Pins {
		pins = append(pins, p.Seq)
	}
	switch {
	case u.Keep == spindle.KeepNone:
		return 0, pins
	case u.Keep > 0:
		return time.Duration(u.Keep) * time.Second, pins
	}
	return n.cfg.Keep, pins
}

// checkPut verifies the writer's signature in the packdata of a file
// about to be appended, as readers will, against the name the entry has:
// the key that signed the log entry, or, for a file whose keys its writer
// re-wrapped after a rotation (the packing's signature is kept), a key the
// writer held before.
func (n *Node) checkPut(ctx context.Context, d *spindle.DirEntry, key spindle.PublicKey) error {
	err := pack.Verify(d, []spindle.PublicKey{key})
	if err == nil || !errors.Is(err, spindle.Integrity) {
		return err
	}
	held, herr := n.keyHistory(ctx, d.Writer)
	if herr != nil || len(held) == 0 {
		return err
	}
	old := make([]spindle.PublicKey, len(held))
	for i, h := range held {
		old[i] = h.Key
	}
	return pack.Verify(d, old)
}

// keyHistory returns every key a user has held, oldest first, with how
// far each signs in the user's own tree, from the key cluster's log, so
// that entries signed before a rotation replay (see dirlog.HeldKeys).
func (n *Node) keyHistory(ctx context.Context, user spindle.UserName) ([]dirlog.HeldKey, error) {
	proofs, err := n.kst().ks.History(ctx, user)
	if err != nil {
		return nil, err
	}
	versions := make([]*spindle.User, len(proofs))
	index := make([]int64, len(proofs))
	for i, p := range proofs {
		if versions[i], err = keylog.DecodeRecord(p.Record); err != nil {
			return nil, err
		}
		index[i] = p.Index
	}
	return dirlog.HeldKeys(versions, index), nil
}

// keyLogSizeTTL is how long keyLogSize takes the size it learnt as the
// newest.
const keyLogSizeTTL = 5 * time.Second

// keyLogSize returns the size of the key cluster's transparency log as
// the node last learnt it, asking the cluster again when that is older
// than keyLogSizeTTL; 0 if it never could. The dir host refuses a new
// entry anchored far behind it (dirhost.Config.KeyLogSize). The head is
// not checked: a cluster that lies about it can only make appends fail.
func (n *Node) keyLogSize() int64 {
	n.keyLogMu.Lock()
	size, fresh := n.keyLogN, time.Since(n.keyLogAt) < keyLogSizeTTL
	n.keyLogMu.Unlock()
	if fresh {
		return size
	}
	ctx, cancel := context.WithTimeout(n.ctx, 2*time.Second)
	defer cancel()
	if head, err := n.kst().ks.Head(ctx); err == nil {
		if hi, err := keylog.ParseHead(head); err == nil {
			size = max(size, hi.N)
		}
	}
	n.keyLogMu.Lock()
	defer n.keyLogMu.Unlock()
	n.keyLogN, n.keyLogAt = max(n.keyLogN, size), time.Now()
	return n.keyLogN
}

// DialAddrs returns the addresses a client should try, in order: the
// node's Unix socket (for clients of the same system user on this
// machine), then loopback before other addresses and TCP before QUIC.
func (n *Node) DialAddrs() []spindle.PeerAddr {
	addrs := orderAddrs(n.Addrs())
	if a := n.SocketAddr(); a != "" {
		addrs = append([]spindle.PeerAddr{a}, addrs...)
	}
	return addrs
}

// DialAddr returns the network address a client on this machine should
// dial: loopback TCP first. It is not the socket (see SocketAddr).
func (n *Node) DialAddr() spindle.PeerAddr {
	if a := orderAddrs(n.Addrs()); len(a) > 0 {
		return a[0]
	}
	return ""
}

// Damage returns the damage to the directory logs found when the node
// started, one error of kind Integrity per damaged log.
func (n *Node) Damage() []error { return n.dir.Damage() }

// VerifierKey returns the note verifier key with which clients check the
// key cluster's signed tree heads.
func (n *Node) VerifierKey() string { return n.kst().ks.VerifierKey() }

// Addrs returns the node's full dialable addresses.
func (n *Node) Addrs() []spindle.PeerAddr { return p2p.Addrs(n.host) }

// Host returns the node's libp2p host.
func (n *Node) Host() host.Host { return n.host }

// Drain hands every block the node holds on to the nearest other nodes
// that lack it, so that each keeps its copies without this node (see
// replica.Store.Drain). From then on the node takes no copies from other
// nodes. Call it before Close, for a node leaving the network for good.
func (n *Node) Drain(ctx context.Context) (replica.DrainResult, error) {
	if n.replica == nil {
		return replica.DrainResult{}, spindle.E(spindle.Op("node.Drain"), spindle.Invalid, "the node keeps no replicated blocks")
	}
	return n.replica.Drain(ctx)
}

// DHT returns the node's DHT: Spindle's private Kademlia DHT, in server
// mode, on the node's host. It is closed with the node.
func (n *Node) DHT() *dht.IpfsDHT { return n.dht.Load() }

// natConfig returns the NAT services of the node's own host.
func (n *Node) natConfig() p2p.NATConfig {
	return p2p.NATConfig{
		PortMap:         !n.cfg.NoPortMap && !loopbackOnly(n.cfg.Listen),
		AutoNAT:         !n.cfg.NoAutoNAT,
		HolePunch:       !n.cfg.NoHolePunch,
		RelayClient:     !n.cfg.NoRelayClient,
		RelayCandidates: n.relayCandidates,
		RelayService:    n.cfg.Relay,
	}
}

// Close shuts the node down. Everything it acknowledged is already durable.
func (n *Node) Close() error {
	n.cancel()
	var errs []error
	if n.host != nil {
		for _, h := range n.hosts() {
			for _, p := range []string{wire.ClientProtocol, wire.WatchProtocol, string(p2p.BlockProtocol), string(p2p.BlockProtocolV1), string(p2p.TunnelProtocol), string(p2p.TunnelEndProtocol)} {
				h.RemoveStreamHandler(protocolID(p))
			}
		}
	}
	n.bg.Wait()
	if n.replica != nil {
		errs = append(errs, n.replica.Close())
	}
	if n.leases != nil {
		errs = append(errs, n.leases.table.Close())
	}
	if d := n.DHT(); d != nil {
		// Note who the node knew, for the next start, while it still
		// knows; then the DHT goes, before the host it runs on.
		n.remember()
		errs = append(errs, d.Close())
	}
	if n.dir != nil {
		errs = append(errs, n.dir.Close())
	}
	if ks := n.keyState.Load(); ks != nil && ks.keys != nil {
		errs = append(errs, ks.keys.Close())
	}
	n.joinMu.Lock()
	if n.joining != nil {
		errs = append(errs, n.joining.Close())
		n.joining = nil
	}
	n.joinMu.Unlock()
	if n.closeBS != nil {
		errs = append(errs, n.closeBS())
	}
	if n.local != nil {
		errs = append(errs, n.local.Close())
	}
	if n.ownHost && n.host != nil {
		errs = append(errs, n.host.Close())
	}
	if n.homeLock != nil {
		errs = append(errs, n.homeLock.Unlock())
	}
	return errors.Join(errs...)
}

// session returns the user the peer has authenticated as, or "". A
// session ends when it expires and when the user's key record changes
// (a rotation, a new dir host): a key its owner replaced, or a session
// opened by whoever stole it, acts no more.
func (n *Node) session(p peer.ID) spindle.UserName {
	n.mu.Lock()
	s, ok := n.sessions[p]
	n.mu.Unlock()
	if !ok {
		return ""
	}
	if time.Now().After(s.expires) || n.recordVersion(s.user) != s.version {
		n.mu.Lock()
		if n.sessions[p] == s {
			delete(n.sessions, p)
		}
		n.mu.Unlock()
		return ""
	}
	return s.user
}

// recordVersion returns the version of user's key record, or 0 if it
// has none.
func (n *Node) recordVersion(user spindle.UserName) int64 { return n.kst().ks.Version(user) }

func (n *Node) forget(p peer.ID) {
	if n.host.Network().Connectedness(p) == network.Connected {
		return // Another connection to the peer is still open.
	}
	n.mu.Lock()
	delete(n.sessions, p)
	n.mu.Unlock()
}

// canStore reports whether peer p is a signed-in writer, who may put
// blocks through this node (other nodes' copies are the replica store's
// business: see replica.Store.Server).
func (n *Node) canStore(p peer.ID) bool {
	u := n.session(p)
	return u != "" && n.writers.admits(u)
}

// Unadmitted returns, sorted, the users whose trees this node holds a
// directory log of but whom its writers do not admit: it neither takes
// their writes nor keeps its copy of their logs up to date. A node
// started again without the -writers it had shows them (issue 31).
func (n *Node) Unadmitted() []spindle.UserName {
	var out []spindle.UserName
	for _, u := range n.dir.Users() {
		if !n.writers.admits(u) {
			out = append(out, u)
		}
	}
	return out
}

// maxClockSkew bounds the difference between a client's clock and the node's.
const maxClockSkew = 10 * time.Minute

// authenticate checks an authMsg from peer p and opens a session.
func (n *Node) authenticate(ctx context.Context, p peer.ID, a *wire.AuthMsg) error {
	const op spindle.Op = "node.Auth"
	if a == nil {
		return spindle.E(op, spindle.Invalid, "no credentials")
	}
	user, err := spindle.CleanUser(a.User)
	if err != nil {
		return spindle.E(op, err)
	}
	u, err := n.kst().ks.Lookup(ctx, user)
	if err != nil {
		return spindle.E(op, user, err)
	}
	if err := n.checkPossession(p, a, user, u.PublicKey); err != nil {
		return spindle.E(op, err)
	}
	n.mu.Lock()
	n.sessions[p] = session{user: user, version: u.Version, expires: time.Now().Add(n.cfg.SessionTTL)}
	n.mu.Unlock()
	return nil
}

// checkPossession checks that a proves, for the connection from peer p
// and now, possession of key as user: a is made for this connection (so
// it cannot be replayed on another), timed within maxClockSkew, and
// signed with key.
func (n *Node) checkPossession(p peer.ID, a *wire.AuthMsg, user spindle.UserName, key spindle.PublicKey) error {
	if a == nil {
		return spindle.E(spindle.Permission, user, "no proof of possession of the key")
	}
	if a.User != user {
		return spindle.E(spindle.Permission, user, "credentials made for "+string(a.User))
	}
	if a.ClientPeer != p.String() || a.NodePeer != n.host.ID().String() {
		return spindle.E(user, spindle.Permission, "credentials made for another connection")
	}
	if d := time.Since(a.Time.Go()); d > maxClockSkew || d < -maxClockSkew {
		return spindle.E(user, spindle.Permission, fmt.Sprintf("credentials timed %v away from this node's clock", d.Round(time.Second)))
	}
	if err := spindle.Verify(key, a.Digest(), a.Sig); err != nil {
		return spindle.E(user, spindle.Permission, err)
	}
	return nil
}

// putKey serves key.put from peer p: the record goes to the key cluster
// only if the peer proves, over this connection, possession of the key
// the record registers (the new key, on a rotation), so that nobody
// replays a record or registers keys it does not hold; and a peer gets
// only cfg.KeyPutLimit tries a minute, so that names are not taken in
// bulk. The cluster itself checks the record's signature and policy.
func (n *Node) putKey(ctx context.Context, p peer.ID, env *wire.Request, req *wire.KeyPutRequest) error {
	const op spindle.Op = "node.KeyPut"
	member := n.isMember(ctx, p) // A member forwarding has counted it.
	if !member && !n.keyPuts.allow(p, time.Now()) {
		return spindle.E(op, spindle.Transient, fmt.Sprintf("too many key changes from this peer: at most %d a minute", n.cfg.KeyPutLimit))
	}
	u, err := keylog.DecodeRecord(req.Record)
	if err != nil {
		return spindle.E(op, err)
	}
	if spindle.ReservedUser(u.Name) {
		return spindle.E(op, spindle.Invalid, u.Name, "the name is reserved: names in the domain invalid stand for no one (the gateway reads as gateway@gateway.invalid), and cannot be registered")
	}
	if !member && u.Version <= 1 {
		if err := n.signups.allow(n.sourceAddr(p), time.Now()); err != nil {
			return spindle.E(op, u.Name, err)
		}
	}
	if err := n.checkPossession(p, env.Auth, u.Name, u.PublicKey); err != nil {
		// Or a client's proof carried by its node, or by a member.
		if !n.forwardedPossession(ctx, p, env.Auth) || checkSigned(env.Auth, u.Name, u.PublicKey) != nil {
			return spindle.E(op, err)
		}
	}
	if err := n.checkCutoff(ctx, u); err != nil {
		return spindle.E(op, err)
	}
	return n.putKeyForwarded(ctx, u, env, req)
}

// checkCutoff refuses a record that replaces a user's key with a DirSeq
// below the head of the user's tree on this node: the entries beyond it,
// signed with the key being replaced and accepted while it was current,
// would turn invalid (see dirlog.HeldKeys). The client reads its head and
// signs the rotation again.
func (n *Node) checkCutoff(ctx context.Context, u *spindle.User) error {
	cur, err := n.kst().ks.Lookup(ctx, u.Name)
	if err != nil || cur.PublicKey == u.PublicKey || u.Version <= cur.Version {
		// A new user, no rotation, or no update at all (a second
		// registration of a taken name, a replay): the cluster judges.
		return nil
	}
	h, err := n.dir.Head(ctx, u.Name)
	if err != nil || h.Seq <= u.DirSeq {
		return nil
	}
	return spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("the key rotation's dir sequence %d is behind the tree's head %d on this node; read the head and sign the rotation again", u.DirSeq, h.Seq))
}

// writerSet is the parsed -writers list.
type writerSet struct {
	all     bool
	users   map[spindle.UserName]bool
	domains map[string]bool
}

func parseWriters(list []string) (writerSet, error) {
	w := writerSet{users: map[spindle.UserName]bool{}, domains: map[string]bool{}}
	for _, s := range list {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case s == "all":
			w.all = true
		case strings.HasPrefix(s, "*@"):
			_, _, _, dom, err := spindle.ParseUser(spindle.UserName("x" + s[1:]))
			if err != nil {
				return w, fmt.Errorf("bad writer %q: %v", s, err)
			}
			w.domains[dom] = true
		default:
			u, err := spindle.CleanUser(spindle.UserName(s))
			if err != nil {
				return w, fmt.Errorf("bad writer %q: %v", s, err)
			}
			w.users[u] = true
		}
	}
	return w, nil
}

// admits reports whether user may create a tree and store blocks. A
// +suffix user is admitted with its base user.
func (w writerSet) admits(user spindle.UserName) bool {
	if w.all {
		return true
	}
	for _, u := range []spindle.UserName{user, spindle.BaseUser(user)} {
		if w.users[u] {
			return true
		}
		if i := strings.LastIndexByte(string(u), '@'); i >= 0 && w.domains[string(u[i+1:])] {
			return true
		}
	}
	return false
}

// orderAddrs puts TCP before QUIC and loopback addresses first, the order
// in which a client on this machine should try them.
func orderAddrs(addrs []spindle.PeerAddr) []spindle.PeerAddr {
	rank := func(a spindle.PeerAddr) int {
		m, err := ma.NewMultiaddr(string(a))
		if err != nil {
			return 9
		}
		r := 0
		if !manet.IsIPLoopback(m) {
			r += 2
		}
		if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
			r++
		}
		return r
	}
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b spindle.PeerAddr) int { return rank(a) - rank(b) })
	return out
}

// oneLine joins the lines of a message, so that a log line is one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// homeLockFile, in a node's home, is locked while a node runs there, and
// holds its process ID.
const homeLockFile = "node.lock"

// lockHome locks home for this process, or says which process runs a
// node there: two nodes on one home would each take the other's files.
func lockHome(home string) (*spindle.FileLock, error) {
	name := filepath.Join(home, homeLockFile)
	l, err := spindle.LockFile(name, false)
	if errors.Is(err, spindle.Exist) {
		who := "another process"
		if data, rerr := os.ReadFile(name); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(data))); perr == nil && pid > 0 {
				who = fmt.Sprintf("process %d", pid)
			}
		}
		return nil, spindle.E(spindle.Exist, fmt.Sprintf("a node runs on home %s already (%s): stop it first, or give this node another home (-home DIR)", home, who))
	}
	if err != nil {
		return nil, err
	}
	// The lock is on the file: writing the process ID into it keeps it.
	if err := os.WriteFile(name, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		l.Unlock()
		return nil, spindle.E(spindle.IO, err)
	}
	return l, nil
}
