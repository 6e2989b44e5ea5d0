package keyraft

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The election every member holds when it starts is no warning; one after
// a known leader was lost is.
func TestHCLogStartupElection(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), "raft")
	const msg = "heartbeat timeout reached, starting election"
	h.Log(hclog.Warn, msg, "last-leader-addr", "", "last-leader-id", "")
	if buf.Len() != 0 {
		t.Errorf("the start-up election printed at warn level: %s", buf.String())
	}
	h.Log(hclog.Warn, msg, "last-leader-addr", "12D3KooWLeader", "last-leader-id", "12D3KooWLeader")
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "12D3KooWLeader") {
		t.Errorf("an election after losing a leader was not a warning: %q", buf.String())
	}
}

// The leader sending older entries to a member that joined or restarted
// is how Raft catches it up, not a warning to every operator.
func TestHCLogCatchUpIsNoWarning(t *testing.T) {
	var buf bytes.Buffer
	h := newHCLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn})), "raft")
	h.Log(hclog.Warn, "appendEntries rejected, sending older logs", "peer", "12D3KooWJoiner", "next", 1)
	if buf.Len() != 0 {
		t.Errorf("catching up a member printed at warn level: %s", buf.String())
	}
	h.Log(hclog.Error, "failed to appendEntries to", "peer", "12D3KooWGone")
	if !strings.Contains(buf.String(), "level=ERROR") {
		t.Errorf("a failed append was not reported: %q", buf.String())
	}
}
