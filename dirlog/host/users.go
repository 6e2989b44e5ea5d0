package host

import (
	"maps"
	"slices"

	"spindle.dev"
)

// Users returns, sorted, the users whose logs the server holds entries of.
func (s *Server) Users() []spindle.UserName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]spindle.UserName, 0, len(s.logs))
	for u, l := range s.logs {
		if l.t.Seq > 0 {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// Hosted returns, sorted, every user whose log the server holds: with
// entries, without any (a log repaired or cut back to nothing), damaged,
// being refilled, or waiting for the key state. A node looks after each
// of them, as a mirror would, from its start.
func (s *Server) Hosted() []spindle.UserName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := slices.Collect(maps.Keys(s.logs))
	out = slices.AppendSeq(out, maps.Keys(s.damaged))
	out = slices.AppendSeq(out, maps.Keys(s.refilling))
	out = slices.AppendSeq(out, maps.Keys(s.waiting))
	slices.Sort(out)
	return slices.Compact(out)
}
