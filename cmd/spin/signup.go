package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// decodeRequest decodes a record printed by spin signup -request.
func decodeRequest(s string) (*spindle.User, error) {
	data, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Errorf("bad signup request: %v", err))
	}
	u, err := keylog.DecodeRecord(data)
	if err != nil {
		return nil, err
	}
	if u.Version != 1 || u.SignedBy != u.Name {
		return nil, spindle.E(spindle.Invalid, u.Name, "a signup request is a user's first record, signed by the user")
	}
	if err := spindle.Verify(u.PublicKey, keylog.SigningDigest(u), u.Signature); err != nil {
		return nil, spindle.E(u.Name, spindle.Invalid, fmt.Errorf("signup request not signed by its key: %w", err))
	}
	return u, nil
}

const signupUsage = `Usage:
    spin signup [-dir ADDR,...] [-request | -grant GRANT]

Registers you with the key cluster: your name, your public key, and the
node in your config as the host of your directory, and creates your root
directory there. Repeating it is harmless. On success it prints your key
record.

A node hosts only the users its operator admits (spin node -writers). If
yours does not, your key is registered all the same and signup says so and
exits 1: have the operator add you and restart the node, or change to a
node that admits you (spin init -node ADDR NAME), and run spin signup
again.

With -dir, your directory is held by several nodes, in the order given:
the first (the node in your config, put first if the list leaves it out)
sequences your writes, the others mirror it and serve reads while it is
down (see spin user -dirs to change them later).

If the key cluster runs the domain policy (spin key policy), a new name
needs the countersignature of its domain's admin, and under the invite
policy that of an operator: spin signup -request prints your signed record
and keeps it next to your config; the admin or operator runs spin key
grant with it and gives you the grant it prints; spin signup -grant GRANT
then registers the kept record with it.

Options:
    -dir ADDR,...  the nodes that hold your directory, first the sequencer
    -request       print your signed first record for the domain admin
                   to grant, and keep it
    -grant GRANT   register the kept record with the domain admin's grant
    -h, -help      print this text

Example:
    $ spin signup
    name:      ann@example.com
    key:       p256:B...
    dir host:  12D3KooW...
`

// A granter is a client that signs up under the domain policy.
type granter interface {
	SignupRequest() (*spindle.User, error)
	SignupGranted(ctx context.Context, first *spindle.User, grant spindle.Signature) error
}

// requestFile returns the file that keeps the record of spin signup -request.
func (st *State) requestFile() (string, error) {
	file, err := st.configFile()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(file), "signup.request"), nil
}

func runSignup(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	dirs := flags.String("dir", "", "")
	request := flags.Bool("request", false, "")
	grant := flags.String("grant", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("want no arguments, got %d", flags.NArg())
	}
	if *request && *grant != "" {
		return usagef("-request and -grant are two steps: give one")
	}
	var hosts []spindle.PeerAddr
	if *dirs != "" {
		var err error
		if hosts, err = parseDirHosts(*dirs); err != nil {
			return err
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	signup := c.Signup
	if *request || *grant != "" {
		g, ok := c.(granter)
		if !ok {
			return st.fail("", spindle.E(spindle.Invalid, "this client cannot sign up under the domain policy"))
		}
		file, err := st.requestFile()
		if err != nil {
			return st.fail("", err)
		}
		if *request {
			u, err := g.SignupRequest()
			if err != nil {
				return st.fail(string(c.User()), err)
			}
			req := base64.RawURLEncoding.EncodeToString(keylog.EncodeRecord(u))
			if err := spindle.ReplaceFile(file, []byte(req+"\n"), 0o600, true); err != nil {
				return st.fail("", err)
			}
			fmt.Fprintf(st.Stdout, "%s\n", req)
			st.hint("give this to the admin of your domain, who runs: spin key grant REQUEST; then run: spin signup -grant GRANT")
			return nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			st.fail("", spindle.E(spindle.IO, err))
			st.hint("run spin signup -request first")
			return errFailed
		}
		first, err := decodeRequest(string(data))
		if err != nil {
			return st.fail("", fmt.Errorf("%s: %w", file, err))
		}
		sig, err := base64.RawURLEncoding.DecodeString(strings.TrimSpace(*grant))
		if err != nil || len(sig) == 0 {
			return usagef("bad grant %q: want what spin key grant printed", *grant)
		}
		signup = func(ctx context.Context) error { return g.SignupGranted(ctx, first, sig) }
	}
	if err := signup(ctx); err != nil {
		st.fail(string(c.User()), err)
		if _, lerr := c.LookupUser(ctx, c.User()); lerr == nil && errors.Is(err, spindle.Permission) && st.Config != nil {
			// The key is registered; only a node to host the tree is
			// missing. The hint above says how to get one.
			st.hint("then run spin signup again: your key stays registered")
		}
		return errFailed
	}
	if len(hosts) > 0 {
		// The node signed up with holds the root: it sequences.
		if cur, err := c.LookupUser(ctx, c.User()); err == nil && len(cur.DirHosts) > 0 {
			first := cur.DirHosts[0]
			at := -1
			for i, h := range hosts {
				if samePeer(h, first) {
					at = i
				}
			}
			switch {
			case at < 0:
				hosts = append([]spindle.PeerAddr{first}, hosts...)
			case at > 0:
				return usagef("-dir names your node %s in place %d: it holds your root and must come first", first, at+1)
			}
		}
		if err := setDirHosts(ctx, st, c, hosts); err != nil {
			return err
		}
	}
	u, err := c.LookupUser(ctx, c.User())
	if err != nil {
		fmt.Fprintf(st.Stdout, "signed up %s\n", c.User())
		return st.fail(string(c.User()), err)
	}
	printUser(st.Stdout, u)
	return nil
}
