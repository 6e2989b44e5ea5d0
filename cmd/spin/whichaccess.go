package main

import (
	"context"
	"fmt"

	"spindle.dev"
)

const whichaccessUsage = `Usage:
    spin whichaccess PATH...

Prints the name of the Access file that governs each PATH: the nearest one
in PATH's directory or above. When there is none, only the owner has any
right, and spin says so.

Options:
    -h, -help   print this text

Example:
    $ spin whichaccess @/docs/report.pdf
    ann@example.com/docs/Access
`

func runWhichaccess(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() == 0 {
		return usagef("want at least one PATH")
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	failed := false
	for _, arg := range flags.Args() {
		name, err := st.spinPath(c, arg)
		if err != nil {
			failed = true
			continue
		}
		e, err := c.WhichAccess(ctx, name)
		if err != nil {
			st.fail(string(name), err)
			failed = true
			continue
		}
		if e == nil {
			p, _ := spindle.Parse(name)
			fmt.Fprintf(st.Stdout, "%s: no Access file: only %s has access\n", name, p.User())
			continue
		}
		if flags.NArg() > 1 {
			fmt.Fprintf(st.Stdout, "%s: %s\n", name, e.Name)
		} else {
			fmt.Fprintln(st.Stdout, e.Name)
		}
	}
	if failed {
		return errFailed
	}
	return nil
}
