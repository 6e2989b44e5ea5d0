package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"spindle.dev"
)

const shareUsage = `Usage:
    spin share [-fix] [-R] PATH...

Checks, for each file at PATH, that the users the Access files grant read
are exactly the users holding a wrapped key for it, and prints one line per
file: "ok", or who is missing a key and who holds a key without the right.
If the Access file lets all read, the file's key is wrapped for all, so that
anyone can decrypt it; the line then says "all (key wrapped for all)". A
group that grants read but does not exist or cannot be read is named on the
line; while one cannot be read no key is removed, since its holders may be
its members.
A *@domain that grants read is listed with the users registered in the
domain now: under the key cluster's open policy anyone may register a name
in any domain, so the wildcard grants to whoever does.
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
	hasKey := make(map[spindle.UserName]bool)
	err := st.eachPath(ctx, flags.Args(), func(c spindle.Client, _ int, name spindle.PathName) error {
		reports, err := c.Share(ctx, name, *recursive, *fix)
		failed := false
		for _, r := range reports {
			fmt.Fprintln(st.Stdout, shareLine(r, keyless(ctx, c, r.Readers, hasKey)))
			if r.Err != nil {
				st.fail(string(r.Name), r.Err)
				failed = true
				continue
			}
			if !r.Fixed && (len(r.Missing) > 0 || len(r.Extra) > 0 || len(r.Unknowns) > 0 && !keepsUnknowns(r)) {
				unfixed++
			}
		}
		if err == nil && failed {
			err = errFailed
		}
		return err
	})
	if unfixed > 0 && !*fix {
		needs := "files need"
		if unfixed == 1 {
			needs = "file needs"
		}
		st.hint("%d %s new keys; to repair them, run: spin share -fix%s %s", unfixed, needs, map[bool]string{true: " -R", false: ""}[*recursive], strings.Join(flags.Args(), " "))
	}
	return err
}

// keyless returns the readers that have no key record (a misspelled name,
// or a user not signed up yet), looking each up once in hasKey.
func keyless(ctx context.Context, c spindle.Client, readers []spindle.UserName, hasKey map[spindle.UserName]bool) []spindle.UserName {
	var none []spindle.UserName
	for _, u := range readers {
		if u == spindle.AllUsers || strings.HasPrefix(string(u), "*@") {
			continue
		}
		has, ok := hasKey[u]
		if !ok {
			_, err := c.LookupUser(ctx, u)
			has = !errors.Is(err, spindle.NotExist)
			hasKey[u] = has
		}
		if !has {
			none = append(none, u)
		}
	}
	return none
}

// shareLine describes one share report on one line; keyless are the
// readers that have no key record.
func shareLine(r spindle.ShareReport, keyless []spindle.UserName) string {
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
	if len(r.Unknowns) > 0 && !keepsUnknowns(r) {
		parts = append(parts, fmt.Sprintf("%d %s of unknown holders", len(r.Unknowns), plural(len(r.Unknowns), "key")))
	}
	needs := len(parts) > 0
	for _, w := range slices.Sorted(maps.Keys(r.Domains)) {
		who := "no one yet"
		if m := r.Domains[w]; len(m) > 0 {
			who = fmt.Sprintf("%d %s now: %s", len(m), plural(len(m), "user"), joinUsers(m))
		}
		parts = append(parts, fmt.Sprintf("%s means whoever registers a name there, %s", w, who))
	}
	for _, g := range r.Groups {
		parts = append(parts, "group "+describeAll(g))
	}
	if len(keyless) > 0 {
		parts = append(parts, "no key record: "+joinUsers(keyless))
	}
	if kept := len(r.Unsure) + len(r.Unknowns); kept > 0 && unsure(r) {
		holders := joinUsers(r.Unsure)
		switch {
		case len(r.Unsure) == 0:
			holders = fmt.Sprintf("%d unnamed %s", len(r.Unknowns), plural(len(r.Unknowns), "holder"))
		case len(r.Unknowns) > 0:
			holders += fmt.Sprintf(" and %d unnamed %s", len(r.Unknowns), plural(len(r.Unknowns), "holder"))
		}
		parts = append(parts, "keys kept while a group cannot be read: "+holders)
	}
	status := "ok"
	switch {
	case r.Err != nil:
		status = "failed"
	case needs && r.Fixed:
		status = "fixed"
	case needs:
		status = "needs fixing"
	case unsure(r):
		status = "readers not all known"
	}
	line := fmt.Sprintf("%s: %s; readers: %s", printName(r.Name), status, joinReaders(r.Readers, slices.Contains(r.Wrapped, spindle.AllUsers)))
	if len(parts) > 0 {
		line += "; " + strings.Join(parts, "; ")
	}
	return line
}

// unsure reports whether a group that grants read on the file cannot be
// read: one that does not exist grants nothing, but one that cannot be
// read may grant anyone, so the readers are not all known.
func unsure(r spindle.ShareReport) bool {
	return slices.ContainsFunc(r.Groups, func(err error) bool { return !errors.Is(err, spindle.NotExist) })
}

// keepsUnknowns reports whether the keys of holders share cannot name are
// kept: they may be members of a group that cannot be read, or readers
// anyway, since all may read.
func keepsUnknowns(r spindle.ShareReport) bool {
	return unsure(r) || slices.Contains(r.Readers, spindle.AllUsers)
}
