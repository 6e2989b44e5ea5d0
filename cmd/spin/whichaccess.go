package main

import (
	"context"
	"fmt"
	"strings"

	"spindle.dev"
)

const whichaccessUsage = `Usage:
    spin whichaccess PATH...

Prints the name of the Access file that governs each PATH: the nearest one
in PATH's directory or above. When there is none, only the owner has any
right, and spin says so. Reading a link reads its target, so for a link,
or a path beneath one, spin names the path read and answers for that.

Options:
    -h, -help   print this text

Example:
    $ spin whichaccess @/docs/report.pdf
    ann@example.com/docs/Access
    $ spin whichaccess @/plans.txt
    ann@example.com/plans.txt: link to bob@example.com/pub/plans.txt: bob@example.com/pub/Access
`

func runWhichaccess(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	return st.eachPath(ctx, flags.Args(), func(c spindle.Client, _ int, name spindle.PathName) error {
		target, via := readThrough(ctx, c, name)
		e, err := c.WhichAccess(ctx, target)
		if err != nil {
			return err
		}
		answer := ""
		if e != nil {
			answer = printName(e.Name)
		} else {
			p, _ := spindle.Parse(target)
			answer = fmt.Sprintf("no Access file: only %s has access", p.User())
		}
		if via != "" {
			answer = via + ": " + answer
		}
		if flags.NArg() > 1 || via != "" || e == nil {
			answer = printName(name) + ": " + answer
		}
		fmt.Fprintln(st.Stdout, answer)
		return nil
	})
}

// readThrough returns the path that reading name reads, following the links
// above it and name itself if it is a link, and how name leads there: ""
// if it is name itself, else "link to TARGET" or "through a link, TARGET".
// A name that cannot be looked up is taken as it is, and the node answers
// for it.
func readThrough(ctx context.Context, c spindle.Client, name spindle.PathName) (spindle.PathName, string) {
	var via []string
	for range maxWhichaccessHops {
		e, err := c.Lookup(ctx, name, false)
		if err != nil {
			break
		}
		if e.Name != name {
			// A link above name was followed to e.
			via = append(via, "through a link, "+printName(e.Name))
			name = e.Name
		}
		if !e.Attr.IsLink() {
			break
		}
		via = append(via, "link to "+printName(e.Link))
		name = e.Link
	}
	return name, strings.Join(via, ": ")
}

// maxWhichaccessHops bounds the links whichaccess follows.
const maxWhichaccessHops = 20
