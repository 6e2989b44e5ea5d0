package keyraft

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// hclogger adapts a *slog.Logger to the hclog.Logger that raft logs to.
type hclogger struct {
	l    *slog.Logger
	name string
	args []any
}

var _ hclog.Logger = (*hclogger)(nil)

func newHCLogger(l *slog.Logger, name string) *hclogger {
	return &hclogger{l: l, name: name}
}

func slogLevel(level hclog.Level) slog.Level {
	switch level {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

func (h *hclogger) Log(level hclog.Level, msg string, args ...any) {
	lv := slogLevel(level)
	switch {
	case level == hclog.Warn && msg == "heartbeat timeout reached, starting election" && noLeaderYet(args):
		// Every member starts this way, a cluster of one at every start:
		// news only when a leader was known and lost.
		lv = slog.LevelInfo
	case level == hclog.Warn && msg == "appendEntries rejected, sending older logs":
		// How the leader brings a follower that lacks entries up to
		// date: every member that joins or restarts meets it, and it
		// needs nothing from the operator (issue 31). A follower it
		// cannot reach is reported as an error of its own.
		lv = slog.LevelInfo
	}
	ctx := context.Background()
	if !h.l.Enabled(ctx, lv) {
		return
	}
	all := make([]any, 0, 2+len(h.args)+len(args))
	all = append(all, "component", h.name)
	all = append(all, h.args...)
	for _, a := range args {
		all = append(all, hcValue(a))
	}
	h.l.Log(ctx, lv, msg, all...)
}

// noLeaderYet reports whether raft's key-value args say that no leader was
// known (an empty last-leader-id).
func noLeaderYet(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == "last-leader-id" {
			return fmt.Sprint(args[i+1]) == ""
		}
	}
	return false
}

// hcValue renders the value types that hclog formats specially.
func hcValue(a any) any {
	switch v := a.(type) {
	case hclog.Format:
		if len(v) > 0 {
			if f, ok := v[0].(string); ok {
				return fmt.Sprintf(f, v[1:]...)
			}
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return fmt.Sprintf("0x%x", int(v))
	case hclog.Octal:
		return fmt.Sprintf("0%o", int(v))
	case hclog.Binary:
		return fmt.Sprintf("0b%b", int(v))
	case hclog.Quote:
		return fmt.Sprintf("%q", string(v))
	}
	return a
}

func (h *hclogger) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }
func (h *hclogger) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }
func (h *hclogger) Info(msg string, args ...any)  { h.Log(hclog.Info, msg, args...) }
func (h *hclogger) Warn(msg string, args ...any)  { h.Log(hclog.Warn, msg, args...) }
func (h *hclogger) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogger) enabled(level hclog.Level) bool {
	return h.l.Enabled(context.Background(), slogLevel(level))
}

func (h *hclogger) IsTrace() bool { return h.enabled(hclog.Trace) }
func (h *hclogger) IsDebug() bool { return h.enabled(hclog.Debug) }
func (h *hclogger) IsInfo() bool  { return h.enabled(hclog.Info) }
func (h *hclogger) IsWarn() bool  { return h.enabled(hclog.Warn) }
func (h *hclogger) IsError() bool { return h.enabled(hclog.Error) }

func (h *hclogger) ImpliedArgs() []any { return h.args }

func (h *hclogger) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

func (h *hclogger) Name() string { return h.name }

func (h *hclogger) Named(name string) hclog.Logger {
	c := *h
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (h *hclogger) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides what is logged.
func (h *hclogger) SetLevel(hclog.Level) {}

func (h *hclogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(lv) {
			return lv
		}
	}
	return hclog.Error
}

func (h *hclogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(h.StandardWriter(opts), "", 0)
}

func (h *hclogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return lineWriter{h}
}

// lineWriter logs each line written to it at level Info.
type lineWriter struct{ h *hclogger }

func (w lineWriter) Write(p []byte) (int, error) {
	sc := bufio.NewScanner(bytes.NewReader(p))
	for sc.Scan() {
		if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
			w.h.Info(string(line))
		}
	}
	return len(p), nil
}
