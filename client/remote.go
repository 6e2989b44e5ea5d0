package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// remote reaches a node's client protocol. It implements dirlog.Service:
// the user named in each read is ignored, because the node acts for the
// user the connection has authenticated as.
type remote struct {
	h    host.Host
	peer peer.ID
	// reauth signs in again, after the node forgot the session (it
	// restarted, or the connection dropped).
	reauth func(ctx context.Context) error
	// noBatch is set once the node has answered that it does not know
	// dir.appendbatch.
	noBatch atomic.Bool
	// heads checks each head of a user's log that comes with an answer
	// against the newest seen; an error fails the call.
	heads *dirHeads
	// puts remembers the proved positions of the entries answered.
	puts putSeqs
	// ownStep, if set, checks the entries of a step of the client's
	// own log (see checkOwnStep).
	ownStep func(ctx context.Context, floor, through, got *dirlog.Head) error
	// verifyHead, if set, checks a head's signature and, if witnessed,
	// its cosignatures.
	verifyHead func(ctx context.Context, h *dirlog.Head, witnessed bool) error
	// log takes a line per call at debug level (see trace.go).
	log *slog.Logger
	// route, if set, returns the dir hosts of owner's tree, in the order
	// of its key record (see forward.go); none if the client's node is to
	// answer.
	route func(ctx context.Context, owner spindle.UserName) []peer.ID
	// held, if set, holds the blocks of small files that go with their
	// entries (see inline.go).
	held *heldRegistry
	// routeCached, if set, reports whether route has the owner's key
	// record at hand, and answers without a round trip.
	routeCached func(owner spindle.UserName) bool
	// routeFresh is route with the owner's key record looked up afresh.
	routeFresh func(ctx context.Context, owner spindle.UserName) []peer.ID
	// hostAddrs, if set, returns the dir hosts of owner's tree as its key
	// record names them, looked up afresh (see sequencerDown).
	hostAddrs func(ctx context.Context, owner spindle.UserName) []spindle.PeerAddr
	// sign signs a request for the node to, which the node peer carries.
	sign func(req *wire.Request, to peer.ID) error
	// direct, if set, carries each request to the peer it is for, in
	// place of a stream of h: the anonymous reader's way (see anon.go),
	// whose requests about a tree go unsigned to each dir host itself.
	direct func(ctx context.Context, to peer.ID, data []byte) ([]byte, error)
	// tunnels, if set, carries the requests for dir hosts other than
	// the client's node, end to end through it (see tunnel.go); if nil
	// the node carries them in plain.
	tunnels *tunnels
	// evidence is the directory in which evidence of a host's
	// misbehaviour is saved (see evidence.go), or "".
	evidence string
	// proto is the protocol calls go on; "" means wire.ClientProtocol.
	proto string
}

// keepEvidence saves the evidence of err, a head got that dirHeads.check
// refused, if both it and the head it contradicts are signed, and returns
// err naming the serving peer and the file. floor is the newest head seen
// when the call was made.
func (r *remote) keepEvidence(err error, floor, got *dirlog.Head) error {
	seen := floor
	if seen == nil || dirlog.CheckHead(seen, got) == nil {
		seen = r.heads.floor(got.User)
	}
	via := r.peer.String()
	err = spindle.E(spindle.Integrity, got.User, fmt.Errorf("served through %s: %w", via, err))
	ev := headEvidence(err, seen, got, via)
	if ev == nil || r.evidence == "" {
		return err
	}
	file, serr := saveEvidence(r.evidence, ev)
	if serr != nil {
		r.log.Warn("cannot save evidence", "err", serr)
		return err
	}
	return spindle.E(spindle.Integrity, got.User, fmt.Errorf("%w (evidence saved in %s)", err, file))
}

// callDir makes a call about the log of the owner of name (a path name,
// a pattern or a user name) and checks the head that comes with the
// answer against the newest head seen when the call was made. (Not
// against the newest seen when the answer arrives: answers to concurrent
// calls may arrive in any order.)
func callDir[Req any, Resp any, PResp interface {
	*Resp
	wire.LogAnswer
}](ctx context.Context, r *remote, method string, req *Req, name string) (*Resp, error) {
	owner, _, _ := strings.Cut(name, "/")
	floor := r.heads.floor(spindle.UserName(owner))
	anchor := r.heads.anchor(spindle.UserName(owner))
	resp, err := call[Req, Resp](ctx, r, method, spindle.UserName(owner), req)
	if resp == nil {
		return nil, err
	}
	if h := PResp(resp).LogHead(); h != nil {
		if h.User != spindle.UserName(owner) {
			return nil, spindle.E(spindle.PathName(owner+"/"), spindle.Integrity, "node answered with the head of "+string(h.User)+"'s log")
		}
		if r.verifyHead != nil {
			if herr := r.verifyHead(ctx, h, true); herr != nil {
				r.log.Debug("directory log head refused", "user", h.User, "seq", h.Seq, "err", herr.Error())
				return nil, herr
			}
		}
		if herr := r.checkStep(withStepAnswers(ctx, resp, h), floor, anchor, h); herr != nil {
			r.log.Debug("directory log step refused", "user", h.User, "seq", h.Seq, "err", herr.Error())
			if k := spindle.KindOf(herr); k == spindle.IO || k == spindle.Transient {
				// The step could not be checked (the host went away
				// meanwhile): the answer is not taken, and not a lie.
				return nil, herr
			}
			return nil, spindle.E(spindle.Integrity, h.User, fmt.Errorf("served through %s: %w", r.peer, herr))
		}
		if herr := r.heads.check(floor, h); herr != nil {
			r.log.Debug("directory log head refused", "user", h.User, "seq", h.Seq, "err", herr.Error())
			return nil, r.keepEvidence(herr, floor, h)
		}
		r.log.Debug("directory log head checked", "user", h.User, "seq", h.Seq, "seen", floorSeq(floor))
	}
	return resp, err
}

var _ dirlog.Service = (*remote)(nil)

// A decoder decodes the body of an answer, which carries err, as the
// method's response; it returns nil (an untyped nil) and the decoding
// error if the body does not decode.
type decoder func(resp *wire.Response, err error) (any, error)

// decoderOf returns the decoder of answers whose body is a Resp.
func decoderOf[Resp any]() decoder {
	return func(resp *wire.Response, err error) (any, error) {
		v, err := wire.DecodeBody[Resp](resp, err)
		if v == nil {
			return nil, err
		}
		return v, err
	}
}

// call sends a request of method whose body is req, about owner's tree
// (see callFor), and returns the node's answer as a Resp with the error
// it carries. The answer is nil if none came or it did not decode.
func call[Req, Resp any](ctx context.Context, r *remote, method string, owner spindle.UserName, req *Req) (*Resp, error) {
	env, err := wire.NewRequest(method, req)
	if err != nil {
		return nil, err
	}
	v, err := r.callFor(ctx, env, owner, decoderOf[Resp]())
	resp, _ := v.(*Resp)
	return resp, err
}

// callAuth is call for a request that carries auth: a proof of
// possession of a key (key.put) or a sign-in (auth).
func callAuth[Req, Resp any](ctx context.Context, r *remote, method string, auth *wire.AuthMsg, req *Req) (*Resp, error) {
	env, err := wire.NewRequest(method, req)
	if err != nil {
		return nil, err
	}
	env.Auth = auth
	v, err := r.callFor(ctx, env, "", decoderOf[Resp]())
	resp, _ := v.(*Resp)
	return resp, err
}

// callTo is call for the dir host to (see remote.callTo).
func callTo[Req, Resp any](ctx context.Context, r *remote, method string, req *Req, to peer.ID) (*Resp, error) {
	env, err := wire.NewRequest(method, req)
	if err != nil {
		return nil, err
	}
	v, err := r.callTo(ctx, env, to, decoderOf[Resp]())
	resp, _ := v.(*Resp)
	return resp, err
}

// callFor sends req, a request about owner's tree, or about no tree if
// owner is "", and decodes the answer with dec. A session the node
// forgot is signed in again, once.
func (r *remote) callFor(ctx context.Context, req *wire.Request, owner spindle.UserName, dec decoder) (any, error) {
	resp, err := r.callRouted(ctx, req, owner, dec)
	var e *spindle.Error
	if err != nil && r.reauth != nil && req.Method != wire.Auth && errors.As(err, &e) && e.Op == wire.SessionOp {
		if aerr := r.reauth(ctx); aerr == nil {
			resp, err = r.callRouted(ctx, req, owner, dec)
		}
	}
	return resp, err
}

// callRouted is call1, for a request about a tree, sent to the tree's dir
// hosts (route): a request for a node other than the client's own is
// signed for it (each time afresh: a host takes a signed request once),
// and the client's node carries it. A write goes to the first dir host
// only, the sequencer; a read goes to each in turn until one answers
// (a host that cannot be reached gives IO), so that reads go on, served by
// a mirror, while the sequencer is down.
func (r *remote) callRouted(ctx context.Context, req *wire.Request, owner spindle.UserName, dec decoder) (any, error) {
	if r.route == nil || r.sign == nil && r.direct == nil || owner == "" {
		return r.call1(ctx, req, dec)
	}
	write := req.Method == wire.DirAppend || req.Method == wire.DirBatch
	var early chan earlyAnswer
	var guess peer.ID
	if !write && r.direct == nil && r.routeCached != nil && !r.routeCached(owner) {
		guess, _ = peer.Decode(r.heads.signer(owner))
	}
	if guess != "" {
		// The route is to be looked up, a round trip; but the dir host
		// that signed the newest head of the tree the client saw is
		// most likely the one to ask: ask it meanwhile, as the route
		// would. The client's node, if that host, hears nothing it did
		// not know: it holds the tree; if another, it carries the
		// request in a tunnel, which it cannot read.
		ectx, cancel := context.WithCancel(ctx)
		defer cancel()
		early = make(chan earlyAnswer, 1)
		go func() {
			v, err := r.callTo(ectx, req, guess, dec)
			early <- earlyAnswer{v, err}
		}()
	}
	sent := time.Now()
	hosts := r.route(ctx, owner)
	var errs []error
	first := 0 // The first host the loop below asks.
	if early != nil && (len(hosts) == 0 && guess == r.peer || len(hosts) > 0 && hosts[0] == guess) {
		// The answer is the one the read below would get first; a host
		// that cannot serve it now, or within hostReadTimeout if others
		// may, leaves the read to the others.
		if len(hosts) <= 1 {
			a := <-early
			return a.v, a.err
		}
		wait := time.NewTimer(hostReadTimeout - time.Since(sent))
		var a earlyAnswer
		select {
		case a = <-early:
		case <-wait.C:
			select {
			case a = <-early: // The answer came as the time ran out.
			default:
				a.err = spindle.E(spindle.Transient, fmt.Errorf("dir host %s did not answer within %v", guess, hostReadTimeout))
			}
		}
		wait.Stop()
		if a.err == nil || !unavailable(a.err) || ctx.Err() != nil {
			return a.v, a.err
		}
		errs = append(errs, a.err)
		first = 1
	}
	if len(hosts) == 0 {
		return r.call1(ctx, req, dec)
	}
	if write {
		return r.callSequencer(ctx, req, owner, hosts[0], dec)
	}
	floor := r.heads.floor(owner)
	lagging := false
	for i, to := range hosts {
		if i < first {
			continue
		}
		hctx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(hosts)-1 {
			// A host that hangs (stopped, or its machine asleep) must not
			// hold the read for the whole call timeout while another
			// host can answer.
			hctx, cancel = context.WithTimeout(ctx, hostReadTimeout)
		}
		resp, err := r.callTo(hctx, req, to, dec)
		if err != nil && hctx.Err() != nil && ctx.Err() == nil {
			err = spindle.E(spindle.Transient, fmt.Errorf("dir host %s did not answer within %v", to, hostReadTimeout))
		}
		cancel()
		if h := logHead(resp); i > 0 && err == nil && h != nil && floor != nil && h.User == owner && h.Seq < floor.Seq {
			// A mirror, asked because the hosts before it did not
			// answer, that is behind the newest head seen: its answer
			// would be refused as a rollback, though it only lags.
			lagging = true
			errs = append(errs, spindle.E(spindle.IO, fmt.Errorf("dir host %s is behind at sequence %d", to, h.Seq)))
			continue
		}
		if err == nil || !unavailable(err) || ctx.Err() != nil {
			return resp, err
		}
		errs = append(errs, err)
	}
	if lagging {
		return nil, r.sequencerDown(ctx, owner, hosts[0], errs[0])
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, spindle.E(spindle.PathName(owner+"/"), spindle.IO, fmt.Errorf("none of the %d dir hosts of %s answered: %w", len(hosts), owner, errors.Join(errs...)))
}

// An earlyAnswer is the answer to a read sent to the client's node while
// the route of the read was looked up (see callRouted).
type earlyAnswer struct {
	v   any
	err error
}

// keepProofsKey is the context key of the function that keeps the key
// proofs a whichaccess answer carries, if the caller asks for them (see
// Client.keepProofs).
type keepProofsKey struct{}

// ownerOf returns the user whose tree name is in.
func ownerOf(name spindle.PathName) spindle.UserName {
	owner, _, _ := strings.Cut(string(name), "/")
	return spindle.UserName(owner)
}

// logHead returns the head of a directory log that the answer resp
// carries, if any.
func logHead(resp any) *dirlog.Head {
	if a, ok := resp.(wire.LogAnswer); ok {
		return a.LogHead()
	}
	return nil
}

// unavailable reports whether err says a dir host cannot serve a tree
// now, so that a read goes to the next one: it cannot be reached, its log
// is damaged, or it waits for the key cluster or a refill. Any other
// answer (a denial, a proof that fails) stands.
func unavailable(err error) bool {
	switch spindle.KindOf(err) {
	case spindle.IO, spindle.Damaged, spindle.Transient:
		return true
	}
	return false
}

// callSequencer sends a write to seq, the first dir host of owner's
// record as looked up. If seq cannot be reached, or refuses (a mirror
// refuses writes), and the record looked up afresh names another host
// first (the owner moved the sequencing), it goes there instead.
func (r *remote) callSequencer(ctx context.Context, req *wire.Request, owner spindle.UserName, seq peer.ID, dec decoder) (any, error) {
	resp, err := r.callTo(ctx, req, seq, dec)
	if err == nil || ctx.Err() != nil || (spindle.KindOf(err) != spindle.IO && spindle.KindOf(err) != spindle.Permission) {
		return resp, err
	}
	if r.routeFresh != nil {
		if now := r.routeFresh(ctx, owner); len(now) > 0 && now[0] != seq {
			return r.callTo(ctx, req, now[0], dec)
		}
	}
	if spindle.KindOf(err) != spindle.IO {
		return resp, err
	}
	return nil, r.sequencerDown(ctx, owner, seq, err)
}

// callTo sends req to the dir host to: to the client's node itself, or
// signed for to and carried by the client's node, in a tunnel to to
// (tunnel.go) unless the client forwards in plain; for the anonymous
// reader, unsigned and straight to to, which answers what all may read.
func (r *remote) callTo(ctx context.Context, req *wire.Request, to peer.ID, dec decoder) (any, error) {
	if r.direct != nil {
		fwd := *req
		fwd.To = to.String()
		return r.callAt(ctx, to, &fwd, dec)
	}
	if to == r.peer {
		return r.call1(ctx, req, dec)
	}
	fwd := *req
	if err := r.sign(&fwd, to); err != nil {
		return nil, err
	}
	check := func(resp *wire.Response, err error) error {
		return checkAnswer(to, r.peer, &fwd, resp, err)
	}
	if r.tunnels != nil {
		resp, err := r.callChecked(ctx, to, &fwd, dec, check)
		if errors.Is(err, errStaleTunnel) && req.Method != wire.DirAppend && req.Method != wire.DirBatch {
			// A read, on a tunnel that broke while kept: again, on a
			// new one (signed afresh: the host takes a request once).
			// A write is not sent twice; the writer learns it failed.
			fwd = *req
			if err := r.sign(&fwd, to); err != nil {
				return nil, err
			}
			return r.callChecked(ctx, to, &fwd, dec, check)
		}
		return resp, err
	}
	return r.callChecked(ctx, r.peer, &fwd, dec, check)
}

// call1 sends req to the client's node.
func (r *remote) call1(ctx context.Context, req *wire.Request, dec decoder) (any, error) {
	return r.callAt(ctx, r.peer, req, dec)
}

// callAt sends req to the peer to: the client's node, or a dir host for
// the anonymous reader.
func (r *remote) callAt(ctx context.Context, to peer.ID, req *wire.Request, dec decoder) (any, error) {
	return r.callChecked(ctx, to, req, dec, nil)
}

// callChecked is callAt with the answer checked, before its body is
// decoded, by check, if set (see checkAnswer); an answer check refuses
// fails the call with check's error.
func (r *remote) callChecked(ctx context.Context, to peer.ID, req *wire.Request, dec decoder, check func(*wire.Response, error) error) (any, error) {
	data, err := wire.Encode(req)
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	var out []byte
	switch {
	case r.direct != nil:
		out, err = r.direct(cctx, to, data)
	case to != r.peer && r.tunnels != nil:
		out, err = r.tunnels.call(cctx, to, data)
	default:
		proto := r.proto
		if proto == "" {
			proto = wire.ClientProtocol
		}
		out, err = p2p.Call(cctx, r.h, to, protocol.ID(proto), data, wire.MaxMessage)
		if err != nil && to == r.peer && cctx.Err() == nil && p2p.ClearDialBackoff(r.h, to, err) {
			// The client's node failed to answer a dial a moment ago
			// and may be back (restarted): try it now.
			out, err = p2p.Call(cctx, r.h, to, protocol.ID(proto), data, wire.MaxMessage)
		}
	}
	if err != nil && cctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		err = spindle.E(spindle.Transient, fmt.Errorf("node %s did not answer %s within %v", to, req.Method, callTimeout))
	}
	cancel()
	resp, err := decodeResponse(out, err, dec, check)
	logCall(r.log, req, len(data), len(out), time.Since(start), err)
	return resp, err
}

// hostReadTimeout bounds how long a read waits for one dir host of a
// tree before it asks the next one the owner names.
var hostReadTimeout = 8 * time.Second

// callTimeout bounds one request of the client protocol, so that a node
// that stopped answering (hung, or its machine asleep) fails a command
// instead of hanging it. The messages are small, at most wire.MaxMessage;
// blocks travel on their own protocol, whose timeouts grow with the data.
var callTimeout = 30 * time.Second

// decodeResponse decodes a node's answer to a call that returned out and
// err with dec, returning the error the node answered with, if any. An
// answer that check, if set, refuses is not decoded.
func decodeResponse(out []byte, err error, dec decoder, check func(*wire.Response, error) error) (any, error) {
	if err != nil {
		return nil, err
	}
	resp, err := wire.DecodeResponse(out)
	if resp == nil {
		return nil, err
	}
	if check != nil {
		if cerr := check(resp, err); cerr != nil {
			return nil, cerr
		}
	}
	return dec(resp, err)
}

// floorSeq is the sequence number of floor, or 0 if none was seen.
func floorSeq(floor *dirlog.Head) int64 {
	if floor == nil {
		return 0
	}
	return floor.Seq
}

// Head implements dirlog.Sequencer.
func (r *remote) Head(ctx context.Context, owner spindle.UserName) (*dirlog.Head, error) {
	resp, err := callDir[wire.DirHeadRequest, wire.DirHeadResponse](ctx, r, wire.DirHead, &wire.DirHeadRequest{User: owner}, string(owner))
	if err != nil {
		return nil, err
	}
	if resp.Head == nil {
		return nil, spindle.E(spindle.Op("client.Head"), spindle.IO, "node sent no head")
	}
	return resp.Head, nil
}

// Append implements dirlog.Sequencer.
func (r *remote) Append(ctx context.Context, e *dirlog.Entry) (*spindle.DirEntry, error) {
	// Only dir.appendbatch carries blocks.
	if _, err := r.held.take(ctx, []*dirlog.Entry{e}, false); err != nil {
		return nil, err
	}
	resp, err := call[wire.DirAppendRequest, wire.DirAppendResponse](ctx, r, wire.DirAppend, e.Tree(), &wire.DirAppendRequest{Entry: e.Marshal()})
	if resp == nil {
		return nil, err
	}
	if err == nil {
		err = r.appended([]*dirlog.Entry{e})
	}
	return resp.Entry, err
}

// toNode reports whether a write to owner's tree goes to the client's
// node: the node sequences the tree, or no record names its hosts.
func (r *remote) toNode(ctx context.Context, owner spindle.UserName) bool {
	if r.direct != nil {
		return false
	}
	if r.route == nil || owner == "" {
		return true
	}
	hosts := r.route(ctx, owner)
	return len(hosts) == 0 || hosts[0] == r.peer
}

// appended remembers the head that entries the node has just appended
// leave, as a head that came with an answer: the client knows it without
// asking, and the next client of its user starts from it (see dial).
func (r *remote) appended(es []*dirlog.Entry) error {
	if r.heads == nil || len(es) == 0 {
		return nil
	}
	last := es[len(es)-1]
	owner, _, _ := strings.Cut(string(last.Entry.Name), "/")
	return r.heads.check(nil, &dirlog.Head{User: spindle.UserName(owner), Seq: last.Seq, Hash: last.Hash()})
}

// AppendBatch implements dirlog.Sequencer. A node too old to know
// batches gets the entries one at a time.
func (r *remote) AppendBatch(ctx context.Context, es []*dirlog.Entry) ([]*spindle.DirEntry, error) {
	if !r.noBatch.Load() {
		batch := make([][]byte, len(es))
		for i, e := range es {
			batch[i] = e.Marshal()
		}
		var owner spindle.UserName
		if len(es) > 0 {
			owner = es[0].Tree()
		}
		blocks, err := r.held.take(ctx, es, r.toNode(ctx, owner))
		if err != nil {
			return nil, err
		}
		req := &wire.DirBatchRequest{Entries: batch, Blocks: blocks}
		resp, err := call[wire.DirBatchRequest, wire.DirBatchResponse](ctx, r, wire.DirBatch, owner, req)
		var e *spindle.Error
		if !(errors.As(err, &e) && e.Op == wire.UnknownOp) {
			if resp == nil {
				return nil, err
			}
			if herr := r.appended(es[:min(len(resp.Entries), len(es))]); err == nil {
				err = herr
			}
			return resp.Entries, err
		}
		r.noBatch.Store(true)
	}
	var out []*spindle.DirEntry
	for _, e := range es {
		d, err := r.Append(ctx, e)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Lookup implements dirlog.Service.
func (r *remote) Lookup(ctx context.Context, _ spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	lb := lookupBlocksOf(ctx)
	resp, err := callDir[wire.DirLookupRequest, wire.DirLookupResponse](ctx, r, wire.DirLookup, &wire.DirLookupRequest{Name: name, WithBlocks: lb != nil, StepFrom: r.stepFrom(ownerOf(name))}, string(name))
	if resp == nil {
		return nil, err
	}
	if perr := r.checkLookup(name, resp, err); perr != nil {
		return nil, perr
	}
	noteProved(ctx, resp.Head)
	if lb != nil && err == nil {
		lb.keep(resp.Entry, resp.Blocks, resp.BlockErr)
		if len(resp.Blocks) > 0 {
			r.log.Debug("blocks with the entry", "name", name, "blocks", len(resp.Blocks))
		}
	}
	return resp.Entry, err
}

// Glob implements dirlog.Service.
func (r *remote) Glob(ctx context.Context, _ spindle.UserName, pattern string) ([]*spindle.DirEntry, error) {
	resp, err := callDir[wire.DirGlobRequest, wire.DirGlobResponse](ctx, r, wire.DirGlob, &wire.DirGlobRequest{Pattern: pattern}, pattern)
	if errors.Is(err, spindle.NotExist) {
		err = r.proveGlobNotExist(ctx, pattern, resp, err, false)
		if err == errGlobRaced {
			resp, err = callDir[wire.DirGlobRequest, wire.DirGlobResponse](ctx, r, wire.DirGlob, &wire.DirGlobRequest{Pattern: pattern}, pattern)
			if errors.Is(err, spindle.NotExist) {
				err = r.proveGlobNotExist(ctx, pattern, resp, err, true)
			}
		}
	}
	if resp == nil || err != nil {
		return nil, err
	}
	if perr := r.checkGlobProofs(pattern, resp); perr != nil {
		return nil, perr
	}
	return resp.Entries, nil
}

// WhichAccess implements dirlog.Service.
func (r *remote) WhichAccess(ctx context.Context, _ spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	keep, _ := ctx.Value(keepProofsKey{}).(func([][]byte))
	resp, err := callDir[wire.DirWhichRequest, wire.DirWhichResponse](ctx, r, wire.DirWhich, &wire.DirWhichRequest{Name: name, StepFrom: r.stepFrom(ownerOf(name)), WithKeys: keep != nil}, string(name))
	if resp == nil || err != nil {
		return nil, err
	}
	if perr := r.checkWhichAccess(name, resp); perr != nil {
		return nil, perr
	}
	if keep != nil {
		keep(resp.KeyProofs)
	}
	noteProved(ctx, resp.Head)
	return resp.Entry, nil
}

// Watch implements dirlog.Service.
func (r *remote) Watch(ctx context.Context, _ spindle.UserName, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	if r.route != nil {
		owner, _, _ := strings.Cut(string(name), "/")
		if hosts := r.route(ctx, spindle.UserName(owner)); len(hosts) > 0 && !slices.Contains(hosts, r.peer) {
			return nil, spindle.E(spindle.Op("client.Watch"), name, spindle.Invalid, fmt.Sprintf("a watch reaches only trees that your node hosts: the tree of %s is on node %s (watch through that node)", owner, hosts[0]))
		}
	}
	c, err := p2p.Open(ctx, r.h, r.peer, wire.WatchProtocol, wire.MaxMessage)
	if err != nil {
		return nil, err
	}
	env, err := wire.NewRequest(wire.DirWatch, &wire.WatchRequest{Name: name, Seq: fromSeq})
	if err != nil {
		c.Close()
		return nil, err
	}
	data, err := wire.Encode(env)
	if err != nil {
		c.Close()
		return nil, spindle.E(spindle.Internal, err)
	}
	if err := c.Send(data); err != nil {
		c.Close()
		return nil, err
	}
	ch := make(chan spindle.Event, 16)
	// One goroutine per watch, which ends with the stream or ctx: the
	// stream is reset when ctx ends, and no send outlasts ctx.
	stop := context.AfterFunc(ctx, func() { c.Reset() })
	go func() {
		defer close(ch)
		defer c.Close()
		defer stop()
		send := func(ev spindle.Event) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			msg, err := c.Recv()
			if err != nil {
				if err != io.EOF && ctx.Err() == nil {
					send(spindle.Event{Err: err})
				}
				return
			}
			var resp wire.WatchEvent
			if err := wire.Decode(msg, &resp); err != nil {
				send(spindle.Event{Err: err})
				return
			}
			ev := spindle.Event{Entry: resp.Entry, Delete: resp.Delete}
			if resp.Err != nil {
				ev.Err = spindle.UnmarshalError(resp.Err)
			}
			if !send(ev) {
				return
			}
		}
	}()
	return ch, nil
}
