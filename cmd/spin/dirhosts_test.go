package main

import (
	"context"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
)

// SetDirHosts makes the fake client a dirHostSetter.
func (c *fakeClient) SetDirHosts(ctx context.Context, hosts []spindle.PeerAddr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := *c.users[c.me]
	u.DirHosts = append([]spindle.PeerAddr(nil), hosts...)
	c.users[c.me] = &u
	return nil
}

// SetDirQuorum makes the fake client a dirQuorumSetter.
func (c *fakeClient) SetDirQuorum(ctx context.Context, quorum int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := *c.users[c.me]
	if quorum >= len(u.DirHosts) && quorum > 0 {
		return spindle.E(spindle.Invalid, "dir quorum too large")
	}
	u.DirQuorum = quorum
	c.users[c.me] = &u
	return nil
}

// spin user -quorum sets the dir quorum and prints it; one the dir hosts
// cannot make fails with a hint to name more.
func TestUserQuorum(t *testing.T) {
	e := newEnv(t)
	a, b := testPeerID(t), testPeerID(t)
	got := e.ok("user", "-dirs", a+","+b, "-quorum", "1")
	if !strings.HasSuffix(got, "quorum:    1\n") {
		t.Errorf("user -quorum 1 printed\n%s", got)
	}
	if _, errs, code := e.run("user", "-quorum", "2"); code != exitFailure || !strings.Contains(errs, "hint: name more dir hosts") {
		t.Errorf("user -quorum 2 with two dir hosts: exit %d, stderr:\n%s", code, errs)
	}
	e.failsWith("want no NAME", "user", "-quorum", "1", "bob@example.com")
	if got := e.ok("user", "-quorum", "0"); strings.Contains(got, "quorum:") {
		t.Errorf("user -quorum 0 printed\n%s", got)
	}
}

func testPeerID(t *testing.T) string {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// spin user -dirs sets the dir hosts in order and prints the record; bad
// lists are usage errors naming what is wrong.
func TestUserDirs(t *testing.T) {
	e := newEnv(t)
	a, b := testPeerID(t), testPeerID(t)
	got := e.ok("user", "-dirs", a+","+b)
	if want := "dir host:  " + a + "\ndir host:  " + b + "\n"; !strings.HasSuffix(got, want) {
		t.Errorf("user -dirs printed\n%s\nwant it to end\n%s", got, want)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"user", "-dirs", a + "," + a}, "named twice"},
		{[]string{"user", "-dirs", "nonsense"}, `dir host "nonsense"`},
		{[]string{"user", "-dirs", a, "bob@example.com"}, "want no NAME"},
		{[]string{"signup", "-dir", b + "," + a}, "must come first"},
	} {
		e.failsWith(tc.msg, tc.args...)
	}

	// signup -dir puts the node signed up with first.
	e.client.users[e.client.me].DirHosts = []spindle.PeerAddr{spindle.PeerAddr(a)}
	got = e.ok("signup", "-dir", b)
	if want := "dir host:  " + a + "\ndir host:  " + b + "\n"; !strings.HasSuffix(got, want) {
		t.Errorf("signup -dir printed\n%s\nwant it to end\n%s", got, want)
	}
}

// failsWith runs spin and checks that it exits with a usage error whose
// message holds msg.
func (e *env) failsWith(msg string, args ...string) {
	e.t.Helper()
	_, errs, code := e.run(args...)
	if code != exitUsage || !strings.Contains(errs, msg) {
		e.t.Errorf("spin %s: exit %d, stderr:\n%s\nwant exit %d and %q", strings.Join(args, " "), code, errs, exitUsage, msg)
	}
}
