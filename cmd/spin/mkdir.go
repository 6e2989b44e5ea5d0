package main

import (
	"context"
	"errors"

	"spindle.dev"
)

const mkdirUsage = `Usage:
    spin mkdir [-p] PATH...

Makes each directory PATH. Its parent must exist, unless -p is given.

Options:
    -p, -parents   make missing parents too, and accept directories that exist
    -h, -help      print this text

Example:
    $ spin mkdir -p @/photos/2026/summer
`

func runMkdir(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	parents := flags.Bool("parents", false, "")
	flags.BoolVar(parents, "p", false, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	return st.eachPath(ctx, flags.Args(), func(c spindle.Client, _ int, name spindle.PathName) error {
		if *parents {
			return mkdirAll(ctx, c, name)
		}
		_, err := c.MakeDirectory(ctx, name)
		return err
	})
}

// mkdirAll makes the directory name and any missing parents. A directory
// that exists is fine; a file in the way is NotDir.
func mkdirAll(ctx context.Context, c spindle.Client, name spindle.PathName) error {
	p, err := spindle.Parse(name)
	if err != nil {
		return err
	}
	// Find the longest prefix that exists, from the bottom: usually only
	// the last few elements are missing.
	n := p.NElem()
	for ; n > 0; n-- {
		dir := p.First(n).Path()
		e, err := c.Lookup(ctx, dir, true)
		if err == nil {
			if !e.Attr.IsDir() {
				return spindle.E(spindle.NotDir, dir)
			}
			break
		}
		if !errors.Is(err, spindle.NotExist) {
			return err
		}
	}
	for n++; n <= p.NElem(); n++ {
		dir := p.First(n).Path()
		if _, err := c.MakeDirectory(ctx, dir); err != nil && !errors.Is(err, spindle.Exist) {
			return err
		}
	}
	return nil
}
