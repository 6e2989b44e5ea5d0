package host

import (
	"context"
	"errors"

	"spindle.dev"
	"spindle.dev/dirlog"
)

type refillKey struct{}

// RefillContext returns a context under which AppendBatch, StartFrom and
// Head act on owner's log while it is being refilled (see
// [Server.BeginRefill]), when they refuse everyone else.
func RefillContext(ctx context.Context, owner spindle.UserName) context.Context {
	return context.WithValue(ctx, refillKey{}, owner)
}

func refillOf(ctx context.Context) spindle.UserName {
	u, _ := ctx.Value(refillKey{}).(spindle.UserName)
	return u
}

// BeginRefill starts to refill user's damaged log from another dir host:
// it keeps the entries that verify (moving the rest aside, as a repair
// does) and serves them to nobody but the refill, which appends what
// the other host has under [RefillContext] until [Server.EndRefill]. It
// returns the head the refill continues from.
func (s *Server) BeginRefill(ctx context.Context, user spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.BeginRefill"
	s.resumeMu.Lock()
	defer s.resumeMu.Unlock()
	s.mu.Lock()
	h := s.state(user)
	d := h.damaged
	if d == nil {
		s.mu.Unlock()
		return nil, spindle.E(op, spindle.Invalid, user, "the log is not damaged here")
	}
	h.damaged, h.refilling = nil, d
	s.mu.Unlock()
	fail := func(err error) (*dirlog.Head, error) {
		s.mu.Lock()
		h := s.entry(user)
		h.refilling = nil
		if h.t == nil && h.damaged == nil {
			h.damaged = d
		}
		s.mu.Unlock()
		return nil, spindle.E(op, user, err)
	}
	if d.keep >= 0 {
		lg, err := s.store.Open(ctx, user)
		if err != nil {
			return fail(err)
		}
		lg.Scan(ctx, func([]byte) error { return nil }) // Truncate needs a Scan first; the damage is known.
		kept, err := lg.Truncate(ctx, d.keep)
		lg.Close()
		if err != nil {
			return fail(err)
		}
		if kept != "" {
			s.cfg.Logger.Warn("dirlog: damaged directory log cut to the entries that verify, to be refilled from another dir host", "user", string(user), "kept", d.Entry-1, "aside", kept)
		}
	}
	if mk, ok := s.store.(Marker); ok {
		if err := mk.Unmark(ctx, user); err != nil {
			return fail(err)
		}
	}
	if err := s.open(ctx, op, []spindle.UserName{user}); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	l := s.served(user)
	if l == nil {
		s.mu.Unlock()
		return fail(errors.New("what was kept of the log does not verify"))
	}
	if mk, ok := s.store.(Marker); ok {
		s.markLocked(ctx, mk, user, l)
	}
	s.mu.Unlock()
	return s.Head(RefillContext(ctx, user), user)
}

// EndRefill serves user's log again, as far as the refill brought it.
func (s *Server) EndRefill(user spindle.UserName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.logs[user]; h != nil {
		h.refilling = nil
		s.prune(h)
	}
}

// Refilling returns the users whose logs are being refilled, each with
// the damage that started it.
func (s *Server) Refilling() map[spindle.UserName]*Damage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[spindle.UserName]*Damage)
	for u, l := range s.logs {
		if l.refilling != nil {
			out[u] = l.refilling
		}
	}
	return out
}
