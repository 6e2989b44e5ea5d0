package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
)

// Reading the past of one's own tree: -at WHEN on ls, get and cp, and the
// history and restore commands (issue 29; see client/versions.go).

// pastReader is a client that can read its own tree's past.
type pastReader interface {
	PastAt(ctx context.Context, seq int64, when time.Time) (*client.Past, error)
	PastOf(ctx context.Context, owner spindle.UserName, seq int64, when time.Time) (*client.Past, error)
	SnapshotSeq(ctx context.Context, owner spindle.UserName, name string) (int64, error)
	History(ctx context.Context, name spindle.PathName) ([]client.Version, error)
}

// atFlag adds -at to flags.
func atFlag(flags *flag.FlagSet) *string {
	return flags.String("at", "", "")
}

// parseWhen parses WHEN: a sequence number, -N for N entries before the
// current head, a time in RFC 3339 or a date (2006-01-02, the tree as it
// was at the end of that day, UTC).
func parseWhen(s string) (seq int64, when time.Time, err error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil && n != 0 {
		return n, time.Time{}, nil // PastAt counts a negative seq back.
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return 0, t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return 0, t.Add(24*time.Hour - time.Nanosecond), nil
	}
	return 0, time.Time{}, usagef("-at %q: want a sequence number (1 on), a negative number for entries back, a time (2026-12-04T15:04:05Z) or a date (2026-12-04)", s)
}

// pastClient returns c reading its tree as it was at WHEN, read-only, or
// c itself when at is empty.
func (st *State) pastClient(ctx context.Context, c spindle.Client, at string) (spindle.Client, error) {
	if at == "" {
		return c, nil
	}
	seq, when, err := parseWhen(at)
	snap := ""
	if err != nil {
		if keylog.CheckPinName(at) != nil {
			return nil, usagef("-at %q: want a sequence number (1 on), a negative number for entries back, a time (2026-12-04T15:04:05Z), a date (2026-12-04) or a snapshot's name (spin snapshot)", at)
		}
		snap = at
	}
	pr, ok := c.(pastReader)
	if !ok {
		return nil, st.fail("-at", spindle.E(spindle.Invalid, "this client cannot read the past"))
	}
	return &pastClient{Client: c, pr: pr, seq: seq, when: when, snap: snap}, nil
}

// A pastClient reads one proved past state of its user's tree, read when
// first needed; it writes nothing. Links in the past are not followed.
type pastClient struct {
	spindle.Client
	pr   pastReader
	seq  int64
	when time.Time
	snap string // A named snapshot, of the tree each name is in.

	mu    sync.Mutex
	pasts map[spindle.UserName]pastOrErr
}

type pastOrErr struct {
	p   *client.Past
	err error
}

// past returns the past state of name's tree, reading it on first use:
// the client's own tree from its log, another's through its dir host,
// with the rights of then and of now.
func (c *pastClient) past(ctx context.Context, name spindle.PathName) (*client.Past, error) {
	owner := c.User()
	if p, err := spindle.Parse(name); err == nil {
		owner = p.User()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pasts == nil {
		c.pasts = make(map[spindle.UserName]pastOrErr)
	}
	pe, ok := c.pasts[owner]
	if !ok {
		seq := c.seq
		if c.snap != "" {
			seq, pe.err = c.pr.SnapshotSeq(ctx, owner, c.snap)
		}
		if pe.err == nil {
			pe.p, pe.err = c.pr.PastOf(ctx, owner, seq, c.when)
		}
		c.pasts[owner] = pe
	}
	return pe.p, pe.err
}

var errPastReadOnly = errors.New("the past is read-only: to write an old version back, use spin restore")

func (c *pastClient) Open(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	p, err := c.past(ctx, name)
	if err != nil {
		return nil, err
	}
	return p.Open(ctx, name)
}

func (c *pastClient) Lookup(ctx context.Context, name spindle.PathName, follow bool) (*spindle.DirEntry, error) {
	p, err := c.past(ctx, name)
	if err != nil {
		return nil, err
	}
	return p.Lookup(name)
}

func (c *pastClient) Glob(ctx context.Context, pattern string) ([]*spindle.DirEntry, error) {
	p, err := c.past(ctx, spindle.PathName(pattern))
	if err != nil {
		return nil, err
	}
	return p.Glob(pattern)
}

func (c *pastClient) Put(ctx context.Context, name spindle.PathName, r io.Reader, packing spindle.Packing, progress func(int64)) (*spindle.DirEntry, error) {
	return nil, spindle.E(name, spindle.Permission, errPastReadOnly)
}

func (c *pastClient) MakeDirectory(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return nil, spindle.E(name, spindle.Permission, errPastReadOnly)
}

func (c *pastClient) Delete(ctx context.Context, name spindle.PathName) error {
	return spindle.E(name, spindle.Permission, errPastReadOnly)
}

func (c *pastClient) PutLink(ctx context.Context, target, name spindle.PathName) (*spindle.DirEntry, error) {
	return nil, spindle.E(name, spindle.Permission, errPastReadOnly)
}

func (c *pastClient) Rename(ctx context.Context, oldName, newName spindle.PathName) error {
	return spindle.E(oldName, spindle.Permission, errPastReadOnly)
}

const historyUsage = `Usage:
    spin history PATH

Lists the versions of PATH, a file or directory of your own tree, from
its log, checked against the current signed head: for each entry that
put, deleted or renamed PATH or an item under it, a line under a header
with its sequence number, time, writer, size (of a put file) and what it
did. Read a version with spin get -at SEQ, or write it back with
spin restore -at SEQ. Only the owner may read a tree's log, so only your
own tree has a history.

Options:
    -h, -help   print this text

Example:
    $ spin history @/docs/report.txt
    SEQ  TIME                 WRITER           SIZE  OP      NAME
    ...  ann@example.com  18    put     ann@example.com/docs/report.txt
    ...  ann@example.com  -     delete  ann@example.com/docs/report.txt
`

func runHistory(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usagef("want one PATH, %s", gotArgs(flags.NArg()))
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	name, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	pr, ok := c.(pastReader)
	if !ok {
		return st.fail("history", spindle.E(spindle.Invalid, "this client cannot read the past"))
	}
	vs, err := pr.History(ctx, name)
	if err != nil {
		return st.fail(string(name), err)
	}
	if len(vs) == 0 {
		return st.fail(string(name), spindle.E(name, spindle.NotExist, "no entry of the log touched it"))
	}
	tw := tabwriter.NewWriter(st.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tTIME\tWRITER\tSIZE\tOP\tNAME")
	for _, v := range vs {
		size := "-"
		if v.Op == "put" {
			size = fmt.Sprint(v.Size)
		}
		what := printName(string(v.Name))
		if v.NewName != "" {
			what += " -> " + printName(string(v.NewName))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", v.Seq, formatTime(v.Time), printName(string(v.Writer)), size, v.Op, what)
	}
	return tw.Flush()
}

const restoreUsage = `Usage:
    spin restore -at WHEN PATH [NEWPATH]

Writes PATH of your own tree, as it was at WHEN, back as new entries: at
PATH, or at NEWPATH if given. A directory is restored with everything
that was under it; the folders above NEWPATH that are missing are made.
WHEN is a sequence number (see spin history), a
negative number for that many entries before the current head, a time (2026-12-04T15:04:05Z) or a
date (2026-12-04: the end of that day, UTC).
The old version is read from the log, checked against the current signed
head, and each file is written again as a new file, its key wrapped for
the readers the Access files name now (not then); the log only grows.
Access and Group files are not restored, so that a restore never gives
back a right taken away since: read an old one with spin get -at.

Options:
    -at WHEN    the state to restore (required)
    -h, -help   print this text

Example:
    $ spin rm -R @/album
    $ spin restore -at -2 @/album
    restored 1 file to ann@example.com/album from sequence ...
`

func runRestore(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	at := atFlag(flags)
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if *at == "" {
		return usagef("want -at WHEN")
	}
	if flags.NArg() < 1 || flags.NArg() > 2 {
		return usagef("want PATH and optionally NEWPATH, %s", gotArgs(flags.NArg()))
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	from, err := st.spinPath(c, flags.Arg(0))
	if err != nil {
		return err
	}
	to := from
	if flags.NArg() == 2 {
		if to, err = st.spinPath(c, flags.Arg(1)); err != nil {
			return err
		}
	}
	pc, err := st.pastClient(ctx, c, *at)
	if err != nil {
		return err
	}
	past, err := pc.(*pastClient).past(ctx, from)
	if err != nil {
		return st.fail(string(from), err)
	}
	rs, ok := c.(restoreWriter)
	if !ok {
		return st.fail("restore", spindle.E(spindle.Invalid, "this client cannot restore"))
	}
	res, err := rs.Restore(ctx, past, from, to)
	for _, n := range res.Skipped {
		st.errorf("%s: an Access or Group file, not restored", printName(string(n)))
	}
	if err != nil {
		return st.fail(string(from), err)
	}
	fmt.Fprintf(st.Stdout, "restored %d %s to %s from sequence %d\n", res.Files, plural(res.Files, "file"), printName(string(to)), past.Seq())
	return nil
}

// restoreWriter is a client that can write a past state back.
type restoreWriter interface {
	Restore(ctx context.Context, past *client.Past, from, to spindle.PathName) (client.RestoreResult, error)
}
