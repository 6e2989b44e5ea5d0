package p2p

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/blocks"
)

// BlockProtocol is the block exchange protocol, version 2.
//
// A client opens one stream and sends requests on it without waiting for
// answers; the server answers each as soon as it is done, in any order.
// Every message is one frame (see [Conn]):
//
//	request:  op (1 byte: 1 get, 2 put, 3 has, 4 prove, 5 get again) | id (8 bytes, big-endian) |
//	          ref (get, has, get again) or block (put) or nonce ([blocks.NonceSize] bytes) and ref (prove)
//	response: status (1 byte: 0 ok, 1 error) | id |
//	          block (get, get again) or ref (put) or held (has: 1 byte, 1 or 0) or proof (prove) or a spindle.Error
//
// A get again is a get by a peer that found the bytes of an earlier
// answer for the block wrong: a server that passes on blocks fetched
// from elsewhere without checking them (a node serving its users, which
// check every block themselves) checks this one, so that a holder that
// lied is bypassed (see [Recheck] and [RemoteStore.Refetch]).
//
// A has request asks whether the server holds the block itself (not
// whether it could fetch it), as a holder checking the copies of a block
// asks; a server with a damaged copy answers 0. A has answer is only the
// server's word: a node that counts copies asks for proof instead.
//
// A prove request challenges the server to show that it holds the block
// itself: it answers with [blocks.Challenge.Answer] for its own peer ID,
// of the nonce and the block as it holds it, which only the block's bytes
// give and no earlier answer helps with, or with the error of reading its copy
// (NotExist if it holds none, Integrity if its copy is damaged). See
// [RemoteStore.Prove].
//
// Version 1 ([BlockProtocolV1]) is version 2 without prove. A server
// speaks both; a client asks for version 2 and takes version 1 from a
// peer that speaks only that.
const BlockProtocol protocol.ID = "/spindle/blocks/2"

// BlockProtocolV1 is version 1 of the block exchange protocol: get, put
// and has, without proofs of holding.
const BlockProtocolV1 protocol.ID = "/spindle/blocks/1"

const (
	blockGet   byte = 1
	blockPut   byte = 2
	blockHas   byte = 3
	blockProve byte = 4 // Version 2 only.
	blockAgain byte = 5 // Version 2 only.

	statusOK  byte = 0
	statusErr byte = 1

	blockMsgHeader = 1 + 8
	blockMaxFrame  = spindle.MaxStoredBlockSize + blockMsgHeader
)

// Defaults for BlockServerConfig.
const (
	DefaultInFlight       = 16 // Requests handled at once on one stream.
	DefaultServerInFlight = 48 // Requests handled at once on all streams.

	DefaultSendTimeout = 2 * time.Minute // Time to send one response.
)

// BlockServerOp is the Op of the errors ServeBlocks sends its peers,
// such as the Permission error of a put the server does not allow.
const BlockServerOp spindle.Op = "p2p.ServeBlocks"

// BlockServerConfig configures ServeBlocks.
type BlockServerConfig struct {
	// CanPut reports whether a peer may store blocks here. If nil, no
	// peer may: Puts fail with Permission.
	CanPut func(peer.ID) bool
	// CanGet reports whether a peer may fetch blocks, or ask whether
	// they are held here. If nil, any peer may; blocks are encrypted or
	// meant to be public.
	CanGet func(peer.ID) bool
	// Has answers a has request: whether the block is held here, intact.
	// If nil, the store's Get is asked, and held means it returned the
	// block.
	Has func(ctx context.Context, ref spindle.Ref) (bool, error)
	// Held returns the block as held here, for a prove request: the
	// copy kept here, not one cached or fetched from elsewhere. If nil,
	// the store's Get is asked.
	Held func(ctx context.Context, ref spindle.Ref) ([]byte, error)
	// InFlight bounds the requests handled at once on one stream
	// (DefaultInFlight if zero), and ServerInFlight those on all streams
	// together (DefaultServerInFlight if zero). Requests beyond them wait
	// unread, so a peer that floods its stream is slowed by flow control,
	// and the server holds at most about two blocks per request in flight.
	InFlight       int
	ServerInFlight int
	// SendTimeout bounds the time to send one response
	// (DefaultSendTimeout if zero). A peer that stops reading its
	// responses has its stream reset, so that it cannot hold the
	// server's request slots.
	SendTimeout time.Duration
}

// ServeBlocks serves store to other peers over [BlockProtocol] and
// [BlockProtocolV1] on h, until ctx is done. Every Put and Get goes
// through store, which checks the hashes.
func ServeBlocks(ctx context.Context, h host.Host, store spindle.BlockStore, cfg BlockServerConfig) {
	if cfg.InFlight <= 0 {
		cfg.InFlight = DefaultInFlight
	}
	if cfg.ServerInFlight <= 0 {
		cfg.ServerInFlight = DefaultServerInFlight
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = DefaultSendTimeout
	}
	srv := &blockServer{self: h.ID(), store: store, cfg: cfg, all: make(chan struct{}, cfg.ServerInFlight)}
	srv.recycle, _ = store.(blocks.Recycler)
	HandleStream(ctx, h, BlockProtocol, blockMaxFrame, srv.serve)
	HandleStream(ctx, h, BlockProtocolV1, blockMaxFrame, srv.serve)
}

type blockServer struct {
	self    peer.ID // The server's own ID, which its proofs of holding name.
	store   spindle.BlockStore
	recycle blocks.Recycler // The store's, if it lends its Get buffers.
	cfg     BlockServerConfig
	all     chan struct{} // Semaphore of requests in flight on all streams.
}

func (srv *blockServer) serve(ctx context.Context, c *Conn) error {
	remote := c.RemotePeer()
	v2 := c.Stream().Protocol() == BlockProtocol
	sem := make(chan struct{}, srv.cfg.InFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		var hdr [blockMsgHeader]byte
		body, err := c.recvSplit(hdr[:], blockBuffer)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if hdr[0] != blockGet && hdr[0] != blockPut && hdr[0] != blockHas && (hdr[0] != blockProve && hdr[0] != blockAgain || !v2) {
			c.Reset()
			return spindle.E(BlockServerOp, spindle.Invalid, fmt.Sprintf("peer %s sent a malformed block request", remote))
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		select {
		case srv.all <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		wg.Go(func() {
			defer func() { <-sem; <-srv.all }()
			status, result := srv.handle(ctx, remote, hdr[0], body)
			RecycleBlock(body) // Stores keep no slice they are given.
			stall := time.AfterFunc(srv.cfg.SendTimeout, func() { c.Reset() })
			err := c.sendParts([]byte{status}, hdr[1:9], result)
			stall.Stop()
			if (hdr[0] == blockGet || hdr[0] == blockAgain) && status == statusOK && srv.recycle != nil {
				srv.recycle.Recycle(result)
			}
			if err != nil {
				c.Reset() // The stream is broken; the reader will see it.
			}
		})
	}
}

// blockPeerKey is the context key under which ServeBlocks passes the
// requesting peer to its store.
type blockPeerKey struct{}

// BlockPeer returns the peer whose request a store called by [ServeBlocks]
// is answering, so that a store can treat the peers it admits differently
// (a node stores the blocks of its signed-in users and, within bounds, the
// replicas that other nodes push to it).
func BlockPeer(ctx context.Context) (peer.ID, bool) {
	p, ok := ctx.Value(blockPeerKey{}).(peer.ID)
	return p, ok
}

// WithBlockPeer returns ctx for a call of a store that [ServeBlocks]
// serves made on behalf of peer p, as if p had sent the request on the
// block protocol: for blocks that travel on another protocol (a node's
// client protocol carries a small file's blocks with its entry).
func WithBlockPeer(ctx context.Context, p peer.ID) context.Context {
	return context.WithValue(ctx, blockPeerKey{}, p)
}

// recheckKey is the context key under which ServeBlocks marks a get
// again (see Recheck).
type recheckKey struct{}

// Recheck reports whether the get a store called by [ServeBlocks] is
// answering is a get again: the peer found the bytes of an earlier answer
// for the block wrong, and asks that what is fetched for it elsewhere be
// checked this time (see [BlockProtocol]).
func Recheck(ctx context.Context) bool {
	return ctx.Value(recheckKey{}) != nil
}

// handle answers one request, whose header has been checked, with a
// status and a result.
func (srv *blockServer) handle(ctx context.Context, remote peer.ID, op byte, body []byte) (byte, []byte) {
	ctx = context.WithValue(ctx, blockPeerKey{}, remote)
	var result []byte
	var err error
	switch op {
	case blockGet, blockAgain:
		if srv.cfg.CanGet != nil && !srv.cfg.CanGet(remote) {
			err = spindle.E(BlockServerOp, spindle.Permission, fmt.Sprintf("peer %s may not fetch blocks here", remote))
			break
		}
		if op == blockAgain {
			ctx = context.WithValue(ctx, recheckKey{}, true)
		}
		result, err = srv.store.Get(ctx, spindle.Ref(body))
	case blockPut:
		if srv.cfg.CanPut == nil || !srv.cfg.CanPut(remote) {
			err = spindle.E(BlockServerOp, spindle.Permission, fmt.Sprintf("peer %s may not store blocks here", remote))
			break
		}
		var ref spindle.Ref
		ref, err = srv.store.Put(ctx, body)
		result = []byte(ref)
	case blockHas:
		if srv.cfg.CanGet != nil && !srv.cfg.CanGet(remote) {
			err = spindle.E(BlockServerOp, spindle.Permission, fmt.Sprintf("peer %s may not ask for blocks here", remote))
			break
		}
		var held bool
		held, err = srv.has(ctx, spindle.Ref(body))
		result = []byte{0}
		if held {
			result[0] = 1
		}
	case blockProve:
		if srv.cfg.CanGet != nil && !srv.cfg.CanGet(remote) {
			err = spindle.E(BlockServerOp, spindle.Permission, fmt.Sprintf("peer %s may not ask for blocks here", remote))
			break
		}
		result, err = srv.prove(ctx, body)
	}
	if err != nil {
		return statusErr, marshalError(err)
	}
	return statusOK, result
}

// has reports whether the block ref is held here.
func (srv *blockServer) has(ctx context.Context, ref spindle.Ref) (bool, error) {
	if _, err := blocks.ParseRef(ref); err != nil {
		return false, spindle.E(BlockServerOp, err)
	}
	if srv.cfg.Has != nil {
		return srv.cfg.Has(ctx, ref)
	}
	return blocks.Holds(ctx, srv.store, ref)
}

// prove answers a prove request, whose body is a nonce and a ref.
func (srv *blockServer) prove(ctx context.Context, body []byte) ([]byte, error) {
	const op spindle.Op = "p2p.ServeBlocks"
	nonce, ref, err := parseProve(body)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	var data []byte
	if srv.cfg.Held != nil {
		data, err = srv.cfg.Held(ctx, ref)
	} else {
		data, err = srv.store.Get(ctx, ref)
		if err == nil && srv.recycle != nil {
			defer srv.recycle.Recycle(data)
		}
	}
	if err != nil {
		return nil, spindle.E(op, err)
	}
	proof := blocks.ChallengeWith(nonce, data).Answer(string(srv.self))
	return proof[:], nil
}

// parseProve splits the body of a prove request into its nonce and the
// ref of the block, which it checks.
func parseProve(body []byte) (nonce [blocks.NonceSize]byte, ref spindle.Ref, err error) {
	if len(body) < blocks.NonceSize {
		return nonce, "", spindle.E(spindle.Invalid, fmt.Sprintf("prove request of %d bytes is shorter than its %d-byte nonce", len(body), blocks.NonceSize))
	}
	ref = spindle.Ref(body[blocks.NonceSize:])
	if _, err := blocks.ParseRef(ref); err != nil {
		return nonce, "", err
	}
	copy(nonce[:], body)
	return nonce, ref, nil
}

// ErrNoProofs is wrapped in the error, of kind Invalid, of
// [RemoteStore.Prove] with a peer that speaks only [BlockProtocolV1].
var ErrNoProofs = errors.New("peer speaks block protocol 1, which has no proofs of holding; it is not counted as a holder until it is upgraded")

// ErrProofFailed is wrapped in the error, of kind Integrity, of
// [RemoteStore.Prove] when the peer's answer is not the one the block
// gives: the peer does not hold the block it says it holds.
var ErrProofFailed = errors.New("wrong proof of holding")

// A RemoteStore is a [spindle.BlockStore] held by another peer, reached
// over [BlockProtocol]. Concurrent calls share one stream with many
// requests in flight, so a large file moves as a pipeline of blocks. Every
// block returned by Get has been checked with [blocks.Check]. A broken
// stream is replaced on the next call; a call whose stream broke is retried
// once, since both operations are idempotent.
//
// A RemoteStore is safe for concurrent use. Close it to release its stream.
type RemoteStore struct {
	h    host.Host
	peer peer.ID

	mu     sync.Mutex
	sess   *blockSession
	closed bool
	past   int64 // Bytes received on the streams before sess.
}

var _ spindle.BlockStore = (*RemoteStore)(nil)

// NewRemoteStore returns the block store of peer p, reached from h. It
// does not connect until the first call.
func NewRemoteStore(h host.Host, p peer.ID) *RemoteStore {
	return &RemoteStore{h: h, peer: p}
}

// Peer returns the peer holding the store.
func (r *RemoteStore) Peer() peer.ID { return r.peer }

// Received returns the bytes received from the peer so far, on every
// stream the store has had, partial responses included. A caller waiting
// for a block tells a peer that is sending it slowly from one that sends
// nothing by how this grows.
func (r *RemoteStore) Received() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.past
	if r.sess != nil {
		n += r.sess.c.Received()
	}
	return n
}

// Owed returns the calls on the current stream that were abandoned (their
// context ended) and whose answers have not arrived: the peer may still
// be sending them, ahead of whatever is asked next.
func (r *RemoteStore) Owed() int {
	r.mu.Lock()
	sess := r.sess
	r.mu.Unlock()
	if sess == nil {
		return 0
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return len(sess.owed)
}

// Close ends the store's stream; calls in progress fail. The store must
// not be used after.
func (r *RemoteStore) Close() error {
	r.mu.Lock()
	sess := r.sess
	r.sess, r.closed = nil, true
	r.mu.Unlock()
	if sess != nil {
		sess.fail(spindle.E(spindle.IO, "remote store closed"))
		sess.c.Close()
	}
	return nil
}

// Get implements [spindle.BlockStore]. Besides the peer's own errors,
// it returns Integrity if the peer sent bytes that do not match ref, IO
// if the peer cannot be reached, and Transient if ctx ends first.
func (r *RemoteStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "p2p.RemoteStore.Get"
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	data, err := r.call(ctx, blockGet, []byte(ref))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if err := blocks.CheckDigest(d, data); err != nil {
		return nil, spindle.E(op, fmt.Errorf("peer %s: %w", r.peer, err))
	}
	return data, nil
}

// Put implements [spindle.BlockStore]. The block is durable on the peer
// when Put returns. A peer that answers with another ref than the hash of
// data is reported as Integrity.
func (r *RemoteStore) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "p2p.RemoteStore.Put"
	ref, _, err := blocks.Receive(data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	got, err := r.call(ctx, blockPut, data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if spindle.Ref(got) != ref {
		return "", spindle.E(op, spindle.Integrity, fmt.Sprintf("peer %s stored block %s as %.80q", r.peer, ref, got))
	}
	return ref, nil
}

// PutRef is Put for a caller that has already hashed data: ref must be
// blocks.RefOf(data). It saves hashing the block a second time, and
// loses no safety: the peer hashes what it receives and an answer with
// another ref is Integrity.
func (r *RemoteStore) PutRef(ctx context.Context, ref spindle.Ref, data []byte) error {
	const op spindle.Op = "p2p.RemoteStore.PutRef"
	if len(data) > spindle.MaxStoredBlockSize {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("block of %d bytes exceeds the limit of %d", len(data), spindle.MaxStoredBlockSize))
	}
	got, err := r.call(ctx, blockPut, data)
	if err != nil {
		return spindle.E(op, err)
	}
	if spindle.Ref(got) != ref {
		return spindle.E(op, spindle.Integrity, fmt.Sprintf("peer %s stored block %s as %.80q", r.peer, ref, got))
	}
	return nil
}

// Has asks the peer whether it holds the block ref itself, intact.
func (r *RemoteStore) Has(ctx context.Context, ref spindle.Ref) (bool, error) {
	const op spindle.Op = "p2p.RemoteStore.Has"
	if _, err := blocks.ParseRef(ref); err != nil {
		return false, spindle.E(op, err)
	}
	res, err := r.call(ctx, blockHas, []byte(ref))
	if err != nil {
		return false, spindle.E(op, err)
	}
	if len(res) != 1 || res[0] > 1 {
		return false, spindle.E(op, spindle.Invalid, fmt.Sprintf("peer %s answered a has request with %d bytes, not one byte 0 or 1", r.peer, len(res)))
	}
	return res[0] == 1, nil
}

// Prove challenges the peer to show that it holds the block ref itself:
// it sends the challenge's nonce, which must be fresh for this peer, and
// checks the answer against the challenge's answer for the peer's ID. The
// challenge is made from the block (see [blocks.NewChallenge]) by the
// caller, which may ask several holders with one challenge. Prove returns
// nil if the peer proved it holds the block; an Integrity error wrapping
// [ErrProofFailed] if it answered wrongly; an Invalid error wrapping
// [ErrNoProofs] if it speaks only [BlockProtocolV1]; otherwise the
// peer's error (NotExist if it holds no copy, Integrity without
// ErrProofFailed if its copy is damaged) or IO if it cannot be reached.
func (r *RemoteStore) Prove(ctx context.Context, ref spindle.Ref, c blocks.Challenge) error {
	const op spindle.Op = "p2p.RemoteStore.Prove"
	if _, err := blocks.ParseRef(ref); err != nil {
		return spindle.E(op, err)
	}
	req := make([]byte, 0, blocks.NonceSize+len(ref))
	req = append(append(req, c.Nonce[:]...), ref...)
	res, err := r.call(ctx, blockProve, req)
	if err != nil {
		return spindle.E(op, err)
	}
	if len(res) != blocks.ProofSize {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("peer %s answered a prove request with %d bytes, not %d", r.peer, len(res), blocks.ProofSize))
	}
	want := c.Answer(string(r.peer))
	if subtle.ConstantTimeCompare(res, want[:]) != 1 {
		return spindle.E(op, spindle.Integrity, fmt.Errorf("peer %s, block %s: %w", r.peer, ref, ErrProofFailed))
	}
	return nil
}

// Fetch is Get without the hash check, for a caller that checks every
// block itself (pack.Reader does, together with its GCM tag), so that a
// block is hashed once on its way in. Fetch never returns more than a
// stored block's bytes. The returned slice is the caller's to modify; a
// caller done with it may pass it to [RecycleBlock] so that later fetches
// reuse its memory.
func (r *RemoteStore) Fetch(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	return r.fetch(ctx, "p2p.RemoteStore.Fetch", blockGet, ref)
}

// Refetch is Fetch for a block whose bytes, as an earlier Get or Fetch
// returned them, were wrong: it asks the peer to check what it fetches
// for it elsewhere this time (a get again, see [BlockProtocol]), so that a
// holder that lied to it is bypassed. Like Fetch, it does not check the
// bytes itself. A peer that speaks only [BlockProtocolV1] is sent a get.
func (r *RemoteStore) Refetch(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	return r.fetch(ctx, "p2p.RemoteStore.Refetch", blockAgain, ref)
}

// fetch asks the peer for ref's bytes with request kind, unchecked.
func (r *RemoteStore) fetch(ctx context.Context, op spindle.Op, kind byte, ref spindle.Ref) ([]byte, error) {
	if _, err := blocks.ParseRef(ref); err != nil {
		return nil, spindle.E(op, err)
	}
	data, err := r.call(ctx, kind, []byte(ref))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return data, nil
}

// blockBufs holds buffers for blocks received over BlockProtocol, so that
// moving a large file does not allocate (and clear, and collect) a block
// buffer per block. A buffer holds any stored block and starts at a
// multiple of blockAlign, so that what is decrypted in place in it can be
// written to a file opened with O_DIRECT without a copy.
var blockBufs = sync.Pool{New: func() any {
	b := make([]byte, spindle.MaxStoredBlockSize+blockAlign)
	off := int(-uintptr(unsafe.Pointer(&b[0])) % blockAlign)
	b = b[off : off+spindle.MaxStoredBlockSize : off+spindle.MaxStoredBlockSize]
	return &b
}}

// blockAlign is the alignment of received blocks: the page size, which
// O_DIRECT asks of buffers.
const blockAlign = 4096

// blockBuffer returns a buffer for a received block of n bytes.
func blockBuffer(n int) []byte {
	if n > spindle.MaxStoredBlockSize {
		return make([]byte, n) // Only error messages can be larger.
	}
	return (*blockBufs.Get().(*[]byte))[:n]
}

// RecycleBlock hands back a block returned by [RemoteStore.Get] or
// [RemoteStore.Fetch], for reuse by later calls. The caller must not use
// block, or any slice of its memory, after. Slices that did not come from
// a RemoteStore are ignored unless they are large enough to hold a block,
// in which case they are reused as well.
func RecycleBlock(block []byte) {
	if cap(block) < spindle.MaxStoredBlockSize {
		return
	}
	block = block[:cap(block)]
	blockBufs.Put(&block)
}

// maxOwed bounds the abandoned calls a session remembers (see
// [RemoteStore.Owed]): a peer that never answers them is counted as that
// busy, no busier.
const maxOwed = 1024

// errSessionBroken marks failures of the stream itself, after which a
// call may be retried on a new stream.
var errSessionBroken = errors.New("block stream broken")

// brokenErr wraps the failure of a block stream, keeping its Kind (IO
// unless it says otherwise).
func brokenErr(err error) error {
	k := spindle.KindOf(err)
	if k == spindle.Other {
		k = spindle.IO
	}
	return spindle.E(k, fmt.Errorf("%w: %w", errSessionBroken, err))
}

func (r *RemoteStore) call(ctx context.Context, op byte, body []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(spindle.Transient, err)
	}
	for attempt := 0; ; attempt++ {
		sess, err := r.session(ctx)
		if err != nil {
			return nil, err
		}
		if op == blockProve && sess.v1 {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("peer %s: %w", r.peer, ErrNoProofs))
		}
		sop := op
		if op == blockAgain && sess.v1 {
			sop = blockGet
		}
		resp, err := sess.call(ctx, sop, body)
		if err != nil && errors.Is(err, errSessionBroken) && attempt == 0 && ctx.Err() == nil {
			continue
		}
		return resp, err
	}
}

// session returns the current stream to the peer, opening one if needed.
func (r *RemoteStore) session(ctx context.Context) (*blockSession, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, spindle.E(spindle.Invalid, "remote store is closed")
	}
	if r.sess != nil && !r.sess.broken() {
		return r.sess, nil
	}
	// Version 2 if the peer speaks it, else version 1.
	st, err := r.h.NewStream(ctx, r.peer, BlockProtocol, BlockProtocolV1)
	if err != nil {
		return nil, spindle.E(spindle.Op("p2p.Open"), streamErrKind(ctx), fmt.Errorf("peer %s, protocol %s: %w", r.peer, BlockProtocol, err))
	}
	if r.sess != nil {
		r.past += r.sess.c.Received()
	}
	r.sess = newBlockSession(NewConn(st, blockMaxFrame), st.Protocol() == BlockProtocolV1)
	return r.sess, nil
}

// A blockSession is one stream with many requests in flight.
type blockSession struct {
	c  *Conn
	v1 bool // The peer speaks only BlockProtocolV1.

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan blockResult
	owed    map[uint64]bool // Abandoned calls whose answers have not arrived.
	err     error           // Set when the stream has failed.
}

type blockResult struct {
	data []byte
	err  error
}

func newBlockSession(c *Conn, v1 bool) *blockSession {
	s := &blockSession{c: c, v1: v1, pending: make(map[uint64]chan blockResult), owed: make(map[uint64]bool)}
	go s.readLoop()
	return s
}

func (s *blockSession) broken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// fail marks the session broken and fails every pending call with err.
func (s *blockSession) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
	for id, ch := range s.pending {
		ch <- blockResult{err: s.err}
		delete(s.pending, id)
	}
	clear(s.owed) // Nothing more arrives on this stream.
}

func (s *blockSession) readLoop() {
	peer := s.c.RemotePeer()
	var hdr [blockMsgHeader]byte
	for {
		body, err := s.c.recvSplit(hdr[:], blockBuffer)
		if err != nil {
			if err == io.EOF {
				err = spindle.E(spindle.IO, fmt.Sprintf("peer %s closed the block stream", peer))
			}
			s.c.Reset()
			s.fail(brokenErr(err))
			return
		}
		if hdr[0] > statusErr {
			s.c.Reset()
			s.fail(spindle.E(spindle.Invalid, fmt.Sprintf("peer %s sent a malformed block response", peer)))
			return
		}
		id := binary.BigEndian.Uint64(hdr[1:9])
		res := blockResult{data: body}
		if hdr[0] == statusErr {
			res = blockResult{err: spindle.UnmarshalError(body)}
			RecycleBlock(body)
		}
		s.mu.Lock()
		ch, ok := s.pending[id]
		delete(s.pending, id)
		delete(s.owed, id)
		s.mu.Unlock()
		if ok {
			ch <- res // Buffered: never blocks.
		} else {
			RecycleBlock(res.data) // The answer to an abandoned call.
		}
	}
}

func (s *blockSession) call(ctx context.Context, op byte, body []byte) ([]byte, error) {
	ch := make(chan blockResult, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()

	var hdr [blockMsgHeader]byte
	hdr[0] = op
	binary.BigEndian.PutUint64(hdr[1:], id)
	if err := s.c.sendParts(hdr[:], body); err != nil {
		s.c.Reset()
		s.fail(brokenErr(err))
		return nil, (<-ch).err
	}
	select {
	case res := <-ch:
		return res.data, res.err
	case <-ctx.Done():
		s.mu.Lock()
		if _, ok := s.pending[id]; ok && s.err == nil && len(s.owed) < maxOwed {
			s.owed[id] = true
		}
		delete(s.pending, id)
		s.mu.Unlock()
		return nil, spindle.E(spindle.Transient, ctx.Err())
	}
}
