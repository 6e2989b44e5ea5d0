package main

import (
	"context"
	"flag"
	"fmt"

	"spindle.dev"
)

const watchUsage = `Usage:
    spin watch [-new | -from SEQ] PATH

Prints PATH and everything below it, one line per item, and then every
change to them as it happens, until interrupted:

    SEQUENCE put|mkdir|link|delete NAME WRITER

A rename shows as the delete of each moved item and its put at the new name.
PATH itself shows if you have any right on it; an item below it only if
you may list its directory and every directory between, as ls would find
it. A watch reaches only the trees your node hosts, as their sequencer
or a mirror: another user's tree hosted elsewhere is refused, with the
node that hosts it.

Options:
    -new         print only changes made from now on
    -from SEQ    print every change from sequence number SEQ on (1 is the
                 start of the tree's log), then new ones
    -h, -help    print this text

Example:
    $ spin watch -new @/inbox
    ... put ann@example.com/inbox/note.txt ann@example.com
`

func runWatch(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	onlyNew := flags.Bool("new", false, "")
	from := flags.Int64("from", 0, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usagef("want one PATH, %s", gotArgs(flags.NArg()))
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
	if fromSet && *from < 1 {
		return usagef("-from: sequence numbers start at 1")
	}
	// Watch's fromSeq: 0 sends the current state first, -1 only new
	// changes, a positive number the changes from there on.
	seq := *from
	if *onlyNew {
		seq = -1
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	name, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
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
	writer := printName(e.Writer)
	if writer == "" {
		writer = "-"
	}
	return fmt.Sprintf("%d %s %s %s", e.Sequence, op, printName(e.Name), writer)
}
