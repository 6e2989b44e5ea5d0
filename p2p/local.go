package p2p

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/sec"
	"github.com/libp2p/go-libp2p/core/transport"
	basichost "github.com/libp2p/go-libp2p/p2p/host/basic"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	"github.com/libp2p/go-libp2p/p2p/host/peerstore/pstoremem"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"
	"github.com/libp2p/go-libp2p/p2p/net/upgrader"
	"github.com/libp2p/go-libp2p/x/rate"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"spindle.dev"
)

// A client on the node's own machine reaches it through a Unix socket in
// the node's home rather than through loopback TCP. Over TCP every byte
// is encrypted and authenticated by TLS twice over (once by each end) and
// crosses the kernel's TCP stack; on one machine that is most of the cost
// of moving a large file (docs/performance.md compares the two). What
// TLS gives there, the socket gives already:
//
//   - Nobody but the kernel sees the bytes in between, and only users who
//     may enter the node's home (its operator; the home is 0700) can
//     connect at all.
//   - The socket's path is in the node's home, so a client that dials it
//     reaches the node and nobody else: whoever could put another socket
//     there could also read the node's private key.
//
// The peers still prove their identities to each other, with the
// [LocalSecurity] handshake, so that everything above the connection
// (sessions bound to peer IDs, the block protocol's admission checks)
// works unchanged. Block contents are end-to-end encrypted and every
// change is signed by its user in any case.
//
// A host that offers LocalSecurity offers nothing else, and listens and
// dials only on Unix sockets (see [NewLocalHost]): the protocol is never
// negotiated over a network.

// LocalSecurityID is the protocol ID of [LocalSecurity].
const LocalSecurityID = "/spindle/local-auth/1.0.0"

// SocketFile is the name of the Unix socket in a node's home.
const SocketFile = "sock"

// maxSocketPath is the longest socket path that every Unix accepts
// (sun_path is 104 bytes on the BSDs, 108 on Linux, including the NUL).
const maxSocketPath = 103

// Limits of the handshake's messages: a public key or a signature of any
// type libp2p supports fits (RSA keys up to 8192 bits).
const (
	maxLocalKey = 2048
	maxLocalSig = 2048
	localNonce  = 32
)

// LocalSecurity is a libp2p security protocol for Unix sockets: each side
// sends its public key and a fresh nonce, then signs both sides' messages.
// It authenticates the peers and does not encrypt; see the comment above.
type LocalSecurity struct {
	key crypto.PrivKey
	id  peer.ID
}

var _ sec.SecureTransport = (*LocalSecurity)(nil)

// NewLocalSecurity returns the LocalSecurity of the holder of key. Its
// signature suits libp2p.Security.
func NewLocalSecurity(id protocol.ID, key crypto.PrivKey) (*LocalSecurity, error) {
	if id != LocalSecurityID {
		return nil, fmt.Errorf("local security registered as %s, want %s", id, LocalSecurityID)
	}
	pid, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &LocalSecurity{key: key, id: pid}, nil
}

// ID implements sec.SecureTransport.
func (s *LocalSecurity) ID() protocol.ID { return LocalSecurityID }

// SecureInbound implements sec.SecureTransport.
func (s *LocalSecurity) SecureInbound(ctx context.Context, c net.Conn, p peer.ID) (sec.SecureConn, error) {
	return s.handshake(ctx, c, p, false)
}

// SecureOutbound implements sec.SecureTransport.
func (s *LocalSecurity) SecureOutbound(ctx context.Context, c net.Conn, p peer.ID) (sec.SecureConn, error) {
	return s.handshake(ctx, c, p, true)
}

// handshake runs the exchange, in this order so that neither side needs
// the connection to buffer:
//
//	dialer → listener:  hello = len16(public key) || public key || nonce[32]
//	listener → dialer:  its hello
//	dialer → listener:  len16(sig) || sig
//	listener → dialer:  its len16(sig) || sig, once the dialer's verified
//
// where each sig signs "spindle local-auth v1" || role || dialer's hello ||
// listener's hello. The role byte is 'd' for the dialer's signature and 'l'
// for the listener's, so that neither signature can be reflected back as
// the other's. Fresh nonces on both sides make every transcript unique.
func (s *LocalSecurity) handshake(ctx context.Context, c net.Conn, want peer.ID, dialer bool) (_ sec.SecureConn, err error) {
	defer func() {
		if err != nil {
			err = fmt.Errorf("local-auth handshake: %w", err)
		}
	}()
	if d, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(d); err != nil {
			return nil, err
		}
		defer c.SetDeadline(time.Time{})
	}
	pub, err := crypto.MarshalPublicKey(s.key.GetPublic())
	if err != nil {
		return nil, err
	}
	mine := make([]byte, 2+len(pub)+localNonce)
	binary.BigEndian.PutUint16(mine, uint16(len(pub)))
	copy(mine[2:], pub)
	if _, err := rand.Read(mine[2+len(pub):]); err != nil {
		return nil, err
	}

	// Hellos.
	var theirs []byte
	if dialer {
		if _, err := c.Write(mine); err != nil {
			return nil, err
		}
	}
	if theirs, err = readLocalMsg(c, maxLocalKey, localNonce); err != nil {
		return nil, err
	}
	if !dialer {
		if _, err := c.Write(mine); err != nil {
			return nil, err
		}
	}
	remoteKey, err := ParseLocalHello(theirs)
	if err != nil {
		return nil, err
	}
	remote, err := peer.IDFromPublicKey(remoteKey)
	if err != nil {
		return nil, err
	}
	if want != "" && remote != want {
		return nil, sec.ErrPeerIDMismatch{Expected: want, Actual: remote}
	}
	if bytes.Equal(theirs, mine) {
		return nil, errors.New("peer echoed our hello")
	}

	// Signatures.
	dialerHello, listenerHello := mine, theirs
	myRole, theirRole := byte('d'), byte('l')
	if !dialer {
		dialerHello, listenerHello = theirs, mine
		myRole, theirRole = theirRole, myRole
	}
	sig, err := s.key.Sign(localTranscript(myRole, dialerHello, listenerHello))
	if err != nil {
		return nil, err
	}
	msg := make([]byte, 2+len(sig))
	binary.BigEndian.PutUint16(msg, uint16(len(sig)))
	copy(msg[2:], sig)
	if dialer {
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
	}
	theirSig, err := readLocalMsg(c, maxLocalSig, 0)
	if err != nil {
		return nil, err
	}
	ok, err := remoteKey.Verify(localTranscript(theirRole, dialerHello, listenerHello), theirSig[2:])
	if err != nil || !ok {
		return nil, fmt.Errorf("peer %s: bad signature", remote)
	}
	if !dialer {
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
	}
	return &localConn{Conn: c, local: s.id, remote: remote, remoteKey: remoteKey}, nil
}

func localTranscript(role byte, dialerHello, listenerHello []byte) []byte {
	const context = "spindle local-auth v1"
	t := make([]byte, 0, len(context)+1+len(dialerHello)+len(listenerHello))
	t = append(t, context...)
	t = append(t, role)
	t = append(t, dialerHello...)
	return append(t, listenerHello...)
}

// readLocalMsg reads a message of a 16-bit length, that many bytes (at
// most max), and extra bytes more, and returns all of it.
func readLocalMsg(r io.Reader, max, extra int) ([]byte, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := int(binary.BigEndian.Uint16(n[:]))
	if size == 0 || size > max {
		return nil, fmt.Errorf("peer sent a handshake field of %d bytes (want 1 to %d)", size, max)
	}
	msg := make([]byte, 2+size+extra)
	copy(msg, n[:])
	if _, err := io.ReadFull(r, msg[2:]); err != nil {
		return nil, err
	}
	return msg, nil
}

// ParseLocalHello decodes the public key of a LocalSecurity hello message
// (length, key, nonce), as received from a peer.
func ParseLocalHello(msg []byte) (crypto.PubKey, error) {
	if len(msg) < 2 {
		return nil, errors.New("hello is too short")
	}
	n := int(binary.BigEndian.Uint16(msg))
	if n == 0 || n > maxLocalKey || len(msg) != 2+n+localNonce {
		return nil, fmt.Errorf("hello of %d bytes does not hold a %d-byte key and a %d-byte nonce", len(msg), n, localNonce)
	}
	k, err := crypto.UnmarshalPublicKey(msg[2 : 2+n])
	if err != nil {
		return nil, fmt.Errorf("bad public key: %w", err)
	}
	return k, nil
}

// A localConn is a connection whose peers have proved their identities.
type localConn struct {
	net.Conn
	local, remote peer.ID
	remoteKey     crypto.PubKey
}

func (c *localConn) LocalPeer() peer.ID             { return c.local }
func (c *localConn) RemotePeer() peer.ID            { return c.remote }
func (c *localConn) RemotePublicKey() crypto.PubKey { return c.remoteKey }
func (c *localConn) ConnState() network.ConnectionState {
	return network.ConnectionState{Security: LocalSecurityID, Transport: "unix"}
}

// unixTransport is a libp2p transport over Unix stream sockets.
type unixTransport struct {
	upgrader transport.Upgrader
	rcmgr    network.ResourceManager
}

var _ transport.Transport = (*unixTransport)(nil)

func newUnixTransport(u transport.Upgrader, rcmgr network.ResourceManager) *unixTransport {
	return &unixTransport{upgrader: u, rcmgr: rcmgr}
}

func isUnix(a ma.Multiaddr) bool {
	return len(a) > 0 && a[0].Protocol().Code == ma.P_UNIX
}

func (t *unixTransport) CanDial(a ma.Multiaddr) bool { return isUnix(a) }
func (t *unixTransport) Protocols() []int            { return []int{ma.P_UNIX} }
func (t *unixTransport) Proxy() bool                 { return false }
func (t *unixTransport) String() string              { return "unix" }

func (t *unixTransport) Dial(ctx context.Context, raddr ma.Multiaddr, p peer.ID) (transport.CapableConn, error) {
	scope, err := t.rcmgr.OpenConnection(network.DirOutbound, true, raddr)
	if err != nil {
		return nil, err
	}
	c, err := t.dial(ctx, raddr, p, scope)
	if err != nil {
		scope.Done()
		return nil, err
	}
	return c, nil
}

func (t *unixTransport) dial(ctx context.Context, raddr ma.Multiaddr, p peer.ID, scope network.ConnManagementScope) (transport.CapableConn, error) {
	if err := scope.SetPeer(p); err != nil {
		return nil, err
	}
	path, err := raddr.ValueForProtocol(ma.P_UNIX)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, err
	}
	mc, err := wrapUnixConn(c)
	if err != nil {
		return nil, err
	}
	return t.upgrader.Upgrade(ctx, t, mc, network.DirOutbound, p, scope)
}

func (t *unixTransport) Listen(laddr ma.Multiaddr) (transport.Listener, error) {
	path, err := laddr.ValueForProtocol(ma.P_UNIX)
	if err != nil {
		return nil, err
	}
	// The socket is created private to the node's user: the node's home
	// is 0700 too, but a socket must not rely on one check alone.
	var l *net.UnixListener
	err = withPrivateUmask(func() (err error) {
		l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		return err
	})
	if err != nil {
		return nil, err
	}
	return t.upgrader.UpgradeGatedMaListener(t, t.upgrader.GateMaListener(&unixListener{l, laddr})), nil
}

// socketBuffer is the send and receive buffer of a Unix connection. The
// kernel's default (208 KiB) holds three yamux frames, and a block
// response of 1 MiB then costs a dozen sleeps and wakeups of the sender.
const socketBuffer = 4 << 20

// wrapUnixConn sizes a new connection's buffers and gives it multiaddrs.
// It closes c if it fails.
func wrapUnixConn(c net.Conn) (manet.Conn, error) {
	if uc, ok := c.(*net.UnixConn); ok {
		// Best effort: the kernel caps the sizes at net.core.[rw]mem_max.
		uc.SetWriteBuffer(socketBuffer)
		uc.SetReadBuffer(socketBuffer)
	}
	mc, err := manet.WrapNetConn(c)
	if err != nil {
		c.Close()
		return nil, err
	}
	return mc, nil
}

// A unixListener is a manet.Listener for Unix connections.
type unixListener struct {
	l    *net.UnixListener
	addr ma.Multiaddr
}

func (l *unixListener) Accept() (manet.Conn, error) {
	c, err := l.l.Accept()
	if err != nil {
		return nil, err
	}
	return wrapUnixConn(c)
}

func (l *unixListener) Close() error            { return l.l.Close() }
func (l *unixListener) Addr() net.Addr          { return l.l.Addr() }
func (l *unixListener) Multiaddr() ma.Multiaddr { return l.addr }

// SocketAddr returns the multiaddr of the Unix socket at path.
func SocketAddr(path string) (ma.Multiaddr, error) {
	return manet.FromNetAddr(&net.UnixAddr{Name: path, Net: "unix"})
}

// LocalConfig configures a host for Unix sockets.
type LocalConfig struct {
	// Key is the host's private key; nil means a fresh one.
	Key crypto.PrivKey
	// Socket is the path of the Unix socket to listen on; empty means the
	// host only dials. A stale socket left by a killed process is
	// replaced; a live one is an error.
	Socket string
	// Memory is as in [Config].
	Memory int64
}

// NewLocalHost returns a libp2p host that listens and dials only on Unix
// sockets, with [LocalSecurity] as its only security protocol.
func NewLocalHost(ctx context.Context, cfg LocalConfig) (host.Host, error) {
	const op spindle.Op = "p2p.NewLocalHost"
	key := cfg.Key
	if key == nil {
		var err error
		if key, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
			return nil, spindle.E(op, spindle.Internal, err)
		}
	}
	if cfg.Socket == "" {
		return newLocalDialer(ctx, key, cfg.Memory)
	}
	opts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.NoTransports,
		libp2p.Transport(newUnixTransport),
		libp2p.Security(LocalSecurityID, NewLocalSecurity),
		libp2p.DisableMetrics(),
		libp2p.DisableRelay(),
		libp2p.DisableIdentifyAddressDiscovery(),
		libp2p.NoListenAddrs,
	}
	if cfg.Socket != "" {
		if err := claimSocket(cfg.Socket); err != nil {
			return nil, spindle.E(op, err)
		}
		a, err := SocketAddr(cfg.Socket)
		if err != nil {
			return nil, spindle.E(op, spindle.Invalid, err)
		}
		opts = append(opts, libp2p.ListenAddrs(a))
	}
	// No rate limit on new connections: libp2p's default limits those
	// without an IP address as one subnet, 16 at once and one each 5 s
	// after that, which a user running spin commands in a loop exceeds.
	// Loopback TCP is exempt from it for the same reason.
	rm, err := newResourceManager(cfg.Memory, rcmgr.WithConnRateLimiters(&rate.Limiter{}))
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	opts = append(opts, libp2p.ResourceManager(rm))
	if err := ctx.Err(); err != nil {
		rm.Close()
		return nil, spindle.E(op, spindle.Transient, err)
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		rm.Close()
		return nil, spindle.E(op, spindle.IO, err)
	}
	if cfg.Socket != "" {
		// Only the node's own user (and root) may connect; the home is
		// private too, but the socket should not depend on it.
		if err := os.Chmod(cfg.Socket, 0o600); err != nil {
			h.Close()
			return nil, spindle.E(op, spindle.IO, err)
		}
	}
	return h, nil
}

// newLocalDialer returns a host that only dials Unix sockets, with
// LocalSecurity: what a spin command makes to reach its node. It is put
// together from its parts rather than by libp2p.New, which builds a
// dependency-injection graph with services a dialer never starts (NAT
// detection, address discovery, a QUIC connection manager) and takes
// several times as long, a noticeable share of a small "spin put"
// (docs/performance.md).
func newLocalDialer(ctx context.Context, key crypto.PrivKey, memory int64) (host.Host, error) {
	const op spindle.Op = "p2p.NewLocalHost"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	// As in NewLocalHost: no rate limit on new connections.
	rm, err := newResourceManager(memory, rcmgr.WithConnRateLimiters(&rate.Limiter{}))
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	h, err := buildLocalDialer(key, rm)
	if err != nil {
		rm.Close()
		return nil, spindle.E(op, spindle.Internal, err)
	}
	return h, nil
}

func buildLocalDialer(key crypto.PrivKey, rm network.ResourceManager) (host.Host, error) {
	security, err := NewLocalSecurity(LocalSecurityID, key)
	if err != nil {
		return nil, err
	}
	ps, err := pstoremem.NewPeerstore()
	if err != nil {
		return nil, err
	}
	if err := ps.AddPrivKey(security.id, key); err != nil {
		ps.Close()
		return nil, err
	}
	if err := ps.AddPubKey(security.id, key.GetPublic()); err != nil {
		ps.Close()
		return nil, err
	}
	bus := eventbus.NewBus()
	sw, err := swarm.NewSwarm(security.id, ps, bus, swarm.WithResourceManager(rm))
	if err != nil {
		ps.Close()
		return nil, err
	}
	up, err := upgrader.New([]sec.SecureTransport{security},
		[]upgrader.StreamMuxer{{ID: yamux.ID, Muxer: yamux.DefaultTransport}}, nil, rm, nil)
	if err == nil {
		err = sw.AddTransport(newUnixTransport(up, rm))
	}
	if err != nil {
		sw.Close()
		ps.Close()
		return nil, err
	}
	// The host closes the swarm, the peer store and the resource manager.
	h, err := basichost.NewHost(sw, &basichost.HostOpts{EventBus: bus, DisableSignedPeerRecord: true})
	if err != nil {
		sw.Close()
		ps.Close()
		return nil, err
	}
	h.Start()
	return h, nil
}

// claimSocket makes path free for a new socket: it fails if a process
// answers there, and removes a socket that nobody answers on.
func claimSocket(path string) error {
	if len(path) > maxSocketPath {
		return spindle.E(spindle.Invalid, fmt.Sprintf("socket path %s is longer than %d bytes", path, maxSocketPath))
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return spindle.E(spindle.IO, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return spindle.E(spindle.Exist, fmt.Sprintf("%s exists and is not a socket", path))
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return spindle.E(spindle.Exist, fmt.Sprintf("another process listens on %s", path))
	}
	if err := os.Remove(path); err != nil {
		return spindle.E(spindle.IO, err)
	}
	return nil
}

// SocketPath returns the path of the socket in a node's home, made
// absolute, and whether it is short enough to use.
func SocketPath(home string) (string, bool) {
	p, err := filepath.Abs(filepath.Join(home, SocketFile))
	if err != nil {
		return "", false
	}
	return p, len(p) <= maxSocketPath
}

// splitUnixPeerAddr splits a Unix-socket peer address, whose path takes
// the whole multiaddr: "/unix/PATH/p2p/ID" is the socket PATH of peer ID.
func splitUnixPeerAddr(s string) (peer.AddrInfo, bool, error) {
	if !strings.HasPrefix(s, "/unix/") {
		return peer.AddrInfo{}, false, nil
	}
	i := strings.LastIndex(s, "/p2p/")
	if i < 0 {
		return peer.AddrInfo{}, true, errors.New("a socket address must end in /p2p/<peer ID>")
	}
	id, err := peer.Decode(s[i+len("/p2p/"):])
	if err != nil {
		return peer.AddrInfo{}, true, err
	}
	a, err := SocketAddr(s[len("/unix"):i])
	if err != nil {
		return peer.AddrInfo{}, true, err
	}
	return peer.AddrInfo{ID: id, Addrs: []ma.Multiaddr{a}}, true, nil
}

// IsLocalAddr reports whether addr is a peer's Unix socket, which only a
// host made by [NewLocalHost] can dial.
func IsLocalAddr(addr spindle.PeerAddr) bool {
	return strings.HasPrefix(strings.TrimSpace(string(addr)), "/unix/")
}
