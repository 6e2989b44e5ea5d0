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
	return st.eachPath(ctx, flags.Args(), func(c spindle.Client, _ int, name spindle.PathName) error {
		e, err := c.WhichAccess(ctx, name)
		if err != nil {
			return err
		}
		switch {
		case e == nil:
			p, _ := spindle.Parse(name)
			fmt.Fprintf(st.Stdout, "%s: no Access file: only %s has access\n", printName(name), p.User())
		case flags.NArg() > 1:
			fmt.Fprintf(st.Stdout, "%s: %s\n", printName(name), printName(e.Name))
		default:
			fmt.Fprintln(st.Stdout, printName(e.Name))
		}
		return nil
	})
}
