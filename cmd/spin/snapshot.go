package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
)

// Retention of one's own tree's earlier states (issue 29; see
// dirlog/host/keep.go and client.SetKeep).

// keeper is a client that can set and report its tree's retention.
type keeper interface {
	SetKeep(ctx context.Context, d time.Duration) error
	Retention(ctx context.Context) (client.Retention, error)
	Snapshot(ctx context.Context, name string) (int64, error)
	DropSnapshot(ctx context.Context, name string) error
}

const snapshotUsage = `Usage:
    spin snapshot [-keep WINDOW]
    spin snapshot [-rm] NAME

Says which earlier states of your tree can be read (with spin ls, get and
cp -at, spin history and spin restore), how long they are kept, and your
named snapshots. With NAME, names the current state of your tree: a
snapshot your dir hosts keep, with every file in it, until you remove it
with -rm, whatever the window; read it with spin get -at NAME (others may too,
where the Access files of then and of now let them). A name is letters,
digits, '.', '_' and '-', not a number; a key record holds 16. With
-keep, sets that window in your key record, for every dir host of your
tree: each keeps every state of the last WINDOW, that is the log entries
of the window (it compacts only older ones) and the blocks of every file
those states hold, and lets older ones go. WINDOW is a number of days
(30d), hours (12h), minutes (90m) or seconds (3600s); none, to keep only
the current state; or default, for each dir host's own default (spin
node -keep, 30 days unless its operator set another).

A longer window costs the disk of every file overwritten or deleted in
it, until it leaves the window.

Options:
    -keep WINDOW   set how long earlier states are kept
    -rm            remove the snapshot NAME
    -h, -help      print this text

Example:
    $ spin snapshot -keep 90d
    ann@example.com: earlier states kept 90 days
    states readable: from sequence 1 (...) to ...
    $ spin snapshot before-move
    ann@example.com: snapshot before-move is sequence ...
    ...
    $ spin ls -at before-move @/
`

// parseKeep parses a retention window: a number with a unit of d, h, m
// or s, none (-1 s, spindle.KeepNone) or default (0).
func parseKeep(s string) (time.Duration, error) {
	switch s {
	case "none":
		return time.Duration(spindle.KeepNone) * time.Second, nil
	case "default", "0":
		return 0, nil
	}
	units := map[string]time.Duration{"d": 24 * time.Hour, "h": time.Hour, "m": time.Minute, "s": time.Second}
	if len(s) > 1 {
		if u, ok := units[s[len(s)-1:]]; ok {
			n, err := strconv.ParseInt(s[:len(s)-1], 10, 64)
			if err == nil && n > 0 && n <= int64(1<<62)/int64(u) {
				return time.Duration(n) * u, nil
			}
		}
	}
	return 0, usagef("-keep %q: want a number of days, hours, minutes or seconds (30d, 12h, 90m, 3600s), none or default", s)
}

// formatKeep describes a key record's window.
func formatKeep(keep int64) string {
	switch keep {
	case spindle.KeepNone:
		return "only the current state kept"
	case 0:
		return "earlier states kept as long as each dir host keeps them by default"
	}
	return "earlier states kept " + keepWindow(keep)
}

// keepWindow names a window of keep seconds, keep > 0: in days or hours
// where it is whole ones.
func keepWindow(keep int64) string {
	switch {
	case keep%86400 == 0:
		return fmt.Sprintf("%d %s", keep/86400, plural(int(keep/86400), "day"))
	case keep%3600 == 0:
		return fmt.Sprintf("%d %s", keep/3600, plural(int(keep/3600), "hour"))
	}
	return (time.Duration(keep) * time.Second).String()
}

func runSnapshot(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	keep := flags.String("keep", "", "")
	rm := flags.Bool("rm", false, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 1 || *rm && flags.NArg() != 1 {
		return usagef("want at most one NAME, %s", gotArgs(flags.NArg()))
	}
	name := flags.Arg(0)
	if name != "" {
		if err := keylog.CheckPinName(name); err != nil {
			return usagef("%v", err)
		}
	}
	var d time.Duration
	if *keep != "" {
		var err error
		if d, err = parseKeep(*keep); err != nil {
			return err
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	k, ok := c.(keeper)
	if !ok {
		return st.fail("snapshot", errors.New("this client cannot set how long versions are kept"))
	}
	if *keep != "" {
		if err := k.SetKeep(ctx, d); err != nil {
			return st.fail(string(c.User()), err)
		}
	}
	switch {
	case name != "" && *rm:
		if err := k.DropSnapshot(ctx, name); err != nil {
			return st.fail(string(c.User()), err)
		}
		fmt.Fprintf(st.Stdout, "%s: snapshot %s removed\n", printName(string(c.User())), name)
	case name != "":
		seq, err := k.Snapshot(ctx, name)
		if err != nil {
			return st.fail(string(c.User()), err)
		}
		fmt.Fprintf(st.Stdout, "%s: snapshot %s is sequence %d\n", printName(string(c.User())), name, seq)
	}
	r, err := k.Retention(ctx)
	if err != nil {
		return st.fail(string(c.User()), err)
	}
	fmt.Fprintf(st.Stdout, "%s: %s\n", printName(string(c.User())), formatKeep(r.Keep))
	if r.To == 0 {
		fmt.Fprintf(st.Stdout, "states readable: none yet (the tree is empty)\n")
		return nil
	}
	when := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return formatTime(spindle.Time(t.UnixNano()))
	}
	from := r.From
	if from == 0 {
		from = 1
	}
	fmt.Fprintf(st.Stdout, "states readable: from sequence %d (%s) to %d (%s)\n", from, when(r.FromTime), r.To, when(r.ToTime))
	for _, p := range r.Pins {
		fmt.Fprintf(st.Stdout, "snapshot %s: sequence %d\n", p.Name, p.Seq)
	}
	return nil
}
