package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/dirlog"
)

// dirAuditClient is a fake client whose tree audit and head checks find
// what the test sets.
type dirAuditClient struct {
	*fakeClient
	heads    *client.HeadsReport
	headsErr error
	audited  *bool
}

func (c dirAuditClient) Audit(ctx context.Context) (*client.AuditReport, error) {
	*c.audited = true
	return &client.AuditReport{Head: &dirlog.Head{User: ann, Seq: 3, Host: "12D3host"}, Writers: map[spindle.UserName]int{ann: 3}}, nil
}

func (c dirAuditClient) CheckHeads(ctx context.Context, owner spindle.UserName) (*client.HeadsReport, error) {
	return c.heads, c.headsErr
}

func (c dirAuditClient) VerifyEvidence(ctx context.Context, e *client.Evidence) (string, error) {
	return "checked " + e.Kind + " of " + string(e.User), nil
}

func TestAuditCommand(t *testing.T) {
	bob := spindle.UserName("bob@example.com")
	dir := t.TempDir()
	good := filepath.Join(dir, "fork")
	h := &dirlog.Head{User: bob, Seq: 4}
	os.WriteFile(good, (&client.Evidence{Kind: client.EvidenceFork, User: bob, Heads: []*dirlog.Head{h, h}}).Marshal(), 0o600)
	junk := filepath.Join(dir, "junk")
	os.WriteFile(junk, []byte("hello\n"), 0o600)
	served := &dirlog.Head{User: bob, Seq: 9, Host: "12D3served"}
	pub := &dirlog.Head{User: bob, Seq: 9, Host: "12D3pub"}
	for _, tc := range []struct {
		name    string
		args    []string
		heads   *client.HeadsReport
		err     error
		code    int
		out     string
		stderr  string
		audited bool
	}{
		{"other user", []string{"audit", string(bob)}, &client.HeadsReport{User: bob, Served: served, Published: pub}, nil, exitOK,
			"bob@example.com: head at sequence 9, signed by 12D3served", "", false},
		{"own tree", []string{"audit"}, &client.HeadsReport{User: ann}, nil, exitOK,
			"published head: none found in the DHT", "", true},
		{"rollback", []string{"audit", string(bob)}, nil, spindle.E(spindle.Integrity, bob, "rollback: served 3, published 9"), exitFailure,
			"", "rollback: served 3, published 9", false},
		{"evidence", []string{"audit", "-evidence", good}, nil, nil, exitOK, "checked fork of bob@example.com", "", false},
		{"junk evidence", []string{"audit", "-evidence", junk}, nil, nil, exitFailure, "", "not a Spindle evidence file", false},
		{"evidence and user", []string{"audit", "-evidence", good, string(bob)}, nil, nil, exitUsage, "", "at most one user", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			audited := false
			st := &State{
				Stdout: &out, Stderr: &errb, Home: t.TempDir(), Log: slog.New(slog.DiscardHandler),
				Config: &Config{Username: ann},
				NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
					return dirAuditClient{newFakeClient(ann), tc.heads, tc.err, &audited}, nil
				},
			}
			if code := run(tc.args, st); code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, &errb)
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, &out)
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, &errb)
			}
			if audited != tc.audited {
				t.Errorf("log audited: %v, want %v", audited, tc.audited)
			}
		})
	}
}

// gossipAuditClient is a fake client whose key-log gossip finds what the
// test sets.
type gossipAuditClient struct {
	dirAuditClient
	rep *client.GossipReport
	err error
}

func (c gossipAuditClient) GossipKeyHead(ctx context.Context) (*client.GossipReport, error) {
	return c.rep, c.err
}

// spin audit reports the key log's gossip: the heads that agree, and a
// fork found as a failure that names the evidence.
func TestAuditGossipsKeyHead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rep    *client.GossipReport
		err    error
		code   int
		out    string
		stderr string
	}{
		{"agree", &client.GossipReport{Size: 7, Agree: 2}, nil, exitOK, "key log: 7 records; heads of that size published: 2 agree, 0 not valid (ignored)", ""},
		{"fork", &client.GossipReport{Size: 7}, spindle.E(spindle.Integrity, "transparency log rewritten (evidence saved in key-fork-cluster-7-ab)"), exitFailure, "", "evidence saved in key-fork-cluster-7-ab"},
		{"no dht", nil, spindle.E(spindle.IO, "node unreachable"), exitOK, "key log: not compared with others: ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			audited := false
			st := &State{
				Stdout: &out, Stderr: &errb, Home: t.TempDir(), Log: slog.New(slog.DiscardHandler),
				Config: &Config{Username: ann},
				NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
					return gossipAuditClient{dirAuditClient{newFakeClient(ann), &client.HeadsReport{User: ann}, nil, &audited}, tc.rep, tc.err}, nil
				},
			}
			if code := run([]string{"audit"}, st); code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, &errb)
			}
			if !strings.Contains(out.String(), tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, &out)
			}
			if !strings.Contains(errb.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, &errb)
			}
		})
	}
}
