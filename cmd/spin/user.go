package main

import (
	"context"
	"fmt"
	"io"

	"spindle.dev"
)

const userUsage = `Usage:
    spin user [NAME]

Prints the key record of the user NAME, or your own: the public key and the
nodes that host the user's directory, the first of which sequences it.

Options:
    -h, -help   print this text

Example:
    $ spin user bob@example.com
    name:      bob@example.com
    key:       p256:B...
    dir host:  12D3KooW...
`

func runUser(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 1 {
		return usagef("want at most one NAME, %s", gotArgs(flags.NArg()))
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	name := c.User()
	if flags.NArg() == 1 {
		name, err = spindle.CleanUser(spindle.UserName(flags.Arg(0)))
		if err != nil {
			_, msg := describe(err)
			st.errorf("%s: not a user name: %s", flags.Arg(0), msg)
			return errFailed
		}
	}
	u, err := c.LookupUser(ctx, name)
	if err != nil {
		return st.fail(string(name), err)
	}
	printUser(st.Stdout, u)
	return nil
}

// printUser prints a key record.
func printUser(w io.Writer, u *spindle.User) {
	fmt.Fprintf(w, "name:      %s\n", printName(u.Name))
	fmt.Fprintf(w, "key:       %s\n", printName(u.PublicKey))
	if len(u.DirHosts) == 0 {
		fmt.Fprintf(w, "dir host:  none\n")
	}
	for _, h := range u.DirHosts {
		fmt.Fprintf(w, "dir host:  %s\n", printName(h))
	}
}
