package p2p

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/sec"

	"spindle.dev"
)

// socketDir returns a directory whose socket paths are short enough for
// every Unix, which t.TempDir's long names may not be.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "spsock")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newLocalPair(t *testing.T) (server, client host.Host, addr spindle.PeerAddr) {
	t.Helper()
	ctx := context.Background()
	server, err := NewLocalHost(ctx, LocalConfig{Socket: filepath.Join(socketDir(t), SocketFile)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	client, err = NewLocalHost(ctx, LocalConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	addrs := Addrs(server)
	if len(addrs) != 1 || !IsLocalAddr(addrs[0]) {
		t.Fatalf("local host addresses = %v, want one socket address", addrs)
	}
	return server, client, addrs[0]
}

func TestLocalHostCarriesStreams(t *testing.T) {
	server, client, addr := newLocalPair(t)
	const proto = "/spindle/test/echo"
	server.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		if s.Conn().ConnState().Security != LocalSecurityID {
			s.Reset()
			return
		}
		io.Copy(s, s)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	id, err := Connect(ctx, client, addr)
	if err != nil {
		t.Fatal(err)
	}
	if id != server.ID() {
		t.Fatalf("connected to %s, want %s", id, server.ID())
	}
	s, err := client.NewStream(ctx, id, proto)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Conn().RemotePeer(); got != server.ID() {
		t.Errorf("stream's remote peer = %s, want %s", got, server.ID())
	}
	if got := s.Conn().RemotePublicKey(); got == nil || !got.Equals(server.Peerstore().PubKey(server.ID())) {
		t.Errorf("stream's remote key is not the server's")
	}
	msg := bytes.Repeat([]byte("spindle "), 300_000) // Several yamux frames.
	go func() {
		s.Write(msg)
		s.CloseWrite()
	}()
	got, err := io.ReadAll(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo returned %d bytes, want the %d sent", len(got), len(msg))
	}
	// The server saw the client under its own ID.
	if conns := server.Network().ConnsToPeer(client.ID()); len(conns) == 0 {
		t.Errorf("server has no connection from client %s", client.ID())
	}
}

// A user running spin commands in a loop opens many connections in a row;
// none may be refused (libp2p's default rate limit refused the 17th).
func TestLocalHostManyConnections(t *testing.T) {
	_, _, addr := newLocalPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 30 {
		// A new host each time, like a new spin command.
		client, err := NewLocalHost(ctx, LocalConfig{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Connect(ctx, client, addr)
		client.Close()
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
	}
}

func TestLocalHostChecksPeerID(t *testing.T) {
	_, client, addr := newLocalPair(t)
	other, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherID, _ := peer.IDFromPrivateKey(other)
	s := string(addr)
	wrong := spindle.PeerAddr(s[:strings.LastIndex(s, "/p2p/")] + "/p2p/" + otherID.String())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = Connect(ctx, client, wrong)
	if err == nil {
		t.Fatal("connected to the socket as another peer")
	}
	if !strings.Contains(err.Error(), "peer id mismatch") {
		t.Errorf("error %q does not say the peer ID did not match", err)
	}
}

func TestNetworkHostCannotDialSocket(t *testing.T) {
	_, _, addr := newLocalPair(t)
	h, err := NewHost(context.Background(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Connect(ctx, h, addr); err == nil {
		t.Fatal("a network host dialled a Unix socket; LocalSecurity must stay off the network")
	}
}

func TestParseSocketPeerAddr(t *testing.T) {
	id := "12D3KooWHdDj2tpAr7PcsmRW7uNHX2fqPiWwqxpHmEvSsT3GvFdv"
	ai, err := ParsePeerAddr(spindle.PeerAddr("/unix/home/ann/spin/node/sock/p2p/" + id))
	if err != nil {
		t.Fatal(err)
	}
	if ai.ID.String() != id || len(ai.Addrs) != 1 || ai.Addrs[0].String() != "/unix/home/ann/spin/node/sock" {
		t.Errorf("parsed %v, want the socket /home/ann/spin/node/sock of %s", ai, id)
	}
	for _, bad := range []string{
		"/unix/home/ann/spin/node/sock",              // No peer ID.
		"/unix/home/ann/spin/node/sock/p2p/nonsense", // Bad peer ID.
	} {
		if _, err := ParsePeerAddr(spindle.PeerAddr(bad)); !errors.Is(err, spindle.Invalid) {
			t.Errorf("ParsePeerAddr(%q) = %v, want an Invalid error", bad, err)
		}
	}
}

func TestClaimSocket(t *testing.T) {
	dir := socketDir(t)

	// A live socket is not taken over.
	live := filepath.Join(dir, "live")
	l, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := claimSocket(live); !errors.Is(err, spindle.Exist) {
		t.Errorf("claimSocket(live socket) = %v, want an Exist error", err)
	}

	// A stale one, left by a killed process, is replaced.
	stale := filepath.Join(dir, "stale")
	ls, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ls.SetUnlinkOnClose(false)
	ls.Close()
	if err := claimSocket(stale); err != nil {
		t.Errorf("claimSocket(stale socket) = %v", err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale socket still there: %v", err)
	}

	// A file that is not a socket is never removed.
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("keep me"), 0o600)
	if err := claimSocket(file); !errors.Is(err, spindle.Exist) {
		t.Errorf("claimSocket(regular file) = %v, want an Exist error", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "keep me" {
		t.Error("claimSocket changed a regular file")
	}

	if err := claimSocket("/" + strings.Repeat("x", 200)); !errors.Is(err, spindle.Invalid) {
		t.Errorf("claimSocket(long path) = %v, want an Invalid error", err)
	}
	if _, ok := SocketPath("/" + strings.Repeat("x", 200)); ok {
		t.Error("SocketPath accepted a path too long for a socket")
	}
}

// handshakeWith runs LocalSecurity's inbound side against a peer that
// sends the given bytes, and returns its error.
func handshakeWith(t *testing.T, send []byte) error {
	t.Helper()
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	s, err := NewLocalSecurity(LocalSecurityID, key)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go io.Copy(io.Discard, b)
	go b.Write(send)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = s.SecureInbound(ctx, a, "")
	return err
}

func hello(key crypto.PubKey) []byte {
	pub, _ := crypto.MarshalPublicKey(key)
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(pub)))
	msg = append(msg, pub...)
	return append(msg, make([]byte, localNonce)...)
}

func TestLocalSecurityRejectsHostilePeers(t *testing.T) {
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	good := hello(key.GetPublic())
	for _, tc := range []struct {
		name string
		send []byte
		want string
	}{
		{"zero-length key", []byte{0, 0}, "handshake field of 0 bytes"},
		{"oversized key", []byte{0xff, 0xff}, "handshake field of 65535 bytes"},
		{"garbage key", append([]byte{0, 4, 1, 2, 3, 4}, make([]byte, localNonce)...), "bad public key"},
		{"truncated hello", good[:10], "timeout"},
		{"bad signature", append(append(good[:len(good):len(good)], 0, 64), make([]byte, 64)...), "bad signature"},
		{"oversized signature", append(good[:len(good):len(good)], 0xff, 0xff), "handshake field of 65535 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := handshakeWith(t, tc.send)
			if err == nil {
				t.Fatal("handshake succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// A peer that replays the other side's own hello (a reflection) fails.
func TestLocalSecurityRejectsReflection(t *testing.T) {
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	s, _ := NewLocalSecurity(LocalSecurityID, key)
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		defer b.Close()
		var n [2]byte
		io.ReadFull(b, n[:])
		rest := make([]byte, int(binary.BigEndian.Uint16(n[:]))+localNonce)
		io.ReadFull(b, rest)
		b.Write(append(n[:], rest...)) // Echo the hello.
		io.Copy(b, b)                  // And then every message.
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := s.SecureOutbound(ctx, a, ""); err == nil {
		t.Fatal("handshake with a mirror succeeded")
	}
}

func TestLocalSecurityBothSides(t *testing.T) {
	k1, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	k2, _, _ := crypto.GenerateECDSAKeyPair(rand.Reader)
	s1, _ := NewLocalSecurity(LocalSecurityID, k1)
	s2, _ := NewLocalSecurity(LocalSecurityID, k2)
	id1, _ := peer.IDFromPrivateKey(k1)
	id2, _ := peer.IDFromPrivateKey(k2)
	a, b := net.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type result struct {
		c   sec.SecureConn
		err error
	}
	in := make(chan result, 1)
	go func() {
		c, err := s2.SecureInbound(ctx, b, "")
		in <- result{c, err}
	}()
	out, err := s1.SecureOutbound(ctx, a, id2)
	if err != nil {
		t.Fatal(err)
	}
	r := <-in
	if r.err != nil {
		t.Fatal(r.err)
	}
	if out.RemotePeer() != id2 || out.LocalPeer() != id1 || r.c.RemotePeer() != id1 || r.c.LocalPeer() != id2 {
		t.Errorf("peers: dialer sees %s→%s, listener sees %s→%s", out.LocalPeer(), out.RemotePeer(), r.c.LocalPeer(), r.c.RemotePeer())
	}
	go out.Write([]byte("after the handshake"))
	buf := make([]byte, 19)
	if _, err := io.ReadFull(r.c, buf); err != nil || string(buf) != "after the handshake" {
		t.Errorf("read %q, %v", buf, err)
	}
}

func FuzzParseLocalHello(f *testing.F) {
	key, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	f.Add(hello(key.GetPublic()))
	f.Add([]byte{0, 0})
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, msg []byte) {
		k, err := ParseLocalHello(msg)
		if err != nil {
			return
		}
		// Whatever parses is a key libp2p can name a peer by.
		if _, err := peer.IDFromPublicKey(k); err != nil {
			t.Fatalf("parsed a key without a peer ID: %v", err)
		}
		n := int(binary.BigEndian.Uint16(msg))
		if len(msg) != 2+n+localNonce {
			t.Fatalf("accepted a hello of %d bytes with a %d-byte key", len(msg), n)
		}
	})
}
