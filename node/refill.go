package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	dirhost "spindle.dev/dirlog/host"
)

// Refilling damaged logs.
//
// A log this node hosts that it found damaged when it started (bytes that
// fail their checks, or a log missing or shorter than the mark of what
// the node had stored: see dirhost.Marker) is refilled from another dir
// host of its user, as a mirror pulls: the entries that verify are kept,
// the rest set aside beside the log, and every entry the other host
// holds after them is checked as an append. Until that is done the log
// is served to nobody (clients read from the user's other dir hosts). A
// user with no other dir host, or none that answers, keeps a damaged
// log until the operator runs spin node -repair, which then accepts the
// entries that verify and reports what was lost.

// refillEvery is how often a node tries again to refill the damaged logs
// that no other dir host could refill yet.
const refillEvery = 5 * time.Second

// refillLoop refills the damaged logs, every refillEvery, until the node
// closes: those found as it started, and any found later (a log that
// waited for the key cluster and turned out damaged).
func (n *Node) refillLoop() {
	accept := make(map[spindle.UserName]bool)
	for _, u := range n.cfg.Repair {
		accept[u] = true
	}
	for {
		var users []spindle.UserName
		for _, d := range n.dir.Damaged() {
			users = append(users, d.User)
		}
		for u := range n.dir.Refilling() {
			users = append(users, u)
		}
		slices.Sort(users)
		for _, u := range slices.Compact(users) {
			ctx, cancel := context.WithTimeout(n.ctx, time.Minute)
			n.refill(ctx, u, accept[u])
			cancel()
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(refillEvery):
		}
	}
}

// refill refills owner's damaged log from another dir host, or, if there
// is none to take it from and accept is set, serves the entries of it
// that verify.
func (n *Node) refill(ctx context.Context, owner spindle.UserName, accept bool) {
	rec, err := n.kst().ks.Lookup(ctx, owner)
	if err != nil {
		n.log.Warn("damaged directory log: cannot look up its other dir hosts yet", "user", owner, "err", oneLine(err.Error()))
		return
	}
	hosts, me := dirHostPeers(rec, n.host.ID())
	var others []peer.AddrInfo
	for i, h := range hosts {
		if i != me {
			others = append(others, h)
		}
	}
	if len(others) == 0 && !accept {
		return // Damaged until the operator decides; reported as the node started.
	}
	d := n.dir.Refilling()[owner]
	if d == nil {
		for _, dd := range n.dir.Damaged() {
			if dd.User == owner {
				d = dd
			}
		}
		h, err := n.dir.BeginRefill(ctx, owner)
		if err != nil {
			n.log.Error("damaged directory log: cannot set aside the entries that do not verify", "user", owner, "err", oneLine(err.Error()))
			return
		}
		n.log.Warn("damaged directory log: kept the entries that verify, refilling the rest from another dir host", "user", owner, "kept", h.Seq, "others", len(others), "damage", oneLine(fmt.Sprint(d)))
	}
	rctx := dirhost.RefillContext(ctx, owner)
	var errs []error
	for _, h := range others {
		err := n.mirrors.pull(rctx, owner, h)
		if err == nil {
			head, _ := n.dir.Head(rctx, owner)
			n.dir.EndRefill(owner)
			n.log.Warn("damaged directory log refilled", "user", owner, "from", h.ID, "seq", head.Seq, "lost", lostAfter(d, head.Seq))
			return
		}
		errs = append(errs, fmt.Errorf("dir host %s: %w", h.ID, err))
	}
	if accept {
		head, _ := n.dir.Head(rctx, owner)
		n.dir.EndRefill(owner)
		n.log.Warn("damaged directory log repaired: no other dir host could refill it, so it is served with the entries that verify", "user", owner, "seq", head.Seq, "lost", lostAfter(d, head.Seq), "err", oneLine(errors.Join(errs...).Error()))
		return
	}
	n.log.Warn("damaged directory log: no other dir host could refill it yet; trying again", "user", owner, "err", oneLine(errors.Join(errs...).Error()))
}

// lostAfter says what of the log, as d found it, a refill or repair that
// reached seq did not bring back.
func lostAfter(d *dirhost.Damage, seq int64) string {
	if d == nil || d.Stored <= seq {
		return "nothing"
	}
	return fmt.Sprintf("entries %d to %d, which this host had stored, are on no other dir host that answered; clients that saw them report a rollback", seq+1, d.Stored)
}
