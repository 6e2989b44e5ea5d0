package main

import (
	"context"
	"flag"
	"fmt"

	"spindle.dev"
)

const watchUsage = `Usage:
    spin watch [-new | -from SEQ] PATH

Prints the changes to PATH and everything below it, one line each, as they
happen, until interrupted:

    SEQUENCE put|mkdir|link|delete NAME WRITER

By default the changes already made are printed first, from the start of
the tree's log.

Options:
    -new         print only changes made from now on
    -from SEQ    start at sequence number SEQ
    -h, -help    print this text

Example:
    $ spin watch -new @/inbox
`

func runWatch(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	onlyNew := flags.Bool("new", false, "")
	from := flags.Int64("from", 0, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usagef("want one PATH, got %d arguments", flags.NArg())
	}
	fromSet := false
	flags.Visit(func(f *flag.Flag) {
		if f.Name == "from" {
			fromSet = true
		}
	})
	if *onlyNew && fromSet {
		return usagef("-new and -from exclude each other")
	}
	if *from < 0 {
		return usagef("-from: sequence numbers start at 0")
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	name, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	seq := *from
	if *onlyNew {
		// The sequence number of a directory is that of the last change
		// below it.
		e, err := c.Lookup(ctx, name, false)
		if err != nil {
			return st.fail(string(name), err)
		}
		seq = e.Sequence + 1
	}
	events, err := c.Watch(ctx, name, seq)
	if err != nil {
		return st.fail(string(name), err)
	}
	for ev := range events {
		if ev.Err != nil {
			if ctx.Err() != nil {
				return nil // Interrupted: the normal end of a watch.
			}
			return st.fail(string(name), ev.Err)
		}
		if ev.Entry != nil {
			fmt.Fprintln(st.Stdout, eventLine(ev))
		}
	}
	return nil
}

// eventLine formats one event of a watch.
func eventLine(ev spindle.Event) string {
	e := ev.Entry
	op := "put"
	switch {
	case ev.Delete:
		op = "delete"
	case e.Attr.IsDir():
		op = "mkdir"
	case e.Attr.IsLink():
		op = "link"
	}
	writer := string(e.Writer)
	if writer == "" {
		writer = "-"
	}
	return fmt.Sprintf("%d %s %s %s", e.Sequence, op, e.Name, writer)
}
