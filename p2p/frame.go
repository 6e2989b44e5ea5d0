package p2p

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/net/swarm"

	"spindle.dev"
)

// DefaultMaxFrame is the frame size limit used when none is given: one
// stored block plus room for a small header.
const DefaultMaxFrame = spindle.MaxStoredBlockSize + 1024

// Frame tags. A frame is a tag byte, a 4-byte big-endian payload length
// and the payload.
const (
	tagData  byte = 1 // A message.
	tagError byte = 2 // A spindle.Error in its MarshalBinary form.

	headerLen = 5
)

// Stream error codes sent with a reset, so that the other side can tell
// why its stream was cut.
const (
	codeProtocol network.StreamErrorCode = 0x5350_0001 // Oversized or malformed frame.
	codeCancel   network.StreamErrorCode = 0x5350_0002 // The caller gave up.
)

// A Conn carries length-prefixed messages over a libp2p stream, for the
// node's protocols. Each message is at most the Conn's frame limit; an
// incoming frame that is larger or malformed ends the stream with an
// Invalid error, so a hostile peer cannot make the receiver allocate
// more than the limit.
//
// One goroutine may call Recv while others call Send and SendError: the
// writes are serialised.
type Conn struct {
	s        network.Stream
	r        *bufio.Reader
	maxFrame int
	read     *countReader // Under r: counts what arrives.

	wmu  sync.Mutex
	hdr  [headerLen]byte
	head [64]byte // A frame's header and small leading parts, written at once.
}

// NewConn returns a Conn on s that accepts frames of at most maxFrame
// bytes (DefaultMaxFrame if maxFrame <= 0). The Conn owns s.
func NewConn(s network.Stream, maxFrame int) *Conn {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrame
	}
	cr := &countReader{r: s}
	return &Conn{s: s, r: bufio.NewReaderSize(cr, 4<<10), maxFrame: maxFrame, read: cr}
}

// A countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// Received returns the bytes that have arrived on the stream so far,
// frames cut short included: a measure of the peer's progress while a
// large message arrives.
func (c *Conn) Received() int64 { return c.read.n.Load() }

// Stream returns the underlying stream.
func (c *Conn) Stream() network.Stream { return c.s }

// RemotePeer returns the ID of the peer at the other end.
func (c *Conn) RemotePeer() peer.ID { return c.s.Conn().RemotePeer() }

// Send sends one message. A message longer than the Conn's frame limit is
// refused with Invalid: a protocol uses one limit on both sides, so the
// other side would reject it. A failed write is an IO error, after which
// the stream is unusable.
func (c *Conn) Send(msg []byte) error {
	const op spindle.Op = "p2p.Send"
	if len(msg) > c.maxFrame {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("message of %d bytes exceeds the frame limit of %d bytes", len(msg), c.maxFrame))
	}
	return c.sendParts(msg)
}

// SendError sends err to the other side, where Recv returns it. Errors
// that are not *spindle.Error travel as their message, with kind Other.
func (c *Conn) SendError(err error) error {
	const op spindle.Op = "p2p.SendError"
	data := marshalError(err)
	if len(data) > c.maxFrame {
		data = marshalError(spindle.E(spindle.KindOf(err), "error message too long to send"))
	}
	if err := c.write(tagError, data); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	return nil
}

// marshalError encodes err as a spindle.Error, truncating a huge message.
func marshalError(err error) []byte {
	var e *spindle.Error
	if !errors.As(err, &e) {
		e = spindle.E(err).(*spindle.Error)
	}
	data, _ := e.MarshalBinary()
	return data
}

func (c *Conn) write(tag byte, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.hdr[0] = tag
	binary.BigEndian.PutUint32(c.hdr[1:], uint32(n))
	if n <= 4096 {
		// Small messages go out in one write, so in one muxer frame.
		buf := make([]byte, 0, headerLen+n)
		buf = append(buf, c.hdr[:]...)
		for _, p := range parts {
			buf = append(buf, p...)
		}
		_, err := c.s.Write(buf)
		return err
	}
	// The header and any small leading parts go out in one write, so that
	// they do not each cost a muxer frame, a TLS record and a system call.
	head := append(c.head[:0], c.hdr[:]...)
	for len(parts) > 1 && len(head)+len(parts[0]) <= cap(head) {
		head = append(head, parts[0]...)
		parts = parts[1:]
	}
	if _, err := c.s.Write(head); err != nil {
		return err
	}
	for _, p := range parts {
		if _, err := c.s.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// sendParts sends one message made of the concatenation of parts,
// without copying them into one buffer.
func (c *Conn) sendParts(parts ...[]byte) error {
	const op spindle.Op = "p2p.Send"
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > c.maxFrame {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("message of %d bytes exceeds the frame limit of %d bytes", n, c.maxFrame))
	}
	if err := c.write(tagData, parts...); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	return nil
}

// Recv returns the next message. If the other side sent an error with
// SendError, Recv returns that error (its Kind preserved) and the Conn
// stays usable. At the clean end of the stream Recv returns io.EOF. An
// oversized or malformed frame yields an Invalid error and resets the
// stream; a frame cut short yields an IO error.
func (c *Conn) Recv() ([]byte, error) {
	tag, buf, err := readFrame(c.r, c.maxFrame)
	return c.received(tag, buf, err)
}

// received maps the outcome of reading a frame to what Recv returns.
func (c *Conn) received(tag byte, buf []byte, err error) ([]byte, error) {
	const op spindle.Op = "p2p.Recv"
	switch {
	case err == io.EOF:
		return nil, io.EOF
	case spindle.KindOf(err) == spindle.Invalid:
		c.s.ResetWithError(codeProtocol)
		return nil, spindle.E(op, fmt.Errorf("peer %s: %w", c.RemotePeer(), err))
	case err != nil:
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("peer %s: %w", c.RemotePeer(), err))
	case tag == tagError:
		return nil, spindle.UnmarshalError(buf)
	}
	return buf, nil
}

// readFrame reads one frame of at most maxFrame bytes from r. It returns
// io.EOF at a clean end, an Invalid error for an oversized or malformed
// frame (having read only its header), and another error for a frame cut
// short.
func readFrame(r io.Reader, maxFrame int) (byte, []byte, error) {
	tag, n, err := readFrameHeader(r, maxFrame)
	if err != nil {
		return 0, nil, err
	}
	buf, err := readPayload(r, n, makeBuffer)
	return tag, buf, err
}

// readFrameHeader reads a frame's header and checks its tag and length.
func readFrameHeader(r io.Reader, maxFrame int) (tag byte, n int, err error) {
	var hdr [headerLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = errors.New("truncated frame header")
		}
		return 0, 0, err
	}
	tag, size := hdr[0], binary.BigEndian.Uint32(hdr[1:])
	if tag != tagData && tag != tagError {
		return 0, 0, spindle.E(spindle.Invalid, fmt.Sprintf("malformed frame (tag %d)", tag))
	}
	if uint64(size) > uint64(maxFrame) {
		return 0, 0, spindle.E(spindle.Invalid, fmt.Sprintf("frame of %d bytes exceeds the limit of %d bytes", size, maxFrame))
	}
	return tag, int(size), nil
}

func makeBuffer(n int) []byte { return make([]byte, n) }

// recvSplit is Recv for messages that start with a fixed header: it reads
// the next message's first len(hdr) bytes into hdr and the rest into a
// buffer from alloc (called with the rest's length, which it must return
// room for), so that a protocol carrying large payloads can reuse their
// buffers. A message shorter than hdr is Invalid and resets the stream.
// Errors are those of Recv.
func (c *Conn) recvSplit(hdr []byte, alloc func(n int) []byte) ([]byte, error) {
	tag, buf, err := readFrameSplit(c.r, c.maxFrame, hdr, alloc)
	return c.received(tag, buf, err)
}

// readFrameSplit is readFrame for recvSplit. An error frame is returned
// whole, in a buffer of its own.
func readFrameSplit(r io.Reader, maxFrame int, hdr []byte, alloc func(n int) []byte) (byte, []byte, error) {
	tag, n, err := readFrameHeader(r, maxFrame)
	if err != nil {
		return 0, nil, err
	}
	if tag == tagError {
		buf, err := readPayload(r, n, makeBuffer)
		return tag, buf, err
	}
	if n < len(hdr) {
		return 0, nil, spindle.E(spindle.Invalid, fmt.Sprintf("message of %d bytes is shorter than its %d-byte header", n, len(hdr)))
	}
	if _, err := io.ReadFull(r, hdr); err != nil {
		return 0, nil, truncatedFrame(err)
	}
	buf, err := readPayload(r, n-len(hdr), alloc)
	return tag, buf, err
}

// readPayload reads n bytes into a buffer from alloc. As in readFrame, a
// large payload's buffer is taken only once its first initialFrameBuf
// bytes have arrived.
func readPayload(r io.Reader, n int, alloc func(n int) []byte) ([]byte, error) {
	if n <= initialFrameBuf {
		buf := make([]byte, n)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, truncatedFrame(err)
		}
		return buf, nil
	}
	head := frameHeads.Get().(*[initialFrameBuf]byte)
	defer frameHeads.Put(head)
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return nil, truncatedFrame(err)
	}
	buf := alloc(n)[:n]
	copy(buf, head[:])
	if _, err := io.ReadFull(r, buf[initialFrameBuf:]); err != nil {
		return nil, truncatedFrame(err)
	}
	return buf, nil
}

func truncatedFrame(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return errors.New("truncated frame")
	}
	return err
}

var frameHeads = sync.Pool{New: func() any { return new([initialFrameBuf]byte) }}

// initialFrameBuf is the part of a large frame read before its buffer is
// allocated.
const initialFrameBuf = 32 << 10

// CloseWrite tells the other side that no more messages will be sent;
// its Recv then returns io.EOF.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.s.CloseWrite()
}

// Close closes the stream.
func (c *Conn) Close() error { return c.s.Close() }

// Reset abandons the stream in both directions.
func (c *Conn) Reset() error { return c.s.Reset() }

// A Handler answers one request of a request/response protocol. An error
// it returns travels to the caller as a *spindle.Error.
type Handler func(ctx context.Context, remote peer.ID, req []byte) (resp []byte, err error)

// A StreamHandler serves one incoming stream of a protocol, for exchanges
// that are not one request and one response: streamed replies (Watch,
// block data) or many requests in flight. The Conn is closed when the
// handler returns; an error it returns is sent to the other side first,
// unless the stream is already broken.
type StreamHandler func(ctx context.Context, c *Conn) error

// HandleStream registers fn as the handler of protocol proto on h, with
// frames of at most maxFrame bytes (DefaultMaxFrame if maxFrame <= 0),
// until ctx is done: then the handler is removed and the streams it is
// serving are reset. The context given to fn is derived from ctx and
// cancelled when fn returns; fn learns that the other side has gone when
// Recv or Send fails.
func HandleStream(ctx context.Context, h host.Host, proto protocol.ID, maxFrame int, fn StreamHandler) {
	h.SetStreamHandler(proto, func(s network.Stream) {
		c := NewConn(s, maxFrame)
		stop := context.AfterFunc(ctx, func() { s.Reset() })
		sctx, cancel := context.WithCancel(ctx)
		err := fn(sctx, c)
		cancel()
		if !stop() {
			return // Reset because ctx is done.
		}
		if err != nil && spindle.KindOf(err) != spindle.IO {
			c.SendError(err)
		}
		c.Close()
	})
	context.AfterFunc(ctx, func() { h.RemoveStreamHandler(proto) })
}

// Handle registers fn as the handler of the request/response protocol
// proto on h: each stream carries one request and one response (or
// error), each at most maxFrame bytes (DefaultMaxFrame if maxFrame <= 0).
// The context given to fn is derived from ctx; the handler is removed when
// ctx is done. Call makes the requests.
func Handle(ctx context.Context, h host.Host, proto protocol.ID, maxFrame int, fn Handler) {
	HandleStream(ctx, h, proto, maxFrame, func(ctx context.Context, c *Conn) error {
		req, err := c.Recv()
		if err != nil {
			if err == io.EOF {
				return spindle.E(spindle.Invalid, "stream closed without a request")
			}
			return err
		}
		resp, err := fn(ctx, c.RemotePeer(), req)
		if err != nil {
			return err
		}
		return c.Send(resp)
	})
}

// Open opens a stream to peer p for protocol proto and returns it as a
// Conn that accepts frames of at most maxFrame bytes (DefaultMaxFrame if
// maxFrame <= 0). The caller closes the Conn. ctx bounds only the opening.
func Open(ctx context.Context, h host.Host, p peer.ID, proto protocol.ID, maxFrame int) (*Conn, error) {
	const op spindle.Op = "p2p.Open"
	s, err := h.NewStream(ctx, p, proto)
	if err != nil {
		return nil, spindle.E(op, streamErrKind(ctx), fmt.Errorf("peer %s, protocol %s: %w", p, proto, err))
	}
	return NewConn(s, maxFrame), nil
}

// Call sends req to peer p over protocol proto, which the peer serves
// with Handle, and returns the response, at most maxFrame bytes
// (DefaultMaxFrame if maxFrame <= 0). An error returned by the peer's
// handler is returned as a *spindle.Error with its Kind. Cancelling ctx
// abandons the call and resets the stream.
func Call(ctx context.Context, h host.Host, p peer.ID, proto protocol.ID, req []byte, maxFrame int) ([]byte, error) {
	const op spindle.Op = "p2p.Call"
	c, err := Open(ctx, h, p, proto, maxFrame)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	stop := context.AfterFunc(ctx, func() { c.s.ResetWithError(codeCancel) })
	defer stop()
	resp, err := call(c, req)
	if err != nil {
		c.Reset()
		if ctx.Err() != nil {
			return nil, spindle.E(op, spindle.Transient, fmt.Errorf("peer %s, protocol %s: %w", p, proto, ctx.Err()))
		}
		return nil, spindle.E(op, err)
	}
	c.Close()
	return resp, nil
}

func call(c *Conn, req []byte) ([]byte, error) {
	if err := c.Send(req); err != nil {
		return nil, err
	}
	if err := c.CloseWrite(); err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	resp, err := c.Recv()
	if err == io.EOF {
		return nil, spindle.E(spindle.IO, fmt.Sprintf("peer %s closed the stream without a response", c.RemotePeer()))
	}
	return resp, err
}

// streamErrKind classifies a failure to open a stream: Transient if ctx
// ended, IO otherwise.
func streamErrKind(ctx context.Context) spindle.Kind {
	if ctx.Err() != nil {
		return spindle.Transient
	}
	return spindle.IO
}

// ClearDialBackoff reports whether err is h's refusal to dial p again so
// soon after a dial to it failed (libp2p's dial backoff), and if so
// forgets the failure, so that the next dial tries at once. A client
// whose own node was restarted calls it: the node is back, and waiting
// seconds for the backoff to run out would fail the client's commands.
func ClearDialBackoff(h host.Host, p peer.ID, err error) bool {
	if !errors.Is(err, swarm.ErrDialBackoff) {
		return false
	}
	sw, ok := h.Network().(*swarm.Swarm)
	if !ok {
		return false
	}
	sw.Backoff().Clear(p)
	return true
}
