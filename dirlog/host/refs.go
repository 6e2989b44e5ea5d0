package host

import (
	"context"
	"slices"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Refs calls fn, one user at a time, with the blocks that the current
// tree of each user whose log this server holds references, and of every
// earlier state inside the user's retention window (Config.Retain) or
// named by a pin (Config.Pins): the blocks of every file (and those
// Config.MoreRefs adds), each once per user. This is what the server, as
// those users' dir host, keeps leased (see package blocks/lease). fn must
// not keep refs after it returns.
//
// Refs also returns the users whose logs are damaged and not served: the
// blocks their trees reference are not known until the operator repairs
// them, so the caller should warn about them. An error from fn, or the
// end of ctx, stops Refs and is returned.
func (s *Server) Refs(ctx context.Context, fn func(user spindle.UserName, refs []spindle.Ref) error) (damaged []spindle.UserName, err error) {
	const op spindle.Op = "dirlog.Refs"
	s.mu.RLock()
	users := make([]spindle.UserName, 0, len(s.logs))
	for u, l := range s.logs {
		if l.t != nil {
			users = append(users, u)
		}
		if d := l.damaged; d != nil && !d.Repaired {
			damaged = append(damaged, u)
		}
	}
	s.mu.RUnlock()
	slices.Sort(users)
	slices.Sort(damaged)
	var refs []spindle.Ref
	for _, u := range users {
		if err := ctx.Err(); err != nil {
			return damaged, spindle.E(op, spindle.Transient, err)
		}
		refs = refs[:0]
		seen := make(map[spindle.Ref]bool)
		v := s.view()
		if l := v.served(u); l != nil && l.t.Root != nil {
			var visit func(n *dirlog.Node)
			visit = func(n *dirlog.Node) {
				for _, b := range n.Entry.Blocks {
					if !seen[b.Ref] {
						seen[b.Ref] = true
						refs = append(refs, b.Ref)
					}
				}
				if s.cfg.MoreRefs != nil && len(n.Entry.Blocks) > 0 {
					for _, r := range s.cfg.MoreRefs(&n.Entry) {
						if !seen[r] {
							seen[r] = true
							refs = append(refs, r)
						}
					}
				}
				for _, k := range n.Kids {
					visit(k)
				}
			}
			visit(l.t.Root)
		}
		v.release()
		if keep, pins := s.retained(ctx, u); keep > 0 || len(pins) > 0 {
			kept, err := s.keptOf(ctx, u, keep, pins)
			if err != nil {
				s.cfg.Logger.Warn("dirlog: the blocks of earlier versions are not known; only the current tree's are leased", "user", string(u), "err", err)
			}
			for _, r := range kept {
				if !seen[r] {
					seen[r] = true
					refs = append(refs, r)
				}
			}
		}
		if len(refs) == 0 {
			continue
		}
		if err := fn(u, refs); err != nil {
			return damaged, err
		}
	}
	return damaged, nil
}

// keptOf returns the blocks of the states of user's tree inside a window
// of keep, beyond the current tree's.
func (s *Server) keptOf(ctx context.Context, user spindle.UserName, keep time.Duration, pins []int64) ([]spindle.Ref, error) {
	s.mu.RLock()
	l := s.served(user)
	s.mu.RUnlock()
	if l == nil {
		return nil, nil
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	return s.keptRefs(ctx, l, keep, pins)
}

// Files calls fn, one user at a time, with a copy of every entry of the
// current tree of each user whose log this server holds that has blocks:
// the files whose blocks the server keeps leased (see [Server.Refs]). An
// error from fn, or the end of ctx, stops Files and is returned.
func (s *Server) Files(ctx context.Context, fn func(user spindle.UserName, e *spindle.DirEntry) error) error {
	const op spindle.Op = "dirlog.Files"
	s.mu.RLock()
	users := make([]spindle.UserName, 0, len(s.logs))
	for u, l := range s.logs {
		if l.t != nil {
			users = append(users, u)
		}
	}
	s.mu.RUnlock()
	slices.Sort(users)
	for _, u := range users {
		if err := ctx.Err(); err != nil {
			return spindle.E(op, spindle.Transient, err)
		}
		var files []spindle.DirEntry
		v := s.view()
		if l := v.served(u); l != nil && l.t.Root != nil {
			var visit func(n *dirlog.Node)
			visit = func(n *dirlog.Node) {
				if len(n.Entry.Blocks) > 0 {
					e := n.Entry
					e.Blocks = slices.Clone(e.Blocks)
					e.Packdata = slices.Clone(e.Packdata)
					e.Inline, e.Signed = nil, nil
					files = append(files, e)
				}
				for _, k := range n.Kids {
					visit(k)
				}
			}
			visit(l.t.Root)
		}
		v.release()
		for i := range files {
			if err := fn(u, &files[i]); err != nil {
				return err
			}
		}
	}
	return nil
}
