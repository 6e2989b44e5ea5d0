package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"spindle.dev"
)

// Under the open policy *@domain grants to whoever registers a name in
// the domain: putting an Access file that uses one, directly or through a
// group, warns with how many users it covers now, and Share names them.
func TestWildcardWarning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	ann := dialAs(t, n, "ann@example.com")
	dialAs(t, n, "bob@example.com")
	dialAs(t, n, "mallory@evil.example")

	wantWarning := func(name spindle.PathName, text, want string) {
		t.Helper()
		_, err := ann.Put(ctx, name, strings.NewReader(text), 0, nil)
		var w *spindle.Warning
		if !errors.As(err, &w) {
			t.Fatalf("put %s: %v, want a warning", name, err)
		}
		if !slices.ContainsFunc(w.Problems, func(p error) bool { return strings.Contains(p.Error(), want) }) {
			t.Fatalf("put %s: warning %v does not say %q", name, w, want)
		}
	}
	wantWarning("ann@example.com/Access", "*: ann@example.com\nread: *@example.com\n", "*@example.com covers 2 registered users (ann@example.com, bob@example.com)")
	for _, d := range []spindle.PathName{"ann@example.com/Group", "ann@example.com/docs", "ann@example.com/nobody", "ann@example.com/plain"} {
		if _, err := ann.MakeDirectory(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ann.Put(ctx, "ann@example.com/Group/friends", strings.NewReader("*@evil.example\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	wantWarning("ann@example.com/docs/Access", "*: ann@example.com\nread: friends\n", "*@evil.example covers 1 registered user (mallory@evil.example)")
	wantWarning("ann@example.com/nobody/Access", "*: ann@example.com\nread: *@empty.example\n", "*@empty.example covers no registered users yet")

	// No wildcard, no warning.
	if _, err := ann.Put(ctx, "ann@example.com/plain/Access", strings.NewReader("*: ann@example.com\nread: bob@example.com\n"), 0, nil); err != nil {
		t.Fatalf("put without a wildcard: %v", err)
	}

	// Share lists the users each wildcard covers.
	if _, err := ann.Put(ctx, "ann@example.com/f", strings.NewReader("x"), 0, nil); err != nil {
		t.Fatal(err)
	}
	reps, err := ann.Share(ctx, "ann@example.com/f", false, false)
	if err != nil || len(reps) != 1 {
		t.Fatalf("share: %v, %d reports", err, len(reps))
	}
	if got := reps[0].Domains["*@example.com"]; !slices.Equal(got, []spindle.UserName{"ann@example.com", "bob@example.com"}) {
		t.Errorf("share lists *@example.com as %v", got)
	}
}
