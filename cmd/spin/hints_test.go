package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
)

// The client's errors say what is so; spin adds what to do about it, for
// the causes a program can tell apart (client.ErrNoDirHost,
// client.ReshareError, client.ErrOpenWildcard).
func TestClientCauseHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		want []string
	}{
		{"own tree hosted nowhere",
			spindle.E(spindle.Op("client.Put"), spindle.PathName(ann+"/x"), spindle.NotExist, client.ErrNoDirHost), exitFailure,
			[]string{"key record names no dir host", "spin: hint: no node hosts your tree: run spin signup"}},
		{"another's tree hosted nowhere",
			spindle.E(spindle.Op("client.Put"), spindle.PathName(bob+"/x"), spindle.NotExist, client.ErrNoDirHost), exitFailure,
			[]string{"spin: hint: no node hosts the tree of " + string(bob) + ": they must run spin signup"}},
		{"a node that does not host the tree written to",
			spindle.E(spindle.Op("client.Put"), spindle.PathName(bob+"/x"), spindle.E(wire.NotHostedOp, spindle.Permission, "this node does not host the tree of "+string(bob))), exitFailure,
			[]string{"spin: hint: the node you reach does not host the tree of " + string(bob) + "; its operator admits writers with spin node -writers"}},
		{"signed up where not admitted",
			spindle.E(spindle.Op("client.Signup"), ann, spindle.Permission, fmt.Errorf("your key is registered, but this node does not host your tree: %w", client.ErrNotAdmitted)), exitFailure,
			[]string{"its operator has not admitted you as a writer", "spin: hint: ask the node's operator to admit you (spin node -writers " + string(ann) + "), or sign up through another node: spin"}},
		{"keys of a file not re-wrapped",
			&spindle.Warning{Problems: []error{spindle.E(spindle.PathName(ann+"/d/f"), &client.ReshareError{Path: spindle.PathName(ann + "/d/f"), Err: spindle.E(spindle.IO, errors.New("disk full"))})}}, exitOK,
			[]string{"warning: ", "keys not re-wrapped", "spin: hint: to finish, run: spin share -fix " + string(ann) + "/d/f\n"}},
		{"re-sharing of a tree stopped",
			&spindle.Warning{Problems: []error{spindle.E(spindle.PathName(ann+"/d"), &client.ReshareError{Path: spindle.PathName(ann + "/d"), Tree: true, Err: spindle.E(spindle.IO, errors.New("node gone"))})}}, exitOK,
			[]string{"re-sharing stopped", "spin: hint: to finish, run: spin share -fix -R " + string(ann) + "/d\n"}},
		{"a wildcard under the open policy",
			&spindle.Warning{Problems: []error{spindle.E(spindle.PathName(ann+"/d/Access"), errors.Join(client.ErrOpenWildcard))}}, exitOK,
			[]string{"open policy", "spin: hint: spin share " + string(ann) + "/d lists whom it names"}},
	} {
		e := newEnv(t)
		c := &errClient{fakeClient: e.client, err: tc.err}
		errs, code := e.runWith(c, "put", e.file("x", "x"), "@/x")
		if tc.code == exitOK && code != exitOK || tc.code != exitOK && code == exitOK {
			t.Errorf("%s: exit %d, stderr:\n%s", tc.name, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%s: stderr lacks %q:\n%s", tc.name, w, errs)
			}
		}
	}
}
