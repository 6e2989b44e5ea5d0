package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"spindle.dev"
)

const lsUsage = `Usage:
    spin ls [-l] [-R] [-at WHEN] [PATH...]

Lists the spin paths given, @ (your root) if none is. A directory is listed
by its contents; a path holding *, ? or [ is a pattern matched element by
element. Names are printed in full, directories with a trailing /.

Listing a directory, or matching a pattern in it, needs the list right on
it; a directory you may not list is private, and a pattern finds nothing
in it. Read alone lets you get a file whose name you know. With list but
not read, -l shows size, time and writer, and get is refused.

Options:
    -l, -long        also print kind (d directory, l link, - file), packing,
                     size, time of last change and writer; links show their target
    -R, -recursive   list directories below, too
    -at WHEN         read the tree as it was at WHEN (in another user's
                     tree, with the rights of then and of now): a sequence number,
                     a negative number for entries back, a time
                     (2026-12-04T15:04:05Z) or a date (2026-12-04,
                     the end of that day, UTC); see spin history
    -h, -help        print this text

Example:
    $ spin ls -l @/docs
    - plain 41 ... ann@example.com ann@example.com/docs/Access
    - ee    ... ann@example.com ann@example.com/docs/report.pdf
    $ spin ls 'bob@example.com/pub/*.txt'
    bob@example.com/pub/plans.txt
`

func runLs(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	long := flags.Bool("long", false, "")
	flags.BoolVar(long, "l", false, "")
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
	at := atFlag(flags)
	if err := st.parse(flags, args); err != nil {
		return err
	}
	names := flags.Args()
	if len(names) == 0 {
		names = []string{"@"}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	if c, err = st.pastClient(ctx, c, *at); err != nil {
		return err
	}
	l := &lister{st: st, c: c, w: st.Stdout, long: *long, recursive: *recursive}
	for _, arg := range names {
		name, err := st.spinPath(c, arg)
		if err != nil {
			l.failed = true
			continue
		}
		l.list(ctx, arg, name)
	}
	l.flush()
	if l.failed {
		return errFailed
	}
	return nil
}

// A lister prints entries for ls.
type lister struct {
	st        *State
	c         spindle.Client
	w         io.Writer
	long      bool
	recursive bool
	rows      [][6]string // Long lines not yet printed, to align their columns.
	failed    bool
}

// list lists one command-line argument.
func (l *lister) list(ctx context.Context, arg string, name spindle.PathName) {
	if hasGlob(arg) {
		entries, err := l.c.Glob(ctx, string(name))
		if err != nil {
			l.fail(string(name), err)
			return
		}
		if len(entries) == 0 {
			l.fail(string(name), spindle.E(spindle.NotExist, name, "no match"))
			return
		}
		l.entries(ctx, entries)
		return
	}
	e, err := l.c.Lookup(ctx, name, false)
	if err != nil {
		l.fail(string(name), err)
		return
	}
	if !e.Attr.IsDir() {
		l.print(e)
		return
	}
	l.dir(ctx, name)
}

// dir lists the entries in a directory.
func (l *lister) dir(ctx context.Context, name spindle.PathName) {
	entries, err := l.c.Glob(ctx, children(name))
	if err != nil {
		l.fail(string(name), aboutDir(name, err))
		return
	}
	l.entries(ctx, entries)
}

// aboutDir returns err, from globbing the children of dir, as an error
// about dir, if it is one (dir may not be listed, say): the pattern is
// ls's own, and the user named the directory. The operation stays, for
// the hint that names the right it needed.
func aboutDir(dir spindle.PathName, err error) error {
	var op spindle.Op
	for e := err; e != nil; {
		se, ok := e.(*spindle.Error)
		if !ok {
			break
		}
		if op == "" {
			op = se.Op
		}
		if se.Path == dir {
			return spindle.E(op, spindle.KindOf(err), dir, se.Err)
		}
		e = se.Err
	}
	return err
}

// entries prints entries in name order, and with -R the directories below.
func (l *lister) entries(ctx context.Context, entries []*spindle.DirEntry) {
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	for _, e := range entries {
		l.print(e)
		if l.recursive && e.Attr.IsDir() {
			l.dir(ctx, e.Name)
		}
	}
}

func (l *lister) fail(path string, err error) {
	l.flush() // Print what was listed before the diagnostic.
	l.st.fail(path, err)
	l.failed = true
}

// print prints one entry, in the long form with -l.
func (l *lister) print(e *spindle.DirEntry) {
	name := string(e.Name)
	if e.Attr.IsDir() && !strings.HasSuffix(name, "/") {
		name += "/"
	}
	name = printName(name)
	if !l.long {
		fmt.Fprintln(l.w, name)
		return
	}
	kind, packing, size := "-", e.Packing.String(), fmt.Sprint(e.Size)
	switch {
	case e.Attr.IsDir():
		kind, packing = "d", "-"
	case e.Attr.IsLink():
		kind, packing = "l", "-"
		name += " -> " + printName(e.Link)
	case e.Attr.IsIncomplete():
		// A file you may not read: its name alone is proved.
		packing, size = "-", "-"
	}
	writer := printName(e.Writer)
	if writer == "" {
		writer = "-"
	}
	l.rows = append(l.rows, [6]string{kind, packing, size, formatTime(e.Time), writer, name})
}

// flush prints the long lines held, in aligned columns: the size to the
// right, the others to the left.
func (l *lister) flush() {
	var width [6]int
	for _, r := range l.rows {
		for i, f := range r {
			width[i] = max(width[i], len(f))
		}
	}
	for _, r := range l.rows {
		fmt.Fprintf(l.w, "%-*s %-*s %*s %-*s %-*s %s\n",
			width[0], r[0], width[1], r[1], width[2], r[2], width[3], r[3], width[4], r[4], r[5])
	}
	l.rows = l.rows[:0]
}

// formatTime formats a time for listings, in the local time zone.
func formatTime(t spindle.Time) string {
	if t == 0 {
		return "-"
	}
	return t.Go().Local().Format(time.DateTime)
}
