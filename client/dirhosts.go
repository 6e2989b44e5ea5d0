package client

import (
	"context"
	"fmt"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/p2p"
)

// SetDirHosts names the nodes that hold the user's directory log, in
// order, in the user's key record: the first is the sequencer, which takes
// the writes; the others mirror the log and serve reads while it is down
// (see package node, mirror.go). Moving a mirror first makes it the
// sequencer; it should be caught up (its head the sequencer's), or the
// entries it lacks are lost from the tree and the hosts that hold them
// report a fork.
func (c *Client) SetDirHosts(ctx context.Context, hosts []spindle.PeerAddr) error {
	const op spindle.Op = "client.SetDirHosts"
	if len(hosts) == 0 {
		return spindle.E(op, c.user, spindle.Invalid, "no dir host: name at least one node")
	}
	if len(hosts) > keylog.MaxDirHosts {
		return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("%d dir hosts, at most %d", len(hosts), keylog.MaxDirHosts))
	}
	seen := make(map[string]bool)
	for _, a := range hosts {
		info, err := p2p.ParsePeerAddr(a)
		if err != nil {
			return spindle.E(op, c.user, spindle.Invalid, fmt.Errorf("dir host %q: %w", a, err))
		}
		if seen[info.ID.String()] {
			return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("dir host %s named twice", info.ID))
		}
		seen[info.ID.String()] = true
	}
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	next := keylog.Next(cur)
	next.DirHosts = append([]spindle.PeerAddr(nil), hosts...)
	if err := c.putUser(ctx, next); err != nil {
		return spindle.E(op, c.user, err)
	}
	// A new version of the record ends the sessions of the old one: sign
	// in again, as Signup does, so that block puts (which do not sign in
	// again on their own) go on.
	if err := c.auth(ctx); err != nil {
		return spindle.E(op, c.user, err)
	}
	return nil
}

// SetDirQuorum sets, in the user's key record, how many of the user's dir
// hosts other than a head's signer must cosign each head that proves an
// answer from the user's tree (spindle.User.DirQuorum); readers refuse a
// head with fewer. It must be below the number of dir hosts; 0 asks for
// none. Each of the other hosts replayed the log, so a quorum of 1 makes a
// lie about the tree map need two dishonest hosts, at the cost of a round
// trip to a mirror for the first read after each write.
func (c *Client) SetDirQuorum(ctx context.Context, quorum int) error {
	const op spindle.Op = "client.SetDirQuorum"
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	if quorum < 0 || quorum > 0 && quorum >= len(cur.DirHosts) {
		return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("dir quorum %d with %d dir hosts: it counts the hosts other than the one that signs a head", quorum, len(cur.DirHosts)))
	}
	if quorum == cur.DirQuorum {
		return nil
	}
	next := keylog.Next(cur)
	next.DirQuorum = quorum
	if err := c.putUser(ctx, next); err != nil {
		return spindle.E(op, c.user, err)
	}
	// As in SetDirHosts: a new version ends the old sessions.
	if err := c.auth(ctx); err != nil {
		return spindle.E(op, c.user, err)
	}
	return nil
}

// SetKeep sets, in the user's key record, how long the user's dir hosts
// keep every earlier state of the user's tree readable (spindle.User.Keep):
// a window of d, rounded up to a whole second; 0 leaves it to each dir
// host's default, and spindle.KeepNone as d (in seconds, -1) keeps none.
func (c *Client) SetKeep(ctx context.Context, d time.Duration) error {
	const op spindle.Op = "client.SetKeep"
	keep := int64(-1)
	if d >= 0 {
		keep = int64((d + time.Second - 1) / time.Second)
	} else if d != -time.Second {
		return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("a window of %v: want 0 or more, or none", d))
	}
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	if keep == cur.Keep {
		return nil
	}
	next := keylog.Next(cur)
	next.Keep = keep
	if err := c.putUser(ctx, next); err != nil {
		return spindle.E(op, c.user, err)
	}
	// As in SetDirHosts: a new version ends the old sessions.
	if err := c.auth(ctx); err != nil {
		return spindle.E(op, c.user, err)
	}
	return nil
}
