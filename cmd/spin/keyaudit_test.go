package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// auditClient is a fake client whose key audit finds rep.
type auditClient struct {
	*fakeClient
	rep *client.KeyAuditReport
}

func (c auditClient) KeyAudit(ctx context.Context, name spindle.UserName) (*client.KeyAuditReport, error) {
	return c.rep, nil
}

func (c auditClient) KeyHead(ctx context.Context) (*client.KeyHead, error) {
	return nil, spindle.E(spindle.Invalid, "no head here")
}

// spin key audit prints a line per version and, for one the key before it
// did not sign, says so and exits 1.
func TestKeyAuditReports(t *testing.T) {
	var keys []spindle.PublicKey
	for range 3 {
		k, _, err := pack.Generate(ann)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.PublicKey())
	}
	v := func(n int64, key spindle.PublicKey, dirSeq int64, problem string) client.KeyVersion {
		return client.KeyVersion{User: &spindle.User{Name: ann, Version: n, PublicKey: key, SignedBy: ann, DirSeq: dirSeq}, Index: 2 * n, Problem: problem}
	}
	for _, tc := range []struct {
		name string
		rep  *client.KeyAuditReport
		code int
		out  []string
		err  string
	}{
		{"honest", &client.KeyAuditReport{User: ann, Versions: []client.KeyVersion{v(1, keys[0], 0, ""), v(2, keys[1], 7, "")}}, exitOK,
			[]string{
				"ann@example.com: 2 versions, each proved in the key log",
				"version 1 at log index 2: key " + keyID(keys[0]) + " signed by ann@example.com: ok",
				"version 2 at log index 4: key " + keyID(keys[1]) + " signed by ann@example.com (new key; the old one signs the tree's entries up to 7): ok",
			}, ""},
		{"forged", &client.KeyAuditReport{User: ann, Versions: []client.KeyVersion{v(1, keys[0], 0, ""), v(2, keys[1], 7, ""), v(3, keys[2], 9, "not signed by the key of version 2")}}, exitFailure,
			[]string{
				"ann@example.com: 3 versions, each proved in the key log",
				"version 3 at log index 6: key " + keyID(keys[2]) + " signed by ann@example.com (new key; the old one signs the tree's entries up to 9): NOT OK: not signed by the key of version 2",
			}, "spin: key audit: ann@example.com: 1 of 3 versions not made with the key before it: the key cluster accepted changes the owner did not sign\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			st := &State{
				Stdout: &out, Stderr: &errb, Home: t.TempDir(), Log: slog.New(slog.DiscardHandler),
				Config: &Config{Username: ann},
				NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
					return auditClient{newFakeClient(ann), tc.rep}, nil
				},
			}
			if code := run([]string{"key", "audit"}, st); code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, &errb)
			}
			for _, l := range tc.out {
				if !strings.Contains(out.String(), l+"\n") {
					t.Errorf("stdout lacks %q:\n%s", l, &out)
				}
			}
			if errb.String() != tc.err {
				t.Errorf("stderr:\n%s\nwant:\n%s", &errb, tc.err)
			}
		})
	}
}
