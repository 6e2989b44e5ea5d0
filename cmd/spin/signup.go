package main

import (
	"context"
	"fmt"
)

const signupUsage = `Usage:
    spin signup

Registers you with the key cluster: your name, your public key, and the
node in your config as the host of your directory. Repeating it is
harmless. On success it prints your key record.

Options:
    -h, -help   print this text

Example:
    $ spin signup
    name:      ann@example.com
    key:       p256:BHq0...
    dir host:  /ip4/127.0.0.1/tcp/4242/p2p/12D3KooW...
`

func runSignup(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("want no arguments, got %d", flags.NArg())
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	if err := c.Signup(ctx); err != nil {
		return st.fail(string(c.User()), err)
	}
	u, err := c.LookupUser(ctx, c.User())
	if err != nil {
		fmt.Fprintf(st.Stdout, "signed up %s\n", c.User())
		return st.fail(string(c.User()), err)
	}
	printUser(st.Stdout, u)
	return nil
}
