package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// Reads of the past of another user's tree (issue 29). A reader may not
// read the tree's log, so its dir host folds the state asked for and
// answers from it as it answers from the current tree, each answer
// proved against a head of that state signed now (see dirlog/host's
// LookupProvedAt). The client checks that head as it checks any: signed
// by one of the owner's dir hosts (and cosigned as the owner's key record
// asks), and then that it is a state of the log the client knows: the
// newest head it holds with a log root extends it, by a consistency proof
// (dir.step). A host that answers with a made-up state, or another state
// than the one asked for, is caught (Integrity). The host alone decides
// rights: those of then and of now must both allow a read.
//
// What the reader must take on the host's word: which sequence a time
// names (a reader cannot see entries' times), and that a pattern that
// lists nothing in a past state matched nothing.

// pastCallTimeout bounds one read of another user's past.
const pastCallTimeout = time.Minute

// PastOf returns owner's tree as it was after entry seq, -seq entries
// before its head if seq is negative, or, if when is not zero, at time
// when, as [Client.PastAt] does for the client's own tree; for another
// user's tree, each read goes to its dir host (see above), the first
// finding the state a time or a negative count names; each read has its
// own bound, pastCallTimeout.
func (c *Client) PastOf(ctx context.Context, owner spindle.UserName, seq int64, when time.Time) (*Past, error) {
	const op spindle.Op = "client.PastOf"
	if owner == c.user {
		return c.PastAt(ctx, seq, when)
	}
	if seq == 0 && when.IsZero() {
		return nil, spindle.E(op, spindle.PathName(owner+"/"), spindle.Invalid, "no state named: want a sequence or a time")
	}
	p := &Past{c: c, owner: owner, at: seq, when: when}
	if seq > 0 && when.IsZero() {
		p.seq = seq // The answers must be of that state.
	}
	return p, nil
}

// state fills in req's state: the one found by the first answer, or the
// one asked for.
func (p *Past) state(at, atTime *int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.seq != 0:
		*at = p.seq
	case !p.when.IsZero():
		*atTime = p.when.UnixNano()
	default:
		*at = p.at
	}
}

// found records the state the first checked answer was of.
func (p *Past) found(h *dirlog.Head) {
	p.mu.Lock()
	if p.seq == 0 {
		p.seq = h.Seq
	}
	p.mu.Unlock()
}

// lookupResp asks for req in owner's past and checks the answer: its
// head, a state of the log the client knows (and the one asked for if
// p.seq is set), and the proof of the entry or of its absence. It
// returns the head and the entry with the node's error.
func (p *Past) lookupResp(ctx context.Context, req *wire.DirLookupRequest) (*dirlog.Head, *spindle.DirEntry, error) {
	r := p.c.svc
	resp, err := call[wire.DirLookupRequest, wire.DirLookupResponse](ctx, r, wire.DirLookup, p.owner, req)
	if resp == nil {
		return nil, nil, err
	}
	if resp.Head == nil {
		if err == nil {
			err = spindle.E(req.Name, spindle.Integrity, "node answered a read of the past without a head")
		}
		return nil, nil, err
	}
	if herr := p.checkHead(ctx, req.Name, resp.Head); herr != nil {
		return nil, nil, herr
	}
	if perr := r.checkLookup(req.Name, resp, err); perr != nil {
		return nil, nil, perr
	}
	p.found(resp.Head)
	return resp.Head, resp.Entry, err
}

// checkHead checks h, the head of an answer about owner's past.
func (p *Past) checkHead(ctx context.Context, name spindle.PathName, h *dirlog.Head) error {
	r := p.c.svc
	if h.User != p.owner {
		return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, "node answered with the head of "+string(h.User)+"'s log")
	}
	if want := p.Seq(); want != 0 && h.Seq != want {
		return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, fmt.Sprintf("node answered a read of the state at sequence %d with the head at %d", want, h.Seq))
	}
	if err := r.verifyHead(ctx, h, true); err != nil {
		return err
	}
	if !h.HasLogRoot() {
		return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, fmt.Sprintf("the head of the state at %d from %s commits to no log root: it cannot be checked against the log", h.Seq, hostOf(h)))
	}
	// A state proved once to be of the log needs no second consistency
	// proof (a round trip per read of a folder's files): each read of it
	// comes with a head of it, whose signature is checked above.
	p.mu.Lock()
	proved := p.proved
	p.mu.Unlock()
	if proved != nil && proved.Seq == h.Seq && proved.Hash == h.Hash && proved.LogRoot == h.LogRoot && proved.Root == h.Root {
		return nil
	}
	newest := func() *dirlog.Head {
		if f := r.heads.floor(p.owner); f != nil && f.HasLogRoot() && len(f.Sig) > 0 {
			return f
		}
		return r.heads.anchor(p.owner)
	}
	ref := newest()
	if ref == nil || ref.Seq < h.Seq {
		// Learn the newest head: a read of the present of the same
		// name, which the reader may make if it may read the past (the
		// rights of now apply too), checked as any.
		if _, err := r.Lookup(ctx, p.owner, name); err != nil {
			switch spindle.KindOf(err) {
			case spindle.NotExist, spindle.NotDir:
			case spindle.Private, spindle.Permission:
				return spindle.E(name, spindle.Integrity, fmt.Errorf("the dir host answered a read of the past that the rights of now do not allow: %w", err))
			default:
				return err
			}
		}
		if ref = newest(); ref == nil || ref.Seq < h.Seq {
			return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, fmt.Sprintf("the state at %d from %s is past every head of the log the client holds", h.Seq, hostOf(h)))
		}
	}
	if ref.Seq == h.Seq {
		if ref.Hash != h.Hash || ref.LogRoot != h.LogRoot {
			return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, fmt.Sprintf("the state at %d from %s (%s) is not the one the client holds (%s)", h.Seq, hostOf(h), h.Hash, ref.Hash))
		}
	} else if err := r.proveStep(ctx, h, ref); err != nil {
		return spindle.E(spindle.PathName(p.owner+"/"), spindle.Integrity, fmt.Errorf("the state at %d is not one of the log the client holds: %w", h.Seq, err))
	}
	c := *h
	p.mu.Lock()
	p.proved = &c
	p.mu.Unlock()
	return nil
}

// remoteCtx returns the context of one read of another user's past.
func remoteCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), pastCallTimeout)
}

// remoteLookup is Past.Lookup of another user's tree.
func (p *Past) remoteLookup(op spindle.Op, name spindle.PathName) (*spindle.DirEntry, error) {
	q, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if q.User() != p.owner {
		return nil, spindle.E(op, q.Path(), spindle.Invalid, fmt.Sprintf("a past of %s's tree, not %s's", p.owner, q.User()))
	}
	ctx, cancel := remoteCtx()
	defer cancel()
	req := &wire.DirLookupRequest{Name: q.Path()}
	p.state(&req.At, &req.AtTime)
	_, d, err := p.lookupResp(ctx, req)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if d == nil {
		return nil, spindle.E(op, q.Path(), spindle.NotExist, fmt.Sprintf("not in the tree at sequence %d", p.seq))
	}
	return d, nil
}

// remoteGlob is Past.Glob of another user's tree.
func (p *Past) remoteGlob(op spindle.Op, pattern string) ([]*spindle.DirEntry, error) {
	q, err := spindle.Parse(spindle.PathName(pattern))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if q.User() != p.owner {
		return nil, spindle.E(op, q.Path(), spindle.Invalid, fmt.Sprintf("a past of %s's tree, not %s's", p.owner, q.User()))
	}
	ctx, cancel := remoteCtx()
	defer cancel()
	r := p.c.svc
	req := &wire.DirGlobRequest{Pattern: pattern}
	p.state(&req.At, &req.AtTime)
	resp, err := call[wire.DirGlobRequest, wire.DirGlobResponse](ctx, r, wire.DirGlob, p.owner, req)
	if resp == nil || err != nil {
		return nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	if len(resp.Entries) == 0 {
		return nil, nil
	}
	if resp.Head == nil {
		return nil, spindle.E(op, spindle.PathName(pattern), spindle.Integrity, "node listed the past without a head")
	}
	if herr := p.checkHead(ctx, q.Path(), resp.Head); herr != nil {
		return nil, spindle.E(op, herr)
	}
	if perr := r.checkGlobProofs(pattern, resp); perr != nil {
		return nil, spindle.E(op, perr)
	}
	p.found(resp.Head)
	out := slices.Clone(resp.Entries)
	slices.SortFunc(out, func(a, b *spindle.DirEntry) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out, nil
}
