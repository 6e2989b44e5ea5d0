package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

// serveEnd makes h the end of tunnels: it answers each request with the
// client's peer ID and the request, and counts the requests.
func serveEnd(t *testing.T, h host.Host) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h.SetStreamHandler(p2p.TunnelEndProtocol, func(s network.Stream) {
		p2p.ServeTunnelEnd(ctx, h, s, 1<<16, time.Minute, func(_ context.Context, remote peer.ID, req []byte) ([]byte, error) {
			n.Add(1)
			return append([]byte(remote.String()+" asked "), req...), nil
		})
	})
	return &n
}

// A tapRelay carries tunnels and records every byte it carries; it
// carries a tunnel to the peer redirect names, the one asked for if
// redirect is nil.
type tapRelay struct {
	mu       sync.Mutex
	seen     bytes.Buffer
	redirect func(peer.ID) peer.ID
}

func (r *tapRelay) serve(h host.Host) {
	h.SetStreamHandler(p2p.TunnelProtocol, func(s network.Stream) {
		to, err := p2p.ReadTunnelHeader(s)
		if err != nil {
			s.Write(p2p.TunnelRefused(err))
			s.Close()
			return
		}
		r.tap([]byte(to))
		if r.redirect != nil {
			to = r.redirect(to)
		}
		end, err := h.NewStream(context.Background(), to, p2p.TunnelEndProtocol)
		if err != nil {
			s.Write(p2p.TunnelRefused(spindle.E(spindle.IO, err)))
			s.Close()
			return
		}
		s.Write(p2p.TunnelReady())
		p2p.Splice(s, end, time.Minute, r.tap)
	})
}

func (r *tapRelay) tap(b []byte) {
	r.mu.Lock()
	r.seen.Write(b)
	r.mu.Unlock()
}

func (r *tapRelay) saw(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Contains(r.seen.Bytes(), []byte(s))
}

func (r *tapRelay) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen.Len()
}

// A client reaches the end through the relay, several requests on one
// tunnel; the end learns the client's peer ID from the handshake, and
// the relay, which records every byte, sees none of what they say.
func TestTunnel(t *testing.T) {
	net := p2ptest.NewNet(t, 3)
	c, r, e := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	calls := serveEnd(t, e)
	relay := &tapRelay{}
	relay.serve(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tn, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	if tn.RemotePeer() != e.ID() {
		t.Fatalf("tunnel to %s, want %s", tn.RemotePeer(), e.ID())
	}
	for i := range 3 {
		secret := strings.Repeat("ann@example.com/secret-plans.txt ", i+1)
		out, err := tn.Call(ctx, []byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		if want := c.ID().String() + " asked " + secret; string(out) != want {
			t.Fatalf("answer %q, want %q", out, want)
		}
	}
	if calls.Load() != 3 {
		t.Errorf("the end answered %d requests, want 3", calls.Load())
	}
	if relay.len() < 3*len("ann@example.com/secret-plans.txt ") {
		t.Fatalf("the relay carried only %d bytes", relay.len())
	}
	for _, s := range []string{"secret-plans", "ann@example.com", " asked "} {
		if relay.saw(s) {
			t.Errorf("the relay saw %q", s)
		}
	}
}

// A relay that carries the tunnel to another peer than the one named is
// caught in the handshake, before the client sends anything.
func TestTunnelRefusesImpersonator(t *testing.T) {
	net := p2ptest.NewNet(t, 4)
	c, r, e, mallory := net.Hosts[0], net.Hosts[1], net.Hosts[2], net.Hosts[3]
	serveEnd(t, e)
	stolen := serveEnd(t, mallory)
	relay := &tapRelay{redirect: func(peer.ID) peer.ID { return mallory.ID() }}
	relay.serve(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tn, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if err == nil {
		tn.Close()
		t.Fatal("a tunnel to another peer than the one named was taken")
	}
	if !errors.Is(err, p2p.ErrTunnelPeer) || !errors.Is(err, spindle.Integrity) {
		t.Fatalf("got %v; want an Integrity error wrapping ErrTunnelPeer", err)
	}
	if !strings.Contains(err.Error(), mallory.ID().String()) || !strings.Contains(err.Error(), e.ID().String()) {
		t.Errorf("the error does not name both the peer asked for and the one that answered: %v", err)
	}
	t.Logf("refused: %v", err)
	if stolen.Load() != 0 {
		t.Errorf("the impostor got %d requests", stolen.Load())
	}

	// The relay itself plays the end, with its own key.
	var played atomic.Int64
	r.SetStreamHandler(p2p.TunnelProtocol, func(s network.Stream) {
		if _, err := p2p.ReadTunnelHeader(s); err != nil {
			s.Reset()
			return
		}
		s.Write(p2p.TunnelReady())
		p2p.ServeTunnelEnd(ctx, r, s, 1<<16, time.Minute, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
			played.Add(1)
			return req, nil
		})
	})
	tn, err = p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if err == nil {
		tn.Close()
		t.Fatal("the relay played the end")
	}
	if !errors.Is(err, p2p.ErrTunnelPeer) || !errors.Is(err, spindle.Integrity) {
		t.Fatalf("relay playing the end: got %v; want an Integrity error wrapping ErrTunnelPeer", err)
	}
	if played.Load() != 0 {
		t.Errorf("the relay got %d requests", played.Load())
	}
}

// A relay cannot move a client to plain text: one that does not carry
// tunnels, or answers in plain in place of the end's handshake, fails
// the tunnel; nothing is sent in plain.
func TestTunnelNoDowngrade(t *testing.T) {
	net := p2ptest.NewNet(t, 3)
	c, r, e := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	serveEnd(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// No tunnels at all (an old node, or one that says so).
	_, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if !errors.Is(err, p2p.ErrNoTunnels) || !errors.Is(err, spindle.Invalid) {
		t.Fatalf("relay without tunnels: got %v, want an Invalid error wrapping ErrNoTunnels", err)
	}

	// A relay that says yes, then answers in plain.
	var got atomic.Int64
	r.SetStreamHandler(p2p.TunnelProtocol, func(s network.Stream) {
		if _, err := p2p.ReadTunnelHeader(s); err != nil {
			s.Reset()
			return
		}
		s.Write(p2p.TunnelReady())
		buf := make([]byte, 1<<10)
		n, _ := s.Read(buf)
		got.Add(int64(n))
		// A plain answer where the handshake belongs.
		s.Write(p2p.EncodeTunnelHeader(peer.ID(strings.Repeat("plain answer ", 30))))
		io.Copy(io.Discard, s)
	})
	_, err = p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if !errors.Is(err, p2p.ErrTunnelPeer) || !errors.Is(err, spindle.Integrity) {
		t.Fatalf("relay answering in plain: got %v, want an Integrity error wrapping ErrTunnelPeer", err)
	}
	t.Logf("refused: %v", err)
	if got.Load() == 0 {
		t.Error("the client sent no handshake")
	}

	// A relay that refuses: its error, and no tunnel.
	r.SetStreamHandler(p2p.TunnelProtocol, func(s network.Stream) {
		p2p.ReadTunnelHeader(s)
		s.Write(p2p.TunnelRefused(spindle.E(spindle.Permission, "not today")))
		s.Close()
	})
	_, err = p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	var refused *p2p.RefusedError
	if !errors.As(err, &refused) || !errors.Is(refused.Err, spindle.Permission) || !errors.Is(err, spindle.IO) || errors.Is(err, spindle.Permission) {
		t.Fatalf("relay refusing: got %v, want an IO error holding the relay's Permission error out of errors.Is's reach", err)
	}

	// A relay that makes up an answer in its refusal: still only IO.
	r.SetStreamHandler(p2p.TunnelProtocol, func(s network.Stream) {
		p2p.ReadTunnelHeader(s)
		s.Write(p2p.TunnelRefused(spindle.E(spindle.NotExist, spindle.PathName("ann@example.com/f"))))
		s.Close()
	})
	_, err = p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if errors.Is(err, spindle.NotExist) || !errors.Is(err, spindle.IO) {
		t.Fatalf("relay refusing with NotExist: got %v, want IO and not NotExist", err)
	}
}

// A tunnel header names a peer; anything else is refused.
func TestReadTunnelHeader(t *testing.T) {
	net := p2ptest.NewNet(t, 1)
	id := net.Hosts[0].ID()
	got, err := p2p.ReadTunnelHeader(bytes.NewReader(p2p.EncodeTunnelHeader(id)))
	if err != nil || got != id {
		t.Fatalf("got %s, %v; want %s", got, err, id)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0, 0}, {1, 0, 0, 0, 3, 'a', 'b', 'c'}, {2, 0, 0, 0, 0}, {1, 0, 0, 1, 0}, p2p.TunnelReady()} {
		if _, err := p2p.ReadTunnelHeader(bytes.NewReader(bad)); !errors.Is(err, spindle.Invalid) {
			t.Errorf("header %x: got %v, want Invalid", bad, err)
		}
	}
}

func FuzzReadTunnelHeader(f *testing.F) {
	f.Add(p2p.EncodeTunnelHeader("12D3KooWGzxzKZYveHXtpG6AsrUJBcWxHBFS2HsEoGTxrMLvKXtf"))
	f.Add([]byte{1, 0, 0, 0, 2, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := p2p.ReadTunnelHeader(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, spindle.Invalid) {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if id.Validate() != nil {
			t.Fatalf("took an invalid peer ID %q", id)
		}
		if enc := p2p.EncodeTunnelHeader(id); !bytes.HasPrefix(data, enc) {
			t.Fatalf("header %x read as %s, which encodes as %x", data, id, enc)
		}
	})
}

// A request and its answer through a relay, on mocknet: on a tunnel kept
// from the call before, and on a new tunnel each time (the handshake
// included).
func BenchmarkTunnel(b *testing.B) {
	net := p2ptest.NewNet(b, 3)
	c, r, e := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.SetStreamHandler(p2p.TunnelEndProtocol, func(s network.Stream) {
		p2p.ServeTunnelEnd(ctx, e, s, 1<<16, time.Minute, func(_ context.Context, _ peer.ID, req []byte) ([]byte, error) {
			return req, nil
		})
	})
	relay := &tapRelay{}
	relay.serve(r)
	req := make([]byte, 1<<10)
	b.Run("kept", func(b *testing.B) {
		tn, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
		if err != nil {
			b.Fatal(err)
		}
		defer tn.Close()
		for b.Loop() {
			if _, err := tn.Call(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		for b.Loop() {
			tn, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := tn.Call(ctx, req); err != nil {
				b.Fatal(err)
			}
			tn.Close()
		}
	})
}

// A tunnel whose end went away while it was idle is known broken before
// it is used again.
func TestTunnelAlive(t *testing.T) {
	net := p2ptest.NewNet(t, 3)
	c, r, e := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	serveEnd(t, e)
	relay := &tapRelay{}
	relay.serve(r)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tn, err := p2p.OpenTunnel(ctx, c, r.ID(), e.ID(), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	defer tn.Close()
	if _, err := tn.Call(ctx, []byte("x")); err != nil || !tn.Alive() {
		t.Fatalf("call: %v; alive %v", err, tn.Alive())
	}
	e.Close()
	deadline := time.Now().Add(10 * time.Second)
	for tn.Alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tn.Alive() {
		t.Fatal("the tunnel is alive after its end closed")
	}
	if _, err := tn.Call(ctx, []byte("x")); !errors.Is(err, spindle.IO) {
		t.Errorf("call on a broken tunnel: %v, want IO", err)
	}
}
