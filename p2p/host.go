package p2p

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/transport"
	"github.com/libp2p/go-libp2p/p2p/host/autorelay"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	relayv2 "github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/relay"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	"github.com/libp2p/go-libp2p/p2p/transport/tcpreuse"
	"github.com/libp2p/go-libp2p/x/rate"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"

	"spindle.dev"
)

// IdentityFile is the name of the file, under a node's home, that holds its
// private key.
const IdentityFile = "peerkey"

// DefaultListenAddrs are the addresses a host listens on when its Config
// names none: an ephemeral TCP port and an ephemeral QUIC port on the
// loopback interface, which suit tests. A node that serves other machines
// chooses its own.
var DefaultListenAddrs = []string{
	"/ip4/127.0.0.1/tcp/0",
	"/ip4/127.0.0.1/udp/0/quic-v1",
}

// DefaultMemory is the memory, in bytes, that a host's network stack may
// hold in buffers when Config.Memory is zero.
const DefaultMemory = 192 << 20

// Config configures a host. Its zero value makes a host with a fresh
// identity that listens on [DefaultListenAddrs].
type Config struct {
	// Key is the host's private key. If nil, the key is loaded from (or
	// created in) Home/peerkey; if Home is also empty, a new key is made
	// and not saved.
	Key crypto.PrivKey
	// Home is the directory that holds the persistent identity.
	Home string
	// ListenAddrs are the multiaddrs to listen on; empty means
	// DefaultListenAddrs.
	ListenAddrs []string
	// Memory bounds the bytes the network stack may hold in buffers, for
	// all peers together; zero means DefaultMemory. A peer may use a
	// quarter of it and one stream 32 MiB, enough for bulk transfer at
	// full speed over links with a large bandwidth-delay product.
	Memory int64
	// HandshakeTimeout is how long an inbound TCP connection may take to
	// finish its security handshake; zero means DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// NAT says which of libp2p's services for machines behind NAT the
	// host runs. The zero value runs none, as a client's host needs.
	NAT NATConfig
	// Metrics, if set, is where libp2p keeps its own Prometheus metrics
	// (its swarm, identify, relay and resource manager); nil turns them
	// off.
	Metrics prometheus.Registerer
}

// NATConfig says which of libp2p's NAT traversal services a host runs.
// A node at home, behind a router, needs AutoNAT to learn that it cannot
// be reached, a relay client to be reached anyway, and hole punching to
// turn a relayed connection into a direct one.
type NATConfig struct {
	// PortMap asks the router for a port mapping with UPnP or NAT-PMP.
	PortMap bool
	// AutoNAT has the host ask its peers whether they can dial it back
	// (AutoNAT v2), and answer theirs (the v1 and v2 services, rate
	// limited by libp2p). In a private network the nodes are each
	// other's only AutoNAT servers.
	AutoNAT bool
	// HolePunch lets the host open direct connections through NATs with
	// DCUtR, coordinated over a relayed connection.
	HolePunch bool
	// RelayClient lets the host dial and accept relayed connections
	// (circuit relay v2) and, once AutoNAT finds it unreachable, reserve
	// a slot on a relay among RelayCandidates and advertise the relayed
	// addresses.
	RelayClient bool
	// RelayCandidates returns peers that may offer relay service, with
	// their addresses (a node gives its DHT's routing table); those that
	// do are used. Nil means the host finds no relays by itself.
	RelayCandidates func() []peer.AddrInfo
	// RelayService offers circuit relay v2 to other Spindle nodes once
	// AutoNAT finds this host reachable from outside (see RelayLimits).
	RelayService bool
}

// Connection manager limits of a host (see [NewHost]): above
// ConnsHigh connections, it closes the least useful down to ConnsLow,
// sparing those younger than ConnGrace. Peers that a DHT or a transfer
// marks as useful are closed last. The numbers leave room for a node
// fetching one file from hundreds of providers at once; the resource
// manager, not the connection manager, bounds memory.
const (
	ConnsLow  = 256
	ConnsHigh = 512
	ConnGrace = time.Minute
)

// A relay run with NATConfig.RelayService holds at most RelayReservations
// reservations, one per peer and RelayReservationsPerIP per IP address,
// and at most RelayCircuits relayed connections per peer. Relayed
// connections are not cut after 2 minutes or 128 KiB as libp2p's are by
// default: a node that hole punching cannot reach gets its blocks through
// the relay, at the cost of the relay's bandwidth, which its operator
// offered by turning the service on.
const (
	RelayReservations      = 128
	RelayReservationsPerIP = 8
	RelayCircuits          = 16
)

// RelayBackoff is how long a host behind NAT waits before it asks a
// relay that refused it a reservation again (libp2p's default is an hour).
const RelayBackoff = 2 * time.Minute

// NewHost returns a libp2p host with the TCP and QUIC transports, TLS and
// Noise security (TLS preferred, for its hardware AES), and a resource
// manager sized for bulk transfer. When it dials a peer that offers both
// TCP and QUIC it tries TCP first, the cheaper of the two for moving
// blocks. The caller closes the host. ctx bounds only the setup.
func NewHost(ctx context.Context, cfg Config) (host.Host, error) {
	const op spindle.Op = "p2p.NewHost"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	routeLogs()
	key := cfg.Key
	if key == nil && cfg.Home != "" {
		var err error
		if key, err = LoadOrCreateIdentity(filepath.Join(cfg.Home, IdentityFile)); err != nil {
			return nil, spindle.E(op, err)
		}
	}
	if key == nil {
		var err error
		if key, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
			return nil, spindle.E(op, spindle.Internal, err)
		}
	}
	listen := cfg.ListenAddrs
	if len(listen) == 0 {
		listen = DefaultListenAddrs
	}
	for _, a := range listen {
		if _, err := ma.NewMultiaddr(a); err != nil {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad listen address %q: %v", a, err))
		}
	}
	rm, err := newResourceManager(cfg.Memory, perAddrLimits()...)
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	hs := newHandshakes(cfg.HandshakeTimeout, maxPending, maxPendingPerIP)
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrStrings(listen...),
		// No SO_REUSEPORT: a second node on a taken port must fail to
		// start, not share the port and answer for the first. The
		// upgrader is wrapped so that hs sees every inbound connection
		// (see handshake.go).
		libp2p.Transport(func(u transport.Upgrader, rm network.ResourceManager, shared *tcpreuse.ConnMgr) (*tcp.TcpTransport, error) {
			return tcp.NewTCPTransport(handshakeUpgrader{u, hs}, rm, shared, tcp.DisableReuseport())
		}),
		libp2p.ConnectionGater(hs),
		libp2p.Transport(quic.NewTransport),
		// TLS first: its AES-GCM runs in hardware and carries bulk
		// transfer at several times the speed of Noise's ChaCha20.
		libp2p.Security(libp2ptls.ID, libp2ptls.New),
		libp2p.Security(noise.ID, noise.New),
		libp2p.ResourceManager(rm),
		libp2p.Muxer(yamux.ID, yamuxTransport()),
		libp2p.SwarmOpts(swarm.WithDialRanker(tcpFirst)),
	}
	cm, err := connmgr.NewConnManager(ConnsLow, ConnsHigh, connmgr.WithGracePeriod(ConnGrace))
	if err != nil {
		rm.Close()
		return nil, spindle.E(op, spindle.Internal, err)
	}
	opts = append(opts, libp2p.ConnectionManager(cm))
	if cfg.Metrics != nil {
		opts = append(opts, libp2p.PrometheusRegisterer(cfg.Metrics))
	} else {
		opts = append(opts, libp2p.DisableMetrics())
	}
	acl := new(spindleOnly)
	opts = append(opts, natOptions(cfg.NAT, acl)...)
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		if busy := busyAddr(listen); busy != nil {
			return nil, spindle.E(op, spindle.IO, busy)
		}
		return nil, spindle.E(op, spindle.IO, err)
	}
	acl.ps.Store(&peerstoreRef{h.Peerstore()})
	return h, nil
}

// natOptions returns the libp2p options that run the services cfg names.
func natOptions(cfg NATConfig, acl relayv2.ACLFilter) []libp2p.Option {
	var opts []libp2p.Option
	if cfg.PortMap {
		opts = append(opts, libp2p.NATPortMap())
	}
	if cfg.AutoNAT {
		opts = append(opts, libp2p.EnableAutoNATv2(), libp2p.EnableNATService())
	}
	if cfg.HolePunch {
		opts = append(opts, libp2p.EnableHolePunching())
	}
	if cfg.RelayClient || cfg.HolePunch {
		// Hole punching is coordinated over a relayed connection.
		opts = append(opts, libp2p.EnableRelay())
	} else {
		opts = append(opts, libp2p.DisableRelay())
	}
	if cfg.RelayClient && cfg.RelayCandidates != nil {
		// libp2p waits 3 minutes for 4 candidates before it reserves a
		// slot, and then shuns for an hour a peer that refused one: a
		// private network of a few home machines may have one relay,
		// which refuses until AutoNAT finds it public. So one candidate
		// is enough, and a refusal is tried again after RelayBackoff.
		opts = append(opts, libp2p.EnableAutoRelayWithPeerSource(relaySource(cfg.RelayCandidates),
			autorelay.WithMinCandidates(1), autorelay.WithBackoff(RelayBackoff)))
	}
	if cfg.RelayService {
		res := relayv2.DefaultResources()
		res.Limit = nil
		res.MaxReservations = RelayReservations
		res.MaxReservationsPerIP = RelayReservationsPerIP
		res.MaxCircuits = RelayCircuits
		res.BufferSize = 64 << 10 // libp2p's 2 KiB suits hole-punch coordination, not blocks.
		opts = append(opts, libp2p.EnableRelayService(relayv2.WithResources(res), relayv2.WithACL(acl)))
	}
	return opts
}

// relaySource returns an autorelay peer source that offers up to the
// number asked for of the peers candidates returns.
func relaySource(candidates func() []peer.AddrInfo) autorelay.PeerSource {
	return func(ctx context.Context, num int) <-chan peer.AddrInfo {
		peers := candidates()
		if len(peers) > num {
			peers = peers[:num]
		}
		ch := make(chan peer.AddrInfo, len(peers))
		for _, ai := range peers {
			ch <- ai
		}
		close(ch)
		return ch
	}
}

// spindleOnly is a relay's ACL: it grants reservations only to peers
// that speak Spindle's DHT, that is to Spindle nodes, so that a public
// relay does not carry other libp2p networks' traffic. Anyone may
// connect through a reservation: clients reach nodes behind NAT so.
type spindleOnly struct {
	ps atomic.Pointer[peerstoreRef] // Set once the host exists.
}

type peerstoreRef struct{ peerstore.Peerstore }

// AllowReserve implements relayv2.ACLFilter.
func (a *spindleOnly) AllowReserve(p peer.ID, _ ma.Multiaddr) bool {
	ps := a.ps.Load()
	if ps == nil {
		return false
	}
	ok, err := ps.SupportsProtocols(p, DHTProtocol)
	return err == nil && len(ok) > 0
}

// AllowConnect implements relayv2.ACLFilter.
func (a *spindleOnly) AllowConnect(peer.ID, ma.Multiaddr, peer.ID) bool { return true }

// busyAddr returns, after a host failed to start, the error of the first
// TCP listen address that another program holds, which wraps
// syscall.EADDRINUSE, or nil. libp2p's own error says as much only in
// its text.
func busyAddr(listen []string) error {
	for _, a := range listen {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			continue
		}
		if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
			continue
		}
		nw, host, err := manet.DialArgs(m)
		if err != nil {
			continue
		}
		l, err := net.Listen(nw, host)
		if err == nil {
			l.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("cannot listen on %s: %w", a, err)
		}
	}
	return nil
}

// newResourceManager returns libp2p's default limits scaled to memory
// bytes, with the per-peer, per-protocol and per-stream memory raised so
// that block transfer is not throttled by flow-control windows, and the
// connection limits raised so that connections in their handshake cannot
// use up the room of others (see handshake.go): the transient scope, which
// holds connections until their handshake is done, takes maxPending and a
// margin for connections closed but not yet released, and the system
// takes that many and room for a thousand more.
func newResourceManager(memory int64, opts ...rcmgr.Option) (network.ResourceManager, error) {
	opts = append(opts, rcmgr.WithMetricsDisabled())
	return rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limitConfig(memory)), opts...)
}

// limitConfig returns the limits newResourceManager sets.
func limitConfig(memory int64) rcmgr.ConcreteLimitConfig {
	if memory <= 0 {
		memory = DefaultMemory
	}
	limits := rcmgr.DefaultLimits
	libp2p.SetDefaultServiceLimits(&limits)
	base := limits.Scale(memory, rcmgrFDs)
	peerMem := rcmgr.LimitVal64(memory / 4)
	streamMem := rcmgr.LimitVal64(min(memory/4, 32<<20))
	partial := rcmgr.PartialLimitConfig{
		System: rcmgr.ResourceLimits{
			Memory:       rcmgr.LimitVal64(memory),
			ConnsInbound: transientConns + 1024,
			Conns:        transientConns + 2048,
		},
		Transient: rcmgr.ResourceLimits{
			ConnsInbound: transientConns,
			Conns:        2 * transientConns,
		},
		PeerDefault:         rcmgr.ResourceLimits{Memory: peerMem},
		ProtocolPeerDefault: rcmgr.ResourceLimits{Memory: peerMem},
		ServicePeerDefault:  rcmgr.ResourceLimits{Memory: peerMem},
		ProtocolDefault:     rcmgr.ResourceLimits{Memory: rcmgr.LimitVal64(memory)},
		Conn:                rcmgr.ResourceLimits{Memory: peerMem},
		Stream:              rcmgr.ResourceLimits{Memory: streamMem},
	}
	return partial.Build(base)
}

// transientConns bounds inbound connections in their handshake in the
// resource manager: above maxPending, which a host keeps to itself, so
// that the resource manager never refuses a connection first.
const transientConns = maxPending + 64

// perAddrLimits returns the resource manager's options for limits per IP
// address: at most 64 connections at once (libp2p: 8), half of them for
// connections in their handshake (maxPendingPerIP); new connections at 1
// a second after a burst of 32 (libp2p: one each 5 s after 16), which a
// user running spin commands in a loop against a remote node needs and
// which keeps one address from opening maxPendingPerIP connections in
// the time a client's handshake takes. Loopback stays exempt, as in
// libp2p.
func perAddrLimits() []rcmgr.Option {
	const perAddr = 2 * maxPendingPerIP
	v4 := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 32, ConnCount: perAddr}}
	v6 := []rcmgr.ConnLimitPerSubnet{{PrefixLength: 56, ConnCount: perAddr}, {PrefixLength: 48, ConnCount: 8 * perAddr}}
	rate1 := rate.Limit{RPS: 1, Burst: maxPendingPerIP}
	limiter := &rate.Limiter{
		NetworkPrefixLimits: []rate.PrefixLimit{
			{Prefix: netip.MustParsePrefix("127.0.0.0/8")},
			{Prefix: netip.MustParsePrefix("::1/128")},
		},
		SubnetRateLimiter: rate.SubnetLimiter{
			IPv4SubnetLimits: []rate.SubnetLimit{{PrefixLength: 32, Limit: rate1}},
			IPv6SubnetLimits: []rate.SubnetLimit{{PrefixLength: 56, Limit: rate1}, {PrefixLength: 48, Limit: rate.Limit{RPS: 4, Burst: 8 * maxPendingPerIP}}},
			GracePeriod:      time.Minute,
		},
	}
	return []rcmgr.Option{rcmgr.WithLimitPerSubnet(v4, v6), rcmgr.WithConnRateLimiters(limiter)}
}

// quicFallback is how long a dial waits for TCP before trying QUIC.
const quicFallback = 250 * time.Millisecond

// tcpFirst ranks a peer's addresses as libp2p's default ranker does,
// except that where the peer offers direct TCP, TCP is dialled first and
// the other transports only quicFallback later. Blocks move over TCP at
// less than half the CPU cost of QUIC (docs/performance.md), which
// matters most for the client talking to its own node.
func tcpFirst(addrs []ma.Multiaddr) []network.AddrDelay {
	ranked := swarm.DefaultDialRanker(addrs)
	direct := func(a ma.Multiaddr) bool {
		_, err := a.ValueForProtocol(ma.P_CIRCUIT)
		return err != nil
	}
	isTCP := func(a ma.Multiaddr) bool {
		_, err := a.ValueForProtocol(ma.P_TCP)
		return err == nil && direct(a)
	}
	first := time.Duration(-1)
	for _, ad := range ranked {
		if isTCP(ad.Addr) && (first < 0 || ad.Delay < first) {
			first = ad.Delay
		}
	}
	if first < 0 {
		return ranked
	}
	for i := range ranked {
		if isTCP(ranked[i].Addr) {
			ranked[i].Delay -= first
		} else if ranked[i].Delay < quicFallback {
			ranked[i].Delay = quicFallback
		}
	}
	return ranked
}

// rcmgrFDs is the number of file descriptors the resource manager allows.
const rcmgrFDs = 4096

// LoadOrCreateIdentity returns the Ed25519 private key stored in the file
// name, creating the file (mode 0600, synced, with its directory) with a
// new key if it does not exist. A file that exists but does not hold a
// key is an Invalid error, never silently replaced.
func LoadOrCreateIdentity(name string) (crypto.PrivKey, error) {
	const op spindle.Op = "p2p.LoadOrCreateIdentity"
	data, err := os.ReadFile(name)
	if err == nil {
		key, err := crypto.UnmarshalPrivateKey(data)
		if err == nil {
			err = checkKeyPair(key)
		}
		if err != nil {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("identity file %s is damaged: %v; restore it from a backup of the node's home (a new one would give the node a new peer ID)", name, err))
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, spindle.E(op, spindle.IO, err)
	}
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	data, err = crypto.MarshalPrivateKey(key)
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	// CreateFile fails if name exists, so that two processes racing to
	// create an identity cannot replace each other's key.
	if err := spindle.CreateFile(name, data, 0o600); err != nil {
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("identity file %s: %w", name, err))
	}
	return key, nil
}

// checkKeyPair checks that key signs what its public half verifies. An
// Ed25519 key file holds both halves, and damage to one leaves a key that
// loads but cannot complete a handshake under the peer ID it names.
func checkKeyPair(key crypto.PrivKey) error {
	msg := []byte("spindle identity check")
	sig, err := key.Sign(msg)
	if err != nil {
		return err
	}
	if ok, err := key.GetPublic().Verify(msg, sig); err != nil || !ok {
		return errors.New("its private and public halves do not match")
	}
	return nil
}

// Addrs returns the host's full dialable addresses, each ending in
// /p2p/<peer ID>, in the host's order of preference.
func Addrs(h host.Host) []spindle.PeerAddr {
	mas, err := peer.AddrInfoToP2pAddrs(host.InfoFromHost(h))
	if err != nil {
		return nil
	}
	out := make([]spindle.PeerAddr, len(mas))
	for i, m := range mas {
		out[i] = spindle.PeerAddr(m.String())
	}
	return out
}

// PeerAddrOf returns the bare form of a peer's address: its peer ID.
func PeerAddrOf(id peer.ID) spindle.PeerAddr { return spindle.PeerAddr(id.String()) }

// ParsePeerAddr parses a PeerAddr: a multiaddr ending in /p2p/<peer ID>,
// or a bare peer ID (the result then holds no addresses). A Unix socket's
// path takes the rest of its multiaddr, so "/unix/PATH/p2p/ID" is read as
// the socket PATH of peer ID.
func ParsePeerAddr(addr spindle.PeerAddr) (peer.AddrInfo, error) {
	const op spindle.Op = "p2p.ParsePeerAddr"
	s := strings.TrimSpace(string(addr))
	if s == "" {
		return peer.AddrInfo{}, spindle.E(op, spindle.Invalid, "empty peer address")
	}
	if !strings.HasPrefix(s, "/") {
		id, err := peer.Decode(s)
		if err != nil {
			return peer.AddrInfo{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad peer address %q: %v", s, err))
		}
		return peer.AddrInfo{ID: id}, nil
	}
	if ai, ok, err := splitUnixPeerAddr(s); ok {
		if err != nil {
			return peer.AddrInfo{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad peer address %q: %v", s, err))
		}
		return ai, nil
	}
	ai, err := peer.AddrInfoFromString(s)
	if err != nil {
		return peer.AddrInfo{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad peer address %q (want a multiaddr ending in /p2p/<peer ID>): %v", s, err))
	}
	return *ai, nil
}

// Connect connects h to the peer at addr and returns the peer's ID. For
// a bare peer ID, the addresses come from h's peerstore (or its routing,
// if the host has one).
func Connect(ctx context.Context, h host.Host, addr spindle.PeerAddr) (peer.ID, error) {
	const op spindle.Op = "p2p.Connect"
	ai, err := ParsePeerAddr(addr)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if ai.ID == h.ID() {
		return ai.ID, nil
	}
	// The address was given, not learnt: keep it for as long as the host
	// lives, so that a redial after the peer restarts still has it (what
	// libp2p learns and forgets, by identify and TTLs, is added to it).
	h.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
	if err := h.Connect(ctx, ai); err != nil {
		return "", spindle.E(op, spindle.IO, fmt.Errorf("peer %s: %w", addr, err))
	}
	return ai.ID, nil
}

// Limits are the bounds a host puts on its network stack (see [NewHost]),
// for operators to read.
type Limits struct {
	Memory       int64 // Bytes in buffers, all peers together.
	PeerMemory   int64 // Of those, for one peer.
	StreamMemory int64 // Of those, for one stream.
	Conns        int   // Connections open at once, inbound and outbound.
	ConnsInbound int   // Of those, inbound.
	PeerStreams  int   // Streams open at once with one peer.
	FDs          int   // File descriptors for sockets.
	ConnsLow     int   // See [ConnsLow].
	ConnsHigh    int   // See [ConnsHigh].
}

// HostLimits returns the limits of a host whose Config.Memory is memory.
func HostLimits(memory int64) Limits {
	c := limitConfig(memory).ToPartialLimitConfig()
	return Limits{
		Memory:       int64(c.System.Memory),
		PeerMemory:   int64(c.PeerDefault.Memory),
		StreamMemory: int64(c.Stream.Memory),
		Conns:        int(c.System.Conns),
		ConnsInbound: int(c.System.ConnsInbound),
		PeerStreams:  int(c.PeerDefault.Streams),
		FDs:          int(c.System.FD),
		ConnsLow:     ConnsLow,
		ConnsHigh:    ConnsHigh,
	}
}

// streamWindow is the flow-control window yamux gives each stream from
// its start: what the other side may send before it is told it may send
// more. One block stream carries a whole file, so the window bounds its
// rate at one window a round trip. yamux's default of 256 KiB is meant to
// grow with use, but across a far, lossy link it did not grow enough: a
// get fell well short of one plain TCP stream on the same link, and
// reached it with this window (BenchmarkNetnsWANGet; docs/performance.md).
// The cost: a peer may make this host buffer up to this much on each
// stream it keeps open and that the host does not read (the resource
// manager bounds streams per peer; yamux reserves only the first 256 KiB
// of a window from it).
const streamWindow = 1 << 20

// yamuxTransport returns libp2p's yamux transport with streamWindow.
func yamuxTransport() *yamux.Transport {
	t := *yamux.DefaultTransport
	t.InitialStreamWindowSize = streamWindow
	return &t
}
