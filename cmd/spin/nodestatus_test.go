package main

import (
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/wire"
)

// spin node status lists each log the node hosts, one line each, with
// the node's role, its head and its lag; at the sequencer, where each
// other dir host stands; and the last pull's error on a line of its own.
func TestPrintStatusLogs(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) *spindle.Time {
		t := spindle.Time(now.Add(-ago).UnixNano())
		return &t
	}
	s := &wire.Status{Peer: "12D3KooWself", Started: *at(time.Hour), Logs: []wire.LogStatus{
		{User: "ann@example.com", Role: "sequencer", Seq: 7, Hosts: []wire.LogHost{{Peer: "12D3KooWB", Seq: 5, Asked: at(2 * time.Second)}, {Peer: "12D3KooWC"}}},
		{User: "bob@example.com", Role: "mirror", Seq: 5, Source: "12D3KooWA", SourceSeq: 7, Lag: 2, Pulled: at(3 * time.Second), Err: "node.Mirror: user bob@example.com: entry from dir host 12D3KooWA refused"},
		{User: "carol@example.com", Role: "mirror", Seq: 0, Err: "node.Mirror: user carol@example.com: cannot look up the key record: I/O error"},
		{User: "dan@example.com", Role: "not listed", Seq: -1, Err: "dirlog.Head: user dan@example.com: damaged"},
	}, LogsWaiting: []string{"erin@example.com: entry 1: the key of erin@example.com cannot be learnt yet"},
		LogsDamaged: []string{"directory log of dan@example.com (missing) is damaged at entry 1"}}
	var b strings.Builder
	printStatus(&b, s, now)
	got := b.String()
	for _, want := range []string{
		"logs hosted:        4\n",
		"log:                ann@example.com: sequencer, head 7, lag 0\n",
		"log mirror:         ann@example.com: 12D3KooWB at 5, lag 2, asked 2s ago\n",
		"log mirror:         ann@example.com: 12D3KooWC has not asked for the log since this node started or listed it\n",
		"log:                bob@example.com: mirror, head 5, lag 2 behind 12D3KooWA (at 7 when it last answered), last pulled 3s ago\n",
		"log error:          bob@example.com: last pull failed: node.Mirror: user bob@example.com: entry from dir host 12D3KooWA refused\n",
		"log:                carol@example.com: mirror, head 0, lag unknown (no dir host has answered yet)\n",
		"log error:          carol@example.com: last pull failed: node.Mirror: user carol@example.com: cannot look up the key record: I/O error\n",
		"log:                dan@example.com: not listed (the owner's key record does not name this node), head unknown (the log is damaged)\n",
		"log waiting:        erin@example.com: entry 1: the key of erin@example.com cannot be learnt yet\n",
		"log damaged:        directory log of dan@example.com (missing) is damaged at entry 1\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q; got:\n%s", want, got)
		}
	}

	b.Reset()
	printStatus(&b, &wire.Status{Peer: "12D3KooWself", Started: *at(time.Hour)}, now)
	if !strings.Contains(b.String(), "logs hosted:        0\n") || strings.Contains(b.String(), "\nlog:") {
		t.Errorf("status of a node hosting no log:\n%s", b.String())
	}
}
