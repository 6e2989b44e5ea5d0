package client

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// Snapshot names the current state of the client's own tree name, a
// named snapshot its dir hosts keep readable, with the blocks of its
// files, until DropSnapshot (see spindle.User.Pins). It returns the
// sequence named. A name already taken is Exist.
func (c *Client) Snapshot(ctx context.Context, name string) (int64, error) {
	const op spindle.Op = "client.Snapshot"
	if err := keylog.CheckPinName(name); err != nil {
		return 0, spindle.E(op, c.user, spindle.Invalid, err)
	}
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return 0, spindle.E(op, c.user, err)
	}
	for _, p := range cur.Pins {
		if p.Name == name {
			return 0, spindle.E(op, c.user, spindle.Exist, fmt.Sprintf("snapshot %q names sequence %d already", name, p.Seq))
		}
	}
	if len(cur.Pins) >= keylog.MaxPins {
		return 0, spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("%d snapshots already, the most a key record holds: remove one first", len(cur.Pins)))
	}
	// The state now: the head a lookup of the root is proved against,
	// which costs a round trip, not a read of the whole log.
	if _, err := c.Lookup(ctx, spindle.PathName(c.user+"/"), false); err != nil {
		return 0, spindle.E(op, c.user, err)
	}
	h := c.svc.heads.floor(c.user)
	if h == nil || h.Seq == 0 {
		return 0, spindle.E(op, c.user, spindle.NotExist, "the tree is empty: nothing to name")
	}
	seq := h.Seq
	next := keylog.Next(cur)
	next.Pins = append(next.Pins, spindle.Pin{Name: name, Seq: seq})
	slices.SortFunc(next.Pins, func(a, b spindle.Pin) int { return strings.Compare(a.Name, b.Name) })
	if err := c.putUser(ctx, next); err != nil {
		return 0, spindle.E(op, c.user, err)
	}
	if err := c.auth(ctx); err != nil {
		return 0, spindle.E(op, c.user, err)
	}
	return seq, nil
}

// DropSnapshot removes the named snapshot name of the client's own tree;
// its state is then kept only as long as the window keeps it.
func (c *Client) DropSnapshot(ctx context.Context, name string) error {
	const op spindle.Op = "client.DropSnapshot"
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	next := keylog.Next(cur)
	next.Pins = slices.DeleteFunc(next.Pins, func(p spindle.Pin) bool { return p.Name == name })
	if len(next.Pins) == len(cur.Pins) {
		return spindle.E(op, c.user, spindle.NotExist, fmt.Sprintf("no snapshot %q", name))
	}
	if err := c.putUser(ctx, next); err != nil {
		return spindle.E(op, c.user, err)
	}
	return c.auth(ctx)
}

// SnapshotSeq returns the sequence owner's snapshot name names, from
// owner's key record.
func (c *Client) SnapshotSeq(ctx context.Context, owner spindle.UserName, name string) (int64, error) {
	const op spindle.Op = "client.SnapshotSeq"
	u, err := c.lookupUser(ctx, owner, true)
	if err != nil {
		return 0, spindle.E(op, owner, err)
	}
	for _, p := range u.Pins {
		if p.Name == name {
			return p.Seq, nil
		}
	}
	return 0, spindle.E(op, owner, spindle.NotExist, fmt.Sprintf("no snapshot %q", name))
}

// A Retention says which states of the client's own tree can be read:
// those after entry From (the start of the log or its checkpoint; 0 for
// the empty tree) up to the head, To.
type Retention struct {
	Keep     int64         // The key record's window in seconds: 0 for the dir hosts' default, spindle.KeepNone for none.
	Pins     []spindle.Pin // The named snapshots.
	From, To int64
	FromTime time.Time // When entry From was made; zero if not known.
	ToTime   time.Time
}

// Retention returns the states of the client's own tree that its dir host
// can still give, proved against the current signed head as
// [Client.PastAt] proves them.
func (c *Client) Retention(ctx context.Context) (Retention, error) {
	const op spindle.Op = "client.Retention"
	u, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return Retention{}, spindle.E(op, c.user, err)
	}
	cp, tail, h, err := c.provedLog(ctx)
	if err != nil {
		return Retention{}, spindle.E(op, c.user, err)
	}
	r := Retention{Keep: u.Keep, Pins: u.Pins, To: h.Seq, ToTime: h.Time.Go()}
	if n := len(tail); n > 0 && tail[n-1].Seq == h.Seq {
		r.ToTime = tail[n-1].Time.Go()
	}
	switch {
	case cp != nil:
		// The time of the state a checkpoint holds is that of its last
		// entry, if the checkpoint kept it (a delete it does not).
		r.From = cp.Seq
		for _, e := range cp.Entries {
			if e.Seq == cp.Seq {
				r.FromTime = e.Time.Go()
			}
		}
	case len(tail) > 0:
		r.From, r.FromTime = tail[0].Seq, tail[0].Time.Go()
	}
	return r, nil
}
