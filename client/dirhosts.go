package client

import (
	"context"
	"fmt"

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
