package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"spindle.dev"
)

// errLibp2pDial is a cause of many lines, as libp2p's swarm prints a
// failed dial: one line per address tried.
var errLibp2pDial = errors.New("failed to dial 12D3KooWseq: all dials failed\n  * [/ip4/127.0.0.1/tcp/4001] dial backoff\n  * [/ip4/192.0.2.1/tcp/4001] connection refused")

// A diagnostic keeps the words of every error in the chain, those of a
// wrapper around a *spindle.Error among them, and a cause of many lines
// comes out on one, without an escaped newline.
func TestErrorCausesOneLine(t *testing.T) {
	forward := spindle.E(spindle.Op("node.Forward"), spindle.UserName("ann@example.com"), spindle.IO,
		fmt.Errorf("dir host 12D3KooWseq did not answer through node 12D3KooWme: %w", spindle.E(spindle.IO, errLibp2pDial)))
	for _, tc := range []struct {
		err  error
		want string
	}{
		{spindle.E(spindle.Op("client.Put"), spindle.PathName("ann@example.com/x"), spindle.IO, fmt.Errorf("the sequencer cannot be reached: %w", forward)),
			"the sequencer cannot be reached: dir host 12D3KooWseq did not answer through node 12D3KooWme: I/O error: failed to dial 12D3KooWseq: all dials failed; [/ip4/127.0.0.1/tcp/4001] dial backoff; [/ip4/192.0.2.1/tcp/4001] connection refused"},
		{spindle.E(spindle.Op("client.Glob"), spindle.PathName("ann@example.com/*"), spindle.IO, fmt.Errorf("none of the 2 dir hosts answered: %w", errors.Join(errors.New("a: refused"), errors.New("b: refused")))),
			"I/O error: none of the 2 dir hosts answered: a: refused; b: refused"},
		{fmt.Errorf("saved %w (evidence in f)", spindle.E(spindle.Integrity, "fork at 3")), "saved integrity check failed: fork at 3 (evidence in f)"},
	} {
		_, msg := describe(tc.err)
		if msg != tc.want {
			t.Errorf("describe(%q)\n = %q\nwant %q", tc.err, msg, tc.want)
		}
	}

	e := newEnv(t)
	c := &errClient{fakeClient: e.client, err: spindle.E(spindle.Op("client.Put"), spindle.PathName("ann@example.com/x"), spindle.IO, forward)}
	errs, code := e.runWith(c, "put", e.file("x", "x"), "@/x")
	if code != exitFailure || strings.Contains(errs, `\n`) || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "all dials failed; [/ip4/127.0.0.1/tcp/4001] dial backoff") {
		t.Errorf("put failing with a dial error of many lines: exit %d, stderr:\n%s", code, errs)
	}
}

// An errClient is the fake whose Puts fail with err.
type errClient struct {
	*fakeClient
	err error
}

func (c *errClient) Put(ctx context.Context, name spindle.PathName, r io.Reader, packing spindle.Packing, progress func(int64)) (*spindle.DirEntry, error) {
	return nil, c.err
}
