package p2p

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// fakeRemote is a manet.Conn whose remote address is given, so that the
// limits per address can be tested without many source addresses.
type fakeRemote struct {
	manet.Conn
	remote ma.Multiaddr
	closed bool
}

func (c *fakeRemote) RemoteMultiaddr() ma.Multiaddr { return c.remote }
func (c *fakeRemote) SetDeadline(t time.Time) error { return nil }
func (c *fakeRemote) Close() error                  { c.closed = true; return nil }
func fakeConn(ip string) *fakeRemote {
	return &fakeRemote{remote: ma.StringCast("/ip4/" + ip + "/tcp/1234")}
}
func (c *fakeRemote) LocalMultiaddr() ma.Multiaddr     { return ma.StringCast("/ip4/127.0.0.1/tcp/1") }
func (c *fakeRemote) String() string                   { return c.remote.String() }
func (c *fakeRemote) Read(b []byte) (int, error)       { return 0, errors.New("fake") }
func (c *fakeRemote) Write(b []byte) (int, error)      { return 0, errors.New("fake") }
func (c *fakeRemote) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeRemote) SetWriteDeadline(time.Time) error { return nil }
func (c *fakeRemote) LocalAddr() net.Addr              { return nil }
func (c *fakeRemote) RemoteAddr() net.Addr             { return nil }

// A new connection past a limit closes the oldest one in its handshake,
// from its own address if that address is at its limit, else of all; a
// connection whose handshake is done no longer counts.
func TestHandshakeLimits(t *testing.T) {
	h := newHandshakes(time.Minute, 6, 3)
	a := []*fakeRemote{fakeConn("10.0.0.1"), fakeConn("10.0.0.1"), fakeConn("10.0.0.1"), fakeConn("10.0.0.1")}
	for _, c := range a[:3] {
		h.start(c)
	}
	h.secured(a[0]) // Authenticated: no longer pending.
	h.start(a[3])
	if a[0].closed || a[1].closed || h.pending() != 3 {
		t.Fatalf("under the limit: closed %v %v, %d pending", a[0].closed, a[1].closed, h.pending())
	}
	more := fakeConn("10.0.0.1")
	h.start(more)
	if !a[1].closed || a[2].closed || h.pending() != 3 {
		t.Fatalf("over the per-address limit: oldest closed %v, next closed %v, %d pending; want the oldest closed only", a[1].closed, a[2].closed, h.pending())
	}
	// Other addresses fill the rest, then push out the oldest of all.
	b := []*fakeRemote{fakeConn("10.0.0.2"), fakeConn("10.0.0.3"), fakeConn("10.0.0.4"), fakeConn("10.0.0.5")}
	for _, c := range b {
		h.start(c)
	}
	if !a[2].closed || h.pending() != 6 {
		t.Fatalf("over the total limit: oldest closed %v, %d pending", a[2].closed, h.pending())
	}
	for _, c := range append(b, a[3], more) {
		if c.closed {
			t.Fatalf("%v closed, want only the oldest", c)
		}
	}
	// Connections past their deadline are forgotten.
	h.timeout = time.Nanosecond
	h.start(fakeConn("10.0.0.9"))
	if h.pending() != 1 {
		t.Errorf("%d pending after the deadline passed, want 1", h.pending())
	}
	if len(h.perAddr) != 1 || len(h.byConn) != 1 {
		t.Errorf("per-address counts %v and %d conns kept, want one", h.perAddr, len(h.byConn))
	}
}

// tcpHost returns a host listening on loopback TCP only, serving an echo
// protocol, and its listen address as host:port.
func tcpHost(t *testing.T, cfg Config) (host.Host, string) {
	t.Helper()
	cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	h, err := NewHost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	Handle(context.Background(), h, "/test/echo", 0, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		return req, nil
	})
	na, err := manet.ToNetAddr(h.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	return h, na.String()
}

// A connection that does not finish its handshake is closed after the
// handshake timeout; a connection that did finish it lives on.
func TestHandshakeDeadline(t *testing.T) {
	const timeout = 500 * time.Millisecond
	srv, addr := tcpHost(t, Config{HandshakeTimeout: timeout})
	idle, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()

	cli, _ := tcpHost(t, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cli.Connect(ctx, peer.AddrInfo{ID: srv.ID(), Addrs: srv.Addrs()}); err != nil {
		t.Fatal(err)
	}
	conns := cli.Network().ConnsToPeer(srv.ID())
	if len(conns) != 1 {
		t.Fatalf("%d connections to the server, want 1", len(conns))
	}

	start := time.Now()
	// The server sends its protocol header at once; then it must close.
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.Copy(io.Discard, idle)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("idle connection not closed by the server within 5 s: %v", err)
	}
	if waited := time.Since(start); waited > 3*timeout {
		t.Errorf("idle connection closed after %v, want about %v", waited, timeout)
	}

	// Well past the deadline, the authenticated connection still works.
	time.Sleep(2 * timeout)
	resp, err := Call(ctx, cli, srv.ID(), "/test/echo", []byte("ping"), 0)
	if err != nil || !bytes.Equal(resp, []byte("ping")) {
		t.Fatalf("call after the handshake deadline: %q, %v", resp, err)
	}
	after := cli.Network().ConnsToPeer(srv.ID())
	if len(after) != 1 || after[0].ID() != conns[0].ID() || after[0].IsClosed() {
		t.Fatalf("authenticated connection replaced or closed after the handshake deadline")
	}
	if n := srv.Network().Connectedness(cli.ID()); n != network.Connected {
		t.Errorf("server sees the client as %v", n)
	}
}

// The resource manager never refuses a connection in its handshake before
// the host's own limit does, and leaves room beside them for a thousand
// authenticated connections, whatever the memory.
func TestLimitsLeaveRoom(t *testing.T) {
	for _, memory := range []int64{0, 64 << 20, DefaultMemory, 4 << 30} {
		l := limitConfig(memory).ToPartialLimitConfig()
		tr, sys := l.Transient, l.System
		if int(tr.ConnsInbound) < maxPending+32 || int(tr.Conns) < int(tr.ConnsInbound) || int(tr.FD) < int(tr.ConnsInbound) {
			t.Errorf("memory %d: transient limits %+v leave no margin above %d connections in their handshake", memory, tr, maxPending)
		}
		if int(sys.ConnsInbound)-int(tr.ConnsInbound) < 1024 || int(sys.FD) < int(sys.Conns) || int(sys.Conns) < int(sys.ConnsInbound) {
			t.Errorf("memory %d: system limits %+v leave too little room beside transient %+v", memory, sys, tr)
		}
	}
}
