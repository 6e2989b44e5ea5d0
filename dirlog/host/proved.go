package host

import (
	"context"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// LookupProved is [Server.Lookup] with a proof of its answer against the
// current signed head: for an entry, the inclusion of its name (for a
// link met on the way, of the link's name), with the signed entries its
// value is made of if the user may read it or they hide nothing (a
// directory or link: see dirlog.Withholds); for NotExist, the exclusion
// of the name or of the first directory above it that does not exist,
// with the proofs that every directory above that is one (Proved.Above);
// for NotDir through a file, the exclusion of the name. Denials (Private,
// Permission) and other errors carry no proof. The answer and the proof
// are taken from one state of the tree; if the log moves on before the
// head for that state is signed, LookupProved tries again, and after a
// few tries fails with kind Transient.
func (s *Server) LookupProved(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, *dirlog.Proved, error) {
	const op spindle.Op = "dirlog.LookupProved"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, nil, spindle.E(op, user, err)
	}
	var d *spindle.DirEntry
	var pr *dirlog.Proved
	perr := s.provedAt(ctx, p.User(), func() (position, bool) {
		var seq position
		d, pr, seq, err = s.lookupProved(user, p)
		return seq, pr != nil
	}, func(h *dirlog.Head) { pr.Head = h })
	if perr != nil {
		return nil, nil, spindle.E(op, p.Path(), user, perr)
	}
	if err != nil {
		err = spindle.E(op, p.Path(), user, err)
	}
	return d, pr, err
}

// GlobProved is [Server.Glob] with a proof of each entry's inclusion
// against the current signed head, taken from one state of the tree, as
// [Server.LookupProved] proves one entry. It cannot prove that no match
// was left out: the map is keyed by hashed names, which have no order to
// prove a range with. NotExist carries the proof of absence a Lookup of
// the path the pattern lists gives (see proveGlobBase), with the head;
// other errors carry no proof.
func (s *Server) GlobProved(ctx context.Context, user spindle.UserName, pattern string) ([]*spindle.DirEntry, []*dirlog.Proved, *dirlog.Head, error) {
	const op spindle.Op = "dirlog.GlobProved"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, nil, nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, nil, nil, spindle.E(op, user, err)
	}
	var out []*spindle.DirEntry
	var prs []*dirlog.Proved
	var head *dirlog.Head
	perr := s.provedAt(ctx, p.User(), func() (position, bool) {
		var seq position
		out, prs, seq, err = s.globAt(user, p, true)
		return seq, err == nil || len(prs) > 0
	}, func(h *dirlog.Head) { head = h })
	if perr != nil {
		return nil, nil, nil, spindle.E(op, p.Path(), user, perr)
	}
	if err != nil {
		return nil, prs, head, spindle.E(op, p.Path(), user, err)
	}
	return out, prs, head, nil
}

// provedAt runs answer, which answers a read and makes its proofs from one
// state of owner's tree and returns that state's position (and false if
// it made no proof), and then gives set the signed head of that state. An
// error of answer's is returned as it is (answers may carry an entry and
// an error together).
func (s *Server) provedAt(ctx context.Context, owner spindle.UserName, answer func() (position, bool), set func(*dirlog.Head)) error {
	if err := ctx.Err(); err != nil {
		return spindle.E(spindle.Transient, err)
	}
	at, ok := answer()
	if !ok {
		return nil
	}
	h, err := s.headAt(owner, at)
	if err != nil {
		return err
	}
	set(h)
	return nil
}

// headAt returns the head of owner's log at position at, a state its tree
// was in, signed by the host if the server has a Host signer: the head
// last signed, if it is of that state, or a new one. Proofs made from one
// state need the head of that state; taking it there, rather than the
// newest, spares a prover racing the owner's appends.
func (s *Server) headAt(owner spindle.UserName, at position) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.Head"
	s.mu.RLock()
	l := s.served(owner)
	s.mu.RUnlock()
	h := &dirlog.Head{User: owner, Seq: at.seq, Hash: at.head, Root: at.root, Time: spindle.Now()}
	if l != nil {
		l.mu.RLock()
		c := l.head
		h.LogRoot = l.logRootAt(at.seq)
		l.mu.RUnlock()
		if c != nil && c.Seq == at.seq && c.Hash == at.head {
			h := *c
			return &h, nil
		}
	}
	if s.cfg.Host != nil {
		if err := h.Sign(s.cfg.Host); err != nil {
			return nil, spindle.E(op, owner, err)
		}
	}
	if l != nil {
		l.mu.Lock()
		if l.t.Seq == h.Seq {
			c := *h
			l.head = &c
		}
		l.mu.Unlock()
	}
	return h, nil
}

// lookupProved answers the lookup and makes its proof, without the head,
// from one state of the tree, whose sequence number it returns.
func (s *Server) lookupProved(user spindle.UserName, p spindle.Parsed) (*spindle.DirEntry, *dirlog.Proved, position, error) {
	v := s.view()
	defer v.release()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, nil, position{}, err
	}
	return lookupProvedBy(v.readerFor(p.User(), user), p)
}

// lookupProvedBy is lookupProved by reader r.
func lookupProvedBy(r *reader, p spindle.Parsed) (*spindle.DirEntry, *dirlog.Proved, position, error) {
	d, err := r.lookup(p)
	seq := r.at()
	if r.t.Map == nil {
		return d, nil, seq, err
	}
	n, blocker := r.t.Find(p)
	switch {
	case err == nil && n != nil:
	case spindle.KindOf(err) == spindle.NotDir && d != nil && blocker != nil:
		n = blocker // The link to follow.
	case spindle.KindOf(err) == spindle.NotExist:
		return d, r.t.ProveNotExist(p), seq, err
	case spindle.KindOf(err) == spindle.NotDir && d == nil:
		return d, r.t.ProveAbsent(p.Path()), seq, err
	default:
		return d, nil, seq, err
	}
	return d, r.t.ProveItem(n, d.Attr&spindle.AttrIncomplete == 0), seq, err
}
