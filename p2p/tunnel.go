package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/core/sec"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	msmux "github.com/multiformats/go-multistream"

	"spindle.dev"
)

// Tunnels: a channel between a client and a peer it reaches through
// another node, secured end to end.
//
// The client opens a stream of TunnelProtocol to the node it is connected
// to, the relay, and sends one frame naming the peer it wants, the end
// (OpenTunnel). The relay, if it agrees, opens a stream of
// TunnelEndProtocol to the end, answers the client with an empty frame,
// and from then on copies bytes both ways without reading them (Splice).
// Inside, the client and the end run libp2p's Noise handshake, the one
// libp2p secures its own connections with: the client names the end's
// peer ID, so the handshake fails unless the other side holds the end's
// peer key, and the end learns the client's peer ID. The relay sees
// which peer is asked, when, and how many bytes go each way; never what
// they say, and it cannot change them unnoticed.
//
// Over the secured channel each message is a frame as on a Conn; the
// client sends one request and waits for its answer, and may send
// another after it (Tunnel.Call), so that one handshake serves many
// requests.

// Protocols of the tunnels.
const (
	// TunnelProtocol is the client's stream to its relay.
	TunnelProtocol protocol.ID = "/spindle/tunnel/1"
	// TunnelEndProtocol is the relay's stream to the end.
	TunnelEndProtocol protocol.ID = "/spindle/tunnel-end/1"
	// tunnelNoise names the handshake inside (it is not negotiated: the
	// protocol ID fixes it).
	tunnelNoise protocol.ID = "/noise"
)

// maxTunnelHeader bounds the frame that names the end: a peer ID is at
// most some tens of bytes.
const maxTunnelHeader = 128

// ErrNoTunnels is the error (wrapped) of a relay that does not serve
// TunnelProtocol: a node older than tunnels. A client is never moved to
// another way silently: a relay that says it has no tunnels is refused.
var ErrNoTunnels = errors.New("the node does not carry tunnels (" + string(TunnelProtocol) + "); upgrade it")

// A RefusedError is a relay's refusal of a tunnel. It is the relay's own
// word, unsigned, and says no more than a dropped stream: it is IO (or
// Transient, if the relay said so), and Err, what the relay said, is not
// unwrapped, so that no errors.Is finds in it a NotExist or Permission
// the relay made up. (A caller may look at Err for a demand to sign in
// again, which it may act on safely.)
type RefusedError struct {
	Via, To peer.ID
	Err     error
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("node %s refused a tunnel to %s: %v", e.Via, e.To, e.Err)
}

// ErrTunnelPeer is the error (wrapped) of a tunnel whose far side did not
// prove that it holds the named end's peer key: the relay, or someone it
// handed the stream to, played the end.
var ErrTunnelPeer = errors.New("the far side of the tunnel is not the peer named")

// EncodeTunnelHeader returns the frame a client sends its relay to ask
// for a tunnel to the peer to.
func EncodeTunnelHeader(to peer.ID) []byte {
	return appendFrame(nil, tagData, []byte(to))
}

// ReadTunnelHeader reads the frame that opens a tunnel, unbuffered (the
// bytes after it are the client's handshake, which the relay passes on),
// and returns the peer it names.
func ReadTunnelHeader(r io.Reader) (peer.ID, error) {
	tag, b, err := readFrame(r, maxTunnelHeader)
	if err != nil {
		if err == io.EOF {
			err = errors.New("stream closed before the tunnel header")
		}
		return "", spindle.E(spindle.Op("p2p.ReadTunnelHeader"), spindle.Invalid, err)
	}
	return ParseTunnelHeader(tag, b)
}

// ParseTunnelHeader decodes the payload of a tunnel header frame with
// tag tag.
func ParseTunnelHeader(tag byte, b []byte) (peer.ID, error) {
	const op spindle.Op = "p2p.ReadTunnelHeader"
	if tag != tagData {
		return "", spindle.E(op, spindle.Invalid, "the tunnel header is an error frame")
	}
	id, err := peer.IDFromBytes(b)
	if err != nil {
		return "", spindle.E(op, spindle.Invalid, fmt.Errorf("bad peer ID in the tunnel header: %w", err))
	}
	return id, nil
}

// TunnelReady is the frame a relay sends a client once the end's stream
// is open; TunnelRefused the frame that says why it is not.
func TunnelReady() []byte { return appendFrame(nil, tagData, nil) }

// TunnelRefused encodes err as the relay's refusal of a tunnel.
func TunnelRefused(err error) []byte { return appendFrame(nil, tagError, marshalError(err)) }

// appendFrame appends a frame of tag with payload p to b.
func appendFrame(b []byte, tag byte, p []byte) []byte {
	b = append(b, tag, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(p)))
	return append(b, p...)
}

// Splice copies bytes between the streams a and b, both ways: the end of
// one way is passed on (CloseWrite) and the other goes on; a reset, an
// error, or nothing moving one way for idle resets both. tap, if set, is
// given every chunk copied (for tests that play a relay that records
// what it can). It returns when both ways end, and closes both streams.
func Splice(a, b network.Stream, idle time.Duration, tap func([]byte)) {
	var wg sync.WaitGroup
	var once sync.Once
	stop := func() { once.Do(func() { a.Reset(); b.Reset() }) }
	cp := func(dst, src network.Stream) {
		defer wg.Done()
		buf := make([]byte, 16<<10)
		for {
			src.SetReadDeadline(time.Now().Add(idle))
			n, err := src.Read(buf)
			if n > 0 {
				if tap != nil {
					tap(buf[:n])
				}
				dst.SetWriteDeadline(time.Now().Add(idle))
				if _, werr := dst.Write(buf[:n]); werr != nil {
					stop()
					return
				}
			}
			if err == io.EOF {
				dst.CloseWrite()
				return
			}
			if err != nil {
				stop()
				return
			}
		}
	}
	wg.Add(2)
	go cp(a, b)
	cp(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// noiseOf returns a Noise transport for h's identity.
func noiseOf(h host.Host) (*noise.Transport, error) {
	key := h.Peerstore().PrivKey(h.ID())
	if key == nil {
		return nil, spindle.E(spindle.Internal, fmt.Sprintf("host %s has no private key in its peerstore", h.ID()))
	}
	return noise.New(tunnelNoise, key, nil)
}

// A Tunnel is a client's secured channel to a peer through a relay: one
// request at a time (Call); callers that want more at once open more.
// A goroutine reads the answers, so that a tunnel whose relay or end went
// away while it was idle is known broken before it is used (Alive).
type Tunnel struct {
	sc       sec.SecureConn
	s        network.Stream
	maxFrame int

	mu      sync.Mutex  // One call at a time.
	waiting atomic.Bool // A call waits for its answer; the reader takes it.
	answers chan tunnelFrame
	done    chan struct{} // Closed when the reader stops, with err set.
	err     error
}

// A tunnelFrame is a frame the reader got.
type tunnelFrame struct {
	tag byte
	b   []byte
}

func newTunnel(sc sec.SecureConn, s network.Stream, maxFrame int) *Tunnel {
	t := &Tunnel{sc: sc, s: s, maxFrame: maxFrame, answers: make(chan tunnelFrame, 1), done: make(chan struct{})}
	go t.read()
	return t
}

// read hands each frame that arrives to the call waiting for it, until
// the stream ends or a frame comes that no call waits for.
func (t *Tunnel) read() {
	defer close(t.done)
	for {
		tag, b, err := readFrame(t.sc, t.maxFrame)
		if err == nil && !t.waiting.CompareAndSwap(true, false) {
			err = spindle.E(spindle.Invalid, "a frame no request asked for")
		}
		if err != nil {
			if err == io.EOF {
				err = errors.New("the tunnel closed")
			}
			t.err = err
			t.s.Reset()
			return
		}
		t.answers <- tunnelFrame{tag, b}
	}
}

// OpenTunnel opens a tunnel from h to the peer to through the relay via,
// to which h is connected, with frames of at most maxFrame bytes. A relay
// that does not speak TunnelProtocol, or refuses, gives an error (never
// a way around the tunnel: the caller decides); a far side that does not
// prove it holds to's key gives an Integrity error that wraps
// ErrTunnelPeer.
func OpenTunnel(ctx context.Context, h host.Host, via, to peer.ID, maxFrame int) (*Tunnel, error) {
	const op spindle.Op = "p2p.OpenTunnel"
	tpt, err := noiseOf(h)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	s, err := h.NewStream(ctx, via, TunnelProtocol)
	if errors.Is(err, msmux.ErrNotSupported[protocol.ID]{}) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("node %s: %w", via, ErrNoTunnels))
	}
	if err != nil {
		return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("node %s, protocol %s: %w", via, TunnelProtocol, err))
	}
	stop := context.AfterFunc(ctx, func() { s.ResetWithError(codeCancel) })
	defer stop()
	if _, err := s.Write(EncodeTunnelHeader(to)); err != nil {
		s.Reset()
		return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("node %s: %w", via, err))
	}
	// The handshake's first message goes out behind the header, without
	// waiting for the relay's answer, which comes back before the end's:
	// a round trip less to open a tunnel (the relay passes on what
	// follows the header once the end's stream is open).
	rc := &relayConn{streamConn: streamConn{s}}
	sc, err := tpt.SecureOutbound(ctx, rc, to)
	if rc.refusal != nil {
		s.Reset()
		kind := spindle.IO
		if spindle.KindOf(rc.refusal) == spindle.Transient {
			kind = spindle.Transient
		}
		return nil, spindle.E(op, kind, &RefusedError{Via: via, To: to, Err: rc.refusal})
	}
	if rc.err != nil {
		s.Reset()
		err := rc.err
		if err == io.EOF {
			err = errors.New("closed the tunnel without an answer")
		}
		if spindle.KindOf(err) == spindle.Other {
			err = spindle.E(streamErrKind(ctx), err)
		}
		return nil, spindle.E(op, fmt.Errorf("node %s, tunnel to %s: %w", via, to, err))
	}
	if err != nil {
		s.Reset()
		var mismatch sec.ErrPeerIDMismatch
		if errors.As(err, &mismatch) {
			return nil, spindle.E(op, spindle.Integrity, fmt.Errorf("tunnel to %s through node %s: %w: the handshake was signed by %s (%v)", to, via, ErrTunnelPeer, mismatch.Actual, err))
		}
		if ctx.Err() == nil && !isStreamEnd(err) && !isTimeout(err) {
			// Anything else that comes back instead of the end's
			// handshake is not the end either.
			return nil, spindle.E(op, spindle.Integrity, fmt.Errorf("tunnel to %s through node %s: %w: %v", to, via, ErrTunnelPeer, err))
		}
		return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("tunnel to %s through node %s: handshake: %w", to, via, err))
	}
	return newTunnel(sc, s, maxFrame), nil
}

// isTimeout reports whether err is a deadline that passed: an end that
// does not answer (hung, or stopped) is slow, not someone else.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// isStreamEnd reports whether err is the end of the stream, which a relay
// or a network may cause without lying.
func isStreamEnd(err error) bool {
	var se *network.StreamError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, network.ErrReset) || errors.As(err, &se)
}

// RemotePeer returns the end's peer ID, as the handshake proved it.
func (t *Tunnel) RemotePeer() peer.ID { return t.sc.RemotePeer() }

// Call sends req through t and returns the end's answer. After an error
// other than one the end sent, the tunnel is broken (Alive reports
// false) and must be closed.
func (t *Tunnel) Call(ctx context.Context, req []byte) ([]byte, error) {
	const op spindle.Op = "p2p.TunnelCall"
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.Alive() {
		return nil, t.fail(ctx, t.err)
	}
	if len(req) > t.maxFrame {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("message of %d bytes exceeds the frame limit of %d bytes", len(req), t.maxFrame))
	}
	stop := context.AfterFunc(ctx, func() { t.s.ResetWithError(codeCancel) })
	defer stop()
	t.waiting.Store(true)
	if _, err := t.sc.Write(appendFrame(nil, tagData, req)); err != nil {
		return nil, t.fail(ctx, err)
	}
	select {
	case f := <-t.answers:
		if f.tag == tagError {
			return nil, spindle.UnmarshalError(f.b)
		}
		return f.b, nil
	case <-t.done:
		return nil, t.fail(ctx, t.err)
	case <-ctx.Done():
		return nil, t.fail(ctx, ctx.Err())
	}
}

// fail resets t and classifies err.
func (t *Tunnel) fail(ctx context.Context, err error) error {
	const op spindle.Op = "p2p.TunnelCall"
	t.s.Reset()
	if ctx.Err() != nil {
		return spindle.E(op, spindle.Transient, fmt.Errorf("peer %s: %w", t.RemotePeer(), ctx.Err()))
	}
	kind := spindle.IO
	if spindle.KindOf(err) == spindle.Invalid {
		kind = spindle.Invalid
	}
	return spindle.E(op, kind, fmt.Errorf("peer %s: %w", t.RemotePeer(), err))
}

// Alive reports whether t may still be used: its stream has not ended
// (the relay or the end went away, or a call failed).
func (t *Tunnel) Alive() bool {
	select {
	case <-t.done:
		return false
	default:
		return true
	}
}

// Close ends the tunnel.
func (t *Tunnel) Close() error { return t.sc.Close() }

// ServeTunnelEnd serves the end of the tunnel on s, a stream of
// TunnelEndProtocol a relay opened to h: it runs the Noise handshake as
// h, then answers each request with fn, given the client's peer ID as
// the handshake proved it, until the client closes or nothing arrives
// for idle.
func ServeTunnelEnd(ctx context.Context, h host.Host, s network.Stream, maxFrame int, idle time.Duration, fn Handler) error {
	const op spindle.Op = "p2p.ServeTunnelEnd"
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	tpt, err := noiseOf(h)
	if err != nil {
		s.Reset()
		return spindle.E(op, err)
	}
	hctx, cancel := context.WithTimeout(ctx, idle)
	sc, err := tpt.SecureInbound(hctx, streamConn{s}, "")
	cancel()
	if err != nil {
		s.Reset()
		return spindle.E(op, spindle.IO, fmt.Errorf("handshake through %s: %w", s.Conn().RemotePeer(), err))
	}
	remote := sc.RemotePeer()
	for {
		s.SetReadDeadline(time.Now().Add(idle))
		tag, req, err := readFrame(sc, maxFrame)
		if err == io.EOF {
			return nil
		}
		if err == nil && tag != tagData {
			err = spindle.E(spindle.Invalid, "an error frame where a request belongs")
		}
		if err != nil {
			s.ResetWithError(codeProtocol)
			return spindle.E(op, spindle.IO, fmt.Errorf("client %s: %w", remote, err))
		}
		s.SetReadDeadline(time.Time{})
		out, ferr := fn(ctx, remote, req)
		var frame []byte
		switch {
		case ferr != nil:
			frame = appendFrame(nil, tagError, marshalError(ferr))
		case len(out) > maxFrame:
			frame = appendFrame(nil, tagError, marshalError(spindle.E(spindle.Internal, "answer exceeds the frame limit")))
		default:
			frame = appendFrame(nil, tagData, out)
		}
		s.SetWriteDeadline(time.Now().Add(idle))
		if _, err := sc.Write(frame); err != nil {
			s.Reset()
			return spindle.E(op, spindle.IO, fmt.Errorf("client %s: %w", remote, err))
		}
	}
}

// streamConn is a stream as the net.Conn a security transport wants.
type streamConn struct{ network.Stream }

// A relayConn is the stream to a relay as the handshake with the tunnel's
// end sees it: its first read takes the relay's answer to the tunnel
// header first, and fails if that is not TunnelReady.
type relayConn struct {
	streamConn
	answered bool
	refusal  error // The relay's refusal, if it refused.
	err      error // Why its answer could not be read, or was not one.
}

// errRelayAnswer fails the handshake's read when the relay's answer is
// not TunnelReady; relayConn.refusal or relayConn.err says why.
var errRelayAnswer = errors.New("the relay did not open the tunnel")

func (c *relayConn) Read(p []byte) (int, error) {
	if !c.answered {
		c.answered = true
		tag, b, err := readFrame(c.Stream, DefaultMaxFrame)
		switch {
		case err != nil:
			c.err = err
		case tag == tagError:
			c.refusal = spindle.UnmarshalError(b)
		case len(b) != 0:
			c.err = spindle.E(spindle.Invalid, "the relay's answer to a tunnel is not empty")
		}
		if c.refusal != nil || c.err != nil {
			return 0, errRelayAnswer
		}
	}
	return c.streamConn.Read(p)
}

func (c streamConn) LocalAddr() net.Addr  { return tunnelAddr(c.Conn().LocalPeer()) }
func (c streamConn) RemoteAddr() net.Addr { return tunnelAddr(c.Conn().RemotePeer()) }

// tunnelAddr is a peer as a net.Addr.
type tunnelAddr peer.ID

func (a tunnelAddr) Network() string { return "libp2p-tunnel" }
func (a tunnelAddr) String() string  { return peer.ID(a).String() }
