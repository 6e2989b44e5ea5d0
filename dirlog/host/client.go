package host

import (
	"spindle.dev"
	"spindle.dev/dirlog"
)

// For returns a client of s acting for the signer's user.
func (s *Server) For(signer spindle.Signer) *dirlog.Client { return dirlog.NewClient(s, signer) }

var _ dirlog.Service = (*Server)(nil)
