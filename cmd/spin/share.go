package main

import (
	"context"
	"fmt"
	"strings"

	"spindle.dev"
)

const shareUsage = `Usage:
    spin share [-fix] [-R] PATH...

Checks, for each file at PATH, that the users the Access files grant read
are exactly the users holding a wrapped key for it, and prints one line per
file: "ok", or who is missing a key and who holds a key without the right.
With -fix, wraps keys for the missing readers and removes the extra ones;
only the owner can do that. Keys are re-wrapped automatically when an
Access or Group file is put, so -fix is needed only after a key rotation or
a change made elsewhere.

Options:
    -fix             repair the wrapped keys
    -R, -recursive   check every file below the directories given
    -h, -help        print this text

Example:
    $ spin share -R @/docs
    $ spin share -fix -R @/docs
`

func runShare(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	fix := flags.Bool("fix", false, "")
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	unfixed := 0
	err := st.eachPath(ctx, flags.Args(), func(c spindle.Client, _ int, name spindle.PathName) error {
		reports, err := c.Share(ctx, name, *recursive, *fix)
		if err != nil {
			return err
		}
		for _, r := range reports {
			fmt.Fprintln(st.Stdout, shareLine(r))
			if !r.Fixed && (len(r.Missing) > 0 || len(r.Extra) > 0 || len(r.Unknowns) > 0) {
				unfixed++
			}
		}
		return nil
	})
	if unfixed > 0 && !*fix {
		st.hint("%d files need new keys; to repair them, run: spin share -fix%s %s", unfixed, map[bool]string{true: " -R", false: ""}[*recursive], strings.Join(flags.Args(), " "))
	}
	return err
}

// shareLine describes one share report on one line.
func shareLine(r spindle.ShareReport) string {
	var parts []string
	if len(r.Missing) > 0 {
		verb := "missing keys"
		if r.Fixed {
			verb = "added keys"
		}
		parts = append(parts, verb+": "+joinUsers(r.Missing))
	}
	if len(r.Extra) > 0 {
		verb := "extra keys"
		if r.Fixed {
			verb = "removed keys"
		}
		parts = append(parts, verb+": "+joinUsers(r.Extra))
	}
	if len(r.Unknowns) > 0 {
		parts = append(parts, fmt.Sprintf("%d keys of unknown holders", len(r.Unknowns)))
	}
	status := "ok"
	switch {
	case len(parts) > 0 && r.Fixed:
		status = "fixed"
	case len(parts) > 0:
		status = "needs fixing"
	}
	line := fmt.Sprintf("%s: %s; readers: %s", printName(r.Name), status, joinUsers(r.Readers))
	if len(parts) > 0 {
		line += "; " + strings.Join(parts, "; ")
	}
	return line
}
