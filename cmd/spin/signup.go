package main

import (
	"context"
	"errors"
	"fmt"

	"spindle.dev"
)

const signupUsage = `Usage:
    spin signup [-dir ADDR,...]

Registers you with the key cluster: your name, your public key, and the
node in your config as the host of your directory, and creates your root
directory there. Repeating it is harmless. On success it prints your key
record.

A node hosts only the users its operator admits (spin node -writers). If
yours does not, your key is registered all the same and signup says so and
exits 1: have the operator add you and restart the node, or set node: in
your config to a node that admits you, and run spin signup again.

With -dir, your directory is held by several nodes, in the order given:
the first (the node in your config, put first if the list leaves it out)
sequences your writes, the others mirror it and serve reads while it is
down (see spin user -dirs to change them later).

Options:
    -dir ADDR,...  the nodes that hold your directory, first the sequencer
    -h, -help      print this text

Example:
    $ spin signup
    name:      ann@example.com
    key:       p256:B...
    dir host:  12D3KooW...
`

func runSignup(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	dirs := flags.String("dir", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("want no arguments, got %d", flags.NArg())
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
	if err := c.Signup(ctx); err != nil {
		st.fail(string(c.User()), err)
		if _, lerr := c.LookupUser(ctx, c.User()); lerr == nil && errors.Is(err, spindle.Permission) && st.Config != nil {
			// The key is registered; only a node to host the tree is missing.
			file, _ := st.configFile()
			st.hint("ask the operator of node %s to add %s to its -writers and restart it; then run: spin signup", st.Config.Node, c.User())
			st.hint("or sign up with a node that admits you: set node: to its address in %s; then run: spin signup", file)
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
