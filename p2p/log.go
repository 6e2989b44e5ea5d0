package p2p

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/gologshim"
)

// go-libp2p logs on its own, to stderr, in a format of its own. Spindle
// sends those logs to the logger given to LogTo instead (slog.Default()
// until then), where the program's -log level decides what is shown. Its
// dependency injection's reports of why a host did not start ("OnStart
// hook failed", three lines each time) go at debug level: NewHost returns
// that error, and the caller says it once.

var libp2pLog atomic.Pointer[slog.Logger]

// LogTo sends go-libp2p's logs to l from now on.
func LogTo(l *slog.Logger) {
	libp2pLog.Store(l)
	routeLogs()
}

// routeLogs sets go-libp2p's handler, once, before any of its loggers logs.
var routeLogs = sync.OnceFunc(func() { gologshim.SetDefaultHandler(&libp2pHandler{}) })

// libp2pHandler forwards go-libp2p's records to the handler of the logger
// LogTo was given.
type libp2pHandler struct {
	attrs  []slog.Attr
	demote bool // The logger is p2p-config's: its records go at debug level.
}

func (h *libp2pHandler) next() slog.Handler {
	if l := libp2pLog.Load(); l != nil {
		return l.Handler()
	}
	return slog.Default().Handler()
}

func (h *libp2pHandler) level(l slog.Level) slog.Level {
	if h.demote {
		return min(l, slog.LevelDebug)
	}
	return l
}

func (h *libp2pHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next().Enabled(ctx, h.level(l))
}

func (h *libp2pHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = h.level(r.Level)
	next := h.next()
	if !next.Enabled(ctx, r.Level) {
		return nil
	}
	return next.WithAttrs(h.attrs).Handle(ctx, r)
}

func (h *libp2pHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := &libp2pHandler{attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...), demote: h.demote}
	for _, a := range attrs {
		if a.Key == "logger" && a.Value.String() == "p2p-config" {
			c.demote = true
		}
	}
	return c
}

func (h *libp2pHandler) WithGroup(name string) slog.Handler {
	return &libp2pHandler{attrs: h.attrs, demote: h.demote} // Groups are rare in libp2p; flattened.
}
