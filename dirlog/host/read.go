package host

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/dirlog"
)

// reader holds what a read needs, under Server.mu held for reading.
type reader struct {
	s    *Server
	v    *view // The read r is part of.
	t    *dirlog.Tree
	user spindle.UserName
	load access.GroupLoader
	can  dirlog.RightsFunc
}

// readerFor returns a reader of owner's tree for user, part of v: its
// results are good until v is released.
func (v *view) readerFor(owner, user spindle.UserName) *reader {
	t := dirlog.NewTree(owner)
	if l := v.served(owner); l != nil {
		t = l.t
	}
	load := v.groupsFor(user, v.currentGroups(t))
	return &reader{s: v.s, v: v, t: t, user: user, load: load, can: t.Rights(load)}
}

// currentGroups loads groups as they stand now, t's own and other users'.
// The trees it reads are held by v.
func (v *view) currentGroups(t *dirlog.Tree) access.GroupLoader {
	return dirlog.GroupLoader(t, func(u spindle.UserName) (*dirlog.Tree, int64, error) {
		if l := v.served(u); l != nil {
			return l.t, l.t.Seq, nil
		}
		return nil, 0, v.s.damageFor(u, "")
	})
}

// groupsFor wraps load so that a group that cannot be loaded tells user no
// more than user may know. As for any name, whether a group exists is told
// only to a user with some right on its Group file (its owner has every
// right); to anyone else the group is Private, and a rights decision that
// needed it is then reported as a plain denial (see undecided). It must be
// used within v.
func (v *view) groupsFor(user spindle.UserName, load access.GroupLoader) access.GroupLoader {
	return func(name spindle.PathName) (*access.Group, error) {
		g, err := load(name)
		if err == nil || v.mayKnow(user, name) {
			return g, err
		}
		return nil, spindle.E(spindle.Private, name, "group cannot be consulted")
	}
}

// mayKnow reports whether user has some right on name, judged by the
// Access and Group files as they stand now in its owner's tree. A right
// that cannot be decided is not held.
func (v *view) mayKnow(user spindle.UserName, name spindle.PathName) bool {
	p, err := spindle.Parse(name)
	if err != nil {
		return false
	}
	if p.User() == user {
		return true
	}
	l := v.served(p.User())
	if l == nil {
		return false
	}
	ok, err := access.Can(user, access.AnyRight, p.Path(), l.t.LoadAccess, v.currentGroups(l.t))
	return err == nil && ok
}

// knowsLog reports whether user may learn the position of owner's log: the
// owner, and every user some Access file in the tree grants a right, may.
// Anyone else gets no head and no sequence number of the log, in answers
// or in errors.
func (v *view) knowsLog(user, owner spindle.UserName) bool {
	if user == owner {
		return true
	}
	l := v.served(owner)
	if l == nil {
		return false
	}
	load := v.currentGroups(l.t)
	for name, a := range l.t.Access {
		p, err := spindle.Parse(name)
		if err != nil {
			continue
		}
		if ok, err := a.Can(user, access.AnyRight, p.Dir().Path(), load); err == nil && ok {
			return true
		}
	}
	return false
}

// show returns what user may see of d with right need (AnyRight, or List
// for listings): the whole entry if the user may read it, the entry without
// blocks and packdata, marked AttrIncomplete, if the user holds need but
// not read, or nil.
func (r *reader) show(d *spindle.DirEntry, need access.Right) (*spindle.DirEntry, error) {
	return r.showWith(r.can, d, need)
}

// showWith is show with rights decided by can.
func (r *reader) showWith(can dirlog.RightsFunc, d *spindle.DirEntry, need access.Right) (*spindle.DirEntry, error) {
	read, err := can(r.user, access.Read, d.Name)
	if err != nil {
		return nil, r.undecided(can, d.Name, err)
	}
	if read {
		return dirlog.CloneEntry(d), nil
	}
	ok, err := can(r.user, need, d.Name)
	if err != nil {
		return nil, r.undecided(can, d.Name, err)
	}
	if !ok {
		return nil, nil
	}
	return incomplete(d), nil
}

// undecided is the package's undecided for a name in r's tree.
func (r *reader) undecided(can dirlog.RightsFunc, name spindle.PathName, err error) error {
	p, perr := spindle.Parse(name)
	if perr != nil {
		return spindle.E(spindle.Internal, name, perr)
	}
	return dirlog.Undecided(can, r.user, p, err)
}

// incomplete returns a copy of d for a user who may know of it but not
// read it: without blocks and packdata, marked AttrIncomplete. As in
// Upspin, Access and Group files are shown whole to anyone with a right:
// they hold the rules.
func incomplete(d *spindle.DirEntry) *spindle.DirEntry {
	c := dirlog.CloneEntry(d)
	if access.IsAccessFile(c.Name) || access.IsGroupFile(c.Name) {
		return c
	}
	c.Blocks, c.Packdata = nil, nil
	c.Attr |= spindle.AttrIncomplete
	return c
}

// at returns the position of r's tree.
func (r *reader) at() position {
	return position{r.t.Seq, r.t.Head, r.t.MapRoot()}
}

// lookup implements Lookup for a parsed name.
func (r *reader) lookup(p spindle.Parsed) (*spindle.DirEntry, error) {
	n, blocker := r.t.Find(p)
	if n == nil {
		if blocker != nil && blocker.Entry.Attr.IsLink() {
			// As Upspin's errLink: a user with a right on the link may
			// follow it; to anyone else the name is Private.
			if d, err := r.show(&blocker.Entry, access.AnyRight); err != nil {
				return nil, err
			} else if d != nil {
				return d, dirlog.BlockedBy(blocker, p, r.user)
			}
		}
		if err := dirlog.Need(r.can, r.user, access.AnyRight, p); err != nil {
			return nil, err
		}
		if blocker != nil {
			return nil, dirlog.BlockedBy(blocker, p, r.user)
		}
		return nil, spindle.E(spindle.NotExist, p.Path(), r.user)
	}
	d, err := r.show(&n.Entry, access.AnyRight)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, dirlog.Denied(r.can, r.user, p)
	}
	return d, nil
}

// list returns the items of directory dir for a listing, and whether the
// user may read them, as Upspin's listDir decides: a user who may not list
// dir gets Private, whether or not it exists; one who may list it but not
// read it gets incomplete entries. A path through a link is refused with
// NotDir only to a user with a right on the link (links are not followed).
func (r *reader) list(dir spindle.Parsed) (map[string]*dirlog.Node, bool, error) {
	n, blocker := r.t.Find(dir)
	if n != nil && n.Entry.Attr.IsLink() {
		blocker = n // Listing a link would list its target.
	}
	if blocker != nil && blocker.Entry.Attr.IsLink() {
		if d, err := r.show(&blocker.Entry, access.AnyRight); err != nil {
			return nil, false, err
		} else if d != nil {
			return nil, false, dirlog.BlockedBy(blocker, dir, r.user)
		}
	}
	ok, err := r.can(r.user, access.List, dir.Path())
	if err != nil {
		return nil, false, dirlog.Undecided(r.can, r.user, dir, err)
	}
	if !ok {
		return nil, false, spindle.E(spindle.Private, dir.Path(), r.user)
	}
	switch {
	case blocker != nil:
		return nil, false, dirlog.BlockedBy(blocker, dir, r.user)
	case n == nil:
		return nil, false, spindle.E(spindle.NotExist, dir.Path(), r.user)
	case !n.Entry.Attr.IsDir():
		return nil, false, spindle.E(spindle.NotDir, dir.Path(), r.user)
	}
	// As Upspin: a read right that cannot be decided is not held.
	read, err := r.can(r.user, access.Read, dir.Path())
	return n.Kids, read && err == nil, nil
}

// glob returns the entries below dir that match elems, a pattern's
// elements after dir's, as Upspin's serverutil.Glob finds them: the
// elements up to the first with a metacharacter are a path, and the
// directory they name is listed (see list); a match is emitted if it is
// the pattern's last element, or searched further if it is a directory.
// A directory below that the user may not list, or that the rest of the
// pattern does not reach, adds nothing. Elements without metacharacters
// after the last listing are looked up, not listed (see lookup), as in
// Upspin: a name one knows may be asked for with any right on it.
func (r *reader) glob(dir spindle.Parsed, elems []string) ([]*spindle.DirEntry, error) {
	meta := slices.IndexFunc(elems, hasMeta)
	if meta < 0 {
		p, err := under(dir, elems)
		if err != nil {
			return nil, err
		}
		d, err := r.lookup(p)
		if err != nil {
			return nil, err
		}
		return []*spindle.DirEntry{d}, nil
	}
	base, err := under(dir, elems[:meta])
	if err != nil {
		return nil, err
	}
	kids, read, err := r.list(base)
	if err != nil {
		return nil, err
	}
	var out []*spindle.DirEntry
	for name, k := range kids {
		if ok, _ := path.Match(elems[meta], name); !ok {
			continue
		}
		if meta == len(elems)-1 {
			if read {
				out = append(out, dirlog.CloneEntry(&k.Entry))
			} else {
				out = append(out, incomplete(&k.Entry))
			}
			continue
		}
		if !k.Entry.Attr.IsDir() {
			continue // Links are not followed; a file ends the match.
		}
		kp, err := spindle.Parse(k.Entry.Name)
		if err != nil {
			return nil, spindle.E(spindle.Internal, k.Entry.Name, err)
		}
		more, err := r.glob(kp, elems[meta+1:])
		switch spindle.KindOf(err) {
		case spindle.Other:
		case spindle.Private, spindle.Permission, spindle.NotExist, spindle.NotDir:
			continue // As in Upspin: what the user may not see adds nothing.
		default:
			return nil, err
		}
		out = append(out, more...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// hasMeta reports whether a pattern element holds a metacharacter of
// path.Match.
func hasMeta(el string) bool { return strings.ContainsAny(el, `*?[\`) }

// under returns the path of elems below dir. The elements come from a
// pattern that parsed, so only a pattern too long can fail.
func under(dir spindle.Parsed, elems []string) (spindle.Parsed, error) {
	if len(elems) == 0 {
		return dir, nil
	}
	s := string(dir.Path())
	if !dir.IsRoot() {
		s += "/"
	}
	return spindle.Parse(spindle.PathName(s + strings.Join(elems, "/")))
}

// Lookup returns the entry for name as user may see it. A user with some
// right on name but not read gets the entry marked AttrIncomplete, without
// blocks and packdata. A user with no right on name gets Private, whether
// or not it exists and whatever the user's rights on its parent, as in
// Upspin; NotExist only goes to users with some right on name. If name
// lies beneath a link, Lookup returns the link's entry together with an
// error of kind NotDir to a user with some right on the link, and the
// caller follows the link; anyone else gets Private. A right that depends
// on a group that cannot be loaded is reported as a denial (see
// [Server.Append] for what the error says about the group).
func (s *Server) Lookup(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Lookup"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	v := s.view()
	defer v.release()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	d, err := v.readerFor(p.User(), user).lookup(p)
	if err != nil {
		return d, spindle.E(op, p.Path(), user, err)
	}
	return d, nil
}

// Glob returns, sorted by name, the entries matching pattern as user may
// see them. Each element after the user name may use path.Match syntax;
// the user name may not. A pattern without metacharacters behaves as
// Lookup. As in Upspin, a pattern looks only inside directories the user
// may list: the directory before the first element with a metacharacter
// must be listable (otherwise Glob fails with Private, whether or not it
// exists), and directories further down that are not add nothing. Entries
// of a directory the user may list but not read are incomplete (see
// [Server.Lookup]). Links are not followed.
func (s *Server) Glob(ctx context.Context, user spindle.UserName, pattern string) ([]*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Glob"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	out, _, _, err := s.globAt(user, p, false)
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	return out, nil
}

// parsePattern parses a Glob pattern.
func parsePattern(pattern string) (spindle.Parsed, error) {
	p, err := spindle.Parse(spindle.PathName(pattern))
	if err != nil {
		return p, err
	}
	for _, el := range p.Elems() {
		if _, err := path.Match(el, ""); err != nil {
			return p, spindle.E(spindle.Invalid, p.Path(), fmt.Errorf("bad pattern element %q: %v", el, err))
		}
	}
	return p, nil
}

// globAt answers a Glob from one state of the tree, whose sequence number
// it returns, with a proof of each entry if prove is set (see
// [Server.GlobProved]).
func (s *Server) globAt(user spindle.UserName, p spindle.Parsed, prove bool) ([]*spindle.DirEntry, []*dirlog.Proved, position, error) {
	v := s.view()
	defer v.release()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, nil, position{}, err
	}
	return globBy(v.readerFor(p.User(), user), p, prove)
}

// globBy is globAt by reader r.
func globBy(r *reader, p spindle.Parsed, prove bool) ([]*spindle.DirEntry, []*dirlog.Proved, position, error) {
	out, err := r.glob(p.First(0), p.Elems())
	if spindle.KindOf(err) == spindle.NotExist && prove && r.t.Map != nil {
		return nil, r.proveGlobBase(p), r.at(), err
	}
	if err != nil || !prove || r.t.Map == nil {
		return out, nil, r.at(), err
	}
	prs := make([]*dirlog.Proved, len(out))
	for i, d := range out {
		n := r.t.Lookup(d.Name)
		if n == nil {
			return nil, nil, position{}, spindle.E(spindle.Internal, d.Name, "globbed entry not in the tree")
		}
		prs[i] = r.t.ProveItem(n, d.Attr&spindle.AttrIncomplete == 0)
	}
	return out, prs, r.at(), nil
}

// proveGlobBase proves, for a Glob of p answered NotExist, that the path
// the pattern lists does not exist: the path before its first element
// with a metacharacter, or the whole name if none has one. The proof is
// the one a Lookup of that path gives (the exclusion of the path or of
// the first directory above it missing, then the proofs of each directory
// above that), flattened into one slice, first the exclusion. It is nil
// if the lookup, in this same state, does not answer NotExist (the glob
// met a missing name below a link, say), and the client then looks the
// path up itself.
func (r *reader) proveGlobBase(p spindle.Parsed) []*dirlog.Proved {
	base := p
	if i := slices.IndexFunc(p.Elems(), hasMeta); i >= 0 {
		base = p.First(i)
	}
	if _, err := r.lookup(base); spindle.KindOf(err) != spindle.NotExist {
		return nil
	}
	pr := r.t.ProveNotExist(base)
	if pr == nil {
		return nil
	}
	return append([]*dirlog.Proved{pr}, pr.Above...)
}

// WhichAccess returns the entry of the Access file that governs name, or
// nil if none does (the owner alone has every right). The user needs some
// right on name; otherwise the errors are Lookup's.
func (s *Server) WhichAccess(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.WhichAccess"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	v := s.view()
	defer v.release()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	r := v.readerFor(p.User(), user)
	if err := dirlog.Need(r.can, user, access.AnyRight, p); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	a, err := access.WhichAccess(p.Path(), r.t.LoadAccess)
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	n := r.t.Lookup(a.Path())
	if n == nil || n.Access == nil {
		return nil, nil
	}
	return dirlog.CloneEntry(&n.Entry), nil
}

// HeadFor returns the head of owner's log, as Head does, to user, who must
// hold some right in owner's tree (the owner does, and every user an Access
// file there names): the head is the log's position, and a user without
// rights learns nothing of a tree. Anyone else gets Private, as for a tree
// that does not exist.
func (s *Server) HeadFor(ctx context.Context, user, owner spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.Head"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, err)
	}
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	v := s.view()
	ok := v.knowsLog(user, owner)
	v.release()
	if !ok {
		return nil, spindle.E(op, spindle.Private, spindle.PathName(owner+"/"), user)
	}
	return s.Head(ctx, owner)
}

// Head returns the head of owner's log, signed by the host if the server
// has a Host signer: its sequence number, the hash of its last entry, the
// root of its tree map (see [dirlog.MapRoot]) and the time it was signed. A log
// with no entries has sequence 0, the zero hash and the empty map's root.
// It checks no rights: a node answering users calls [Server.HeadFor].
func (s *Server) Head(ctx context.Context, owner spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.Head"
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	v := s.view()
	if err := s.gate(ctx, owner, ""); err != nil {
		v.release()
		return nil, spindle.E(op, err)
	}
	l := v.served(owner)
	h := &dirlog.Head{User: owner}
	if l != nil {
		if l.head != nil && l.head.Seq == l.t.Seq {
			c := *l.head
			v.release()
			return &c, nil
		}
		h.Seq, h.Hash, h.Root = l.t.Seq, l.t.Head, l.t.MapRoot()
		h.LogRoot = l.logRootAt(h.Seq) // l.mu is held by v.
	} else {
		h.Root = dirlog.NewTree("").MapRoot() // The empty log's root is zero.
	}
	h.Time = spindle.Now()
	v.release()
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

// StepFor returns the consistency proof that owner's log at sequence from
// is a prefix of the log at sequence to (see [dirlog.CheckStep]), for
// user, who must hold some right in owner's tree, as for [Server.HeadFor].
// The proof is hashes only and reveals no name. A host that cannot prove
// the step (the log is shorter than to, or its tree was folded from a
// checkpoint that carries no log tree) says so with NotExist.
func (s *Server) StepFor(ctx context.Context, user, owner spindle.UserName, from, to int64) (dirlog.ConsistencyProof, error) {
	const op spindle.Op = "dirlog.Step"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, err)
	}
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	v := s.view()
	defer v.release()
	if !v.knowsLog(user, owner) {
		return nil, spindle.E(op, spindle.Private, spindle.PathName(owner+"/"), user)
	}
	l := v.served(owner)
	if l == nil || l.t.Log == nil || from < 0 || from > to || to > l.t.Log.Len() {
		return nil, spindle.E(op, spindle.NotExist, spindle.PathName(owner+"/"), fmt.Sprintf("this host cannot prove a step of the log from %d to %d", from, to))
	}
	p, err := l.t.Log.Prove(from, to)
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, spindle.PathName(owner+"/"), err)
	}
	return p, nil
}

// MapStepFor returns, encoded, the map step of owner's log from sequence
// from to its head (see [dirlog.MapStep]): what the owner, who holds the
// entries, needs to check that a head's map root is the one its entries
// make. Only the owner may have it, as for [Server.Entries]: its changes
// name keys of every item an entry touched. A step the host keeps no
// changes for (before its window, or before a checkpoint its tree was
// folded from) is NotExist.
func (s *Server) MapStepFor(ctx context.Context, user, owner spindle.UserName, from int64) ([]byte, error) {
	const op spindle.Op = "dirlog.MapStep"
	if err := ownerOnly(user, owner); err != nil {
		return nil, spindle.E(op, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	v := s.view()
	defer v.release()
	l := v.served(owner)
	if l == nil || l.t == nil {
		return nil, spindle.E(op, spindle.NotExist, spindle.PathName(owner+"/"), "this host has no log of "+string(owner))
	}
	st, err := l.t.MapStep(from)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return st.Marshal(), nil
}

// Usage returns the bytes of the files in owner's tree and the sequence
// number of its last entry, and whether this server serves the tree.
func (s *Server) Usage(owner spindle.UserName) (bytes, seq int64, ok bool) {
	v := s.view()
	defer v.release()
	l := v.served(owner)
	if l == nil {
		return 0, 0, false
	}
	return l.t.Bytes, l.t.Seq, true
}
