package main

import (
	"context"
	"errors"
	"sort"

	"spindle.dev"
)

const rmUsage = `Usage:
    spin rm [-R] PATH...

Removes each file, link or empty directory PATH. A link is removed, not
what it points to.

Options:
    -R, -recursive   remove directories and everything below them
    -h, -help        print this text

Example:
    $ spin rm @/docs/draft.txt
    $ spin rm -R @/tmp
`

func runRm(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
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
	r := &remover{st: st, c: c}
	for _, arg := range flags.Args() {
		name, err := st.spinPath(c, arg)
		if err != nil {
			r.failed = true
			continue
		}
		if *recursive {
			r.removeAll(ctx, name)
			continue
		}
		if err := c.Delete(ctx, name); err != nil {
			r.fail(string(name), err)
			if errors.Is(err, spindle.NotEmpty) {
				st.hint("to remove a directory and everything in it, use: spin rm -R %s", name)
			}
		}
	}
	if r.failed {
		return errFailed
	}
	return nil
}

type remover struct {
	st     *State
	c      spindle.Client
	failed bool
}

func (r *remover) fail(path string, err error) {
	r.st.fail(path, err)
	r.failed = true
}

// removeAll removes name and, if it is a directory, everything below it,
// deepest first. It reports whether name was removed.
func (r *remover) removeAll(ctx context.Context, name spindle.PathName) bool {
	e, err := r.c.Lookup(ctx, name, false)
	if err != nil {
		r.fail(string(name), err)
		return false
	}
	if e.Attr.IsDir() {
		entries, err := r.c.Glob(ctx, children(name))
		if err != nil {
			r.fail(string(name), err)
			return false
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		ok := true
		for _, child := range entries {
			if child.Attr.IsDir() {
				ok = r.removeAll(ctx, child.Name) && ok
				continue
			}
			if err := r.c.Delete(ctx, child.Name); err != nil {
				r.fail(string(child.Name), err)
				ok = false
			}
		}
		if !ok {
			return false // The reason has been reported; the directory is not empty.
		}
	}
	if err := r.c.Delete(ctx, name); err != nil {
		r.fail(string(name), err)
		return false
	}
	return true
}
