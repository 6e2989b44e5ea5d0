package main

import (
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/dirlog"
)

// A write while the sequencer is down names it and the mirrors that hold
// the newest head, and its hint gives the command that moves the
// sequencing, to the owner, or says whom to wait for, to anyone else.
func TestSequencerDownHints(t *testing.T) {
	const seq, mirror, lagging = "12D3KooWseq", "12D3KooWmirror", "12D3KooWlagging"
	down := func(owner spindle.UserName, caughtUp bool) error {
		newest := &dirlog.Head{User: owner, Seq: 7}
		m := []client.HostHead{{Host: lagging, Head: &dirlog.Head{User: owner, Seq: 5}}}
		if caughtUp {
			m = append(m, client.HostHead{Host: mirror, Head: newest, CaughtUp: true})
		}
		return spindle.E(spindle.Op("client.Put"), spindle.PathName(owner+"/x"), spindle.IO, spindle.E(owner, spindle.IO,
			&client.SequencerDownError{Owner: owner, Sequencer: seq, Mirrors: m, Newest: newest, Err: spindle.E(spindle.IO, errLibp2pDial)}))
	}
	for _, tc := range []struct {
		name     string
		err      error
		want     []string
		wantNot  []string
		toOthers bool
	}{
		{"own tree, a mirror caught up", down(ann, true),
			[]string{"dir host " + seq + " (the first its key record names), cannot be reached", "dir host " + mirror + " holds the newest head this client has seen (sequence 7; dir host " + lagging + " is behind at sequence 5)", "spin: hint: to make dir host " + mirror + " the sequencer of your tree, run: spin user -failover"},
			nil, false},
		{"own tree, no mirror caught up", down(ann, false),
			[]string{"no mirror holds the newest head this client has seen (sequence 7; dir host " + lagging + " is behind at sequence 5)", "start dir host " + seq + " again", "lose those entries: spin user -dirs " + lagging + "," + seq},
			[]string{"run: spin"}, false},
		{"another's tree", down(bob, true),
			[]string{"the sequencer of bob@example.com's tree", "until bob@example.com moves the sequencing to dir host " + mirror + " with: spin user -failover"},
			[]string{"run: spin"}, true},
	} {
		e := newEnv(t)
		c := &errClient{fakeClient: e.client, err: tc.err}
		errs, code := e.runWith(c, "put", e.file("x", "x"), "@/x")
		if code != exitFailure || strings.Contains(errs, `\n`) {
			t.Errorf("%s: exit %d, stderr:\n%s", tc.name, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, errs)
			}
		}
		for _, w := range tc.wantNot {
			if strings.Contains(errs, w) {
				t.Errorf("%s: stderr has %q:\n%s", tc.name, w, errs)
			}
		}
	}
}

// spin user -failover takes no NAME and no -dirs, and a client that cannot
// fail over says so.
func TestUserFailoverUsage(t *testing.T) {
	e := newEnv(t)
	e.failsWith("want no -dirs and no NAME", "user", "-failover", "bob@example.com")
	e.failsWith("want no -dirs and no NAME", "user", "-failover", "-dirs", testPeerID(t))
	if _, errs, code := e.run("user", "-failover"); code != exitFailure || !strings.Contains(errs, "cannot change dir hosts") {
		t.Errorf("user -failover with a client that cannot: exit %d, stderr:\n%s", code, errs)
	}
}
