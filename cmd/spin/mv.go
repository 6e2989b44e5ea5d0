package main

import (
	"context"
	"errors"

	"spindle.dev"
)

const mvUsage = `Usage:
    spin mv OLD NEW

Renames the file, link or directory OLD, with everything below it, to NEW,
within your tree. If NEW is an existing directory, OLD moves into it.

Options:
    -h, -help   print this text

Example:
    $ spin mv @/drafts @/docs/2026
`

func runMv(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 2 {
		return usagef("want OLD and NEW, %s", gotArgs(flags.NArg()))
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	oldName, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	newName, err := st.spinPath(c, flags.Arg(1))
	if err != nil {
		return err
	}
	e, err := c.Lookup(ctx, newName, false)
	switch {
	case err == nil && e.Attr.IsDir():
		newName = join(newName, base(oldName))
	case err != nil && !errors.Is(err, spindle.NotExist) && !errors.Is(err, spindle.Private) && !errors.Is(err, spindle.Permission):
		return st.fail(string(newName), err)
	}
	if err := c.Rename(ctx, oldName, newName); err != nil {
		return st.fail(string(oldName), err)
	}
	return nil
}
