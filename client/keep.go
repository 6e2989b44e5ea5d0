package client

import (
	"context"
	"time"

	"spindle.dev"
)

// A Retention says which states of the client's own tree can be read:
// those after entry From (the start of the log or its checkpoint; 0 for
// the empty tree) up to the head, To.
type Retention struct {
	Keep     int64 // The key record's window in seconds: 0 for the dir hosts' default, spindle.KeepNone for none.
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
	r := Retention{Keep: u.Keep, To: h.Seq, ToTime: h.Time.Go()}
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
