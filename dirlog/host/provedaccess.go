package host

import (
	"context"

	"spindle.dev/dirlog"

	"spindle.dev"
	"spindle.dev/access"
)

// WhichAccessProved is [Server.WhichAccess] with a [dirlog.AccessProved] of its
// answer against the current signed head, taken from one state of the
// tree as in [Server.LookupProved]. Errors carry no proof.
func (s *Server) WhichAccessProved(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, *dirlog.AccessProved, error) {
	const op spindle.Op = "dirlog.WhichAccessProved"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, nil, spindle.E(op, user, err)
	}
	var d *spindle.DirEntry
	var ap *dirlog.AccessProved
	perr := s.provedAt(ctx, p.User(), func() (position, bool) {
		var seq position
		d, ap, seq, err = s.whichAccessProved(user, p)
		return seq, ap != nil
	}, func(h *dirlog.Head) { ap.Head = h })
	if perr != nil {
		return nil, nil, spindle.E(op, p.Path(), user, perr)
	}
	if err != nil {
		return nil, nil, spindle.E(op, p.Path(), user, err)
	}
	return d, ap, nil
}

func (s *Server) whichAccessProved(user spindle.UserName, p spindle.Parsed) (*spindle.DirEntry, *dirlog.AccessProved, position, error) {
	v := s.view()
	defer v.release()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, nil, position{}, err
	}
	r := v.readerFor(p.User(), user)
	if err := dirlog.Need(r.can, user, access.AnyRight, p); err != nil {
		return nil, nil, position{}, err
	}
	names, err := access.Candidates(p.Path())
	if err != nil {
		return nil, nil, position{}, err
	}
	seq := r.at()
	if r.t.Map == nil {
		return nil, nil, seq, spindle.E(spindle.Internal, "the tree keeps no map")
	}
	ap := &dirlog.AccessProved{Name: p.Path()}
	for _, file := range names {
		if r.t.Access[file] == nil {
			ap.Absent = append(ap.Absent, r.t.ProveAbsent(file))
			continue
		}
		n := r.t.Lookup(file)
		if n == nil || n.Access == nil {
			return nil, nil, seq, spindle.E(spindle.Internal, file, "Access file parsed but not in the tree")
		}
		ap.Found = r.t.ProveItem(n, true)
		return dirlog.CloneEntry(&n.Entry), ap, seq, nil
	}
	return nil, ap, seq, nil
}
