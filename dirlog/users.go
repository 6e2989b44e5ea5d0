package dirlog

import (
	"slices"

	"spindle.dev"
)

// Users returns, sorted, the users whose logs the server holds entries of.
func (s *Server) Users() []spindle.UserName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]spindle.UserName, 0, len(s.logs))
	for u, l := range s.logs {
		if l.t.seq > 0 {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}
