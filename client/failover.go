package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Writes while the sequencer is down. A tree's writes go to its first dir
// host only; while that host cannot be reached they fail with a
// *SequencerDownError, which says which mirrors hold the newest head of
// the log the client knows of. Failover then makes such a mirror the
// first dir host, so that it sequences the writes from the log it holds;
// a mirror that lacks entries the client has seen is never moved first,
// since those entries would be lost from the tree.

// A HostHead is what one dir host of a tree offers: its head of the log,
// or why it gave none.
type HostHead struct {
	// Host is the dir host as the owner's key record names it.
	Host spindle.PeerAddr
	// Head is the head the host signed, nil if Err is set.
	Head *dirlog.Head
	// Err says why the host gave no head (IO: it cannot be reached), or
	// why its head cannot be taken (Integrity: a fork).
	Err error
	// CaughtUp reports whether Head is the newest head known: the newest
	// the client has seen, and no other dir host offers a newer one.
	CaughtUp bool
}

// hostHeadTimeout bounds the question to each dir host for its head, so
// that a hung host does not hold up the error that names the others.
var hostHeadTimeout = 15 * time.Second

// DirHostHeads asks each dir host of owner's tree, in the order of the
// owner's key record as looked up afresh, for its head of the log. Heads
// are checked as every answer's are (signed by a dir host the record
// names, no fork of the newest seen); the newest becomes the newest seen.
// It returns the hosts' heads and the newest head known, nil if none.
func (c *Client) DirHostHeads(ctx context.Context, owner spindle.UserName) ([]HostHead, *dirlog.Head, error) {
	const op spindle.Op = "client.DirHostHeads"
	u, err := c.lookupUser(ctx, owner, true)
	if err != nil {
		return nil, nil, spindle.E(op, owner, err)
	}
	heads, newest := c.svc.hostHeads(ctx, owner, u.DirHosts)
	return heads, newest, nil
}

// hostHeads asks each of hosts, at once, for its head of owner's log; see
// DirHostHeads. A host that does not parse is reported as Invalid.
func (r *remote) hostHeads(ctx context.Context, owner spindle.UserName, hosts []spindle.PeerAddr) ([]HostHead, *dirlog.Head) {
	out := make([]HostHead, len(hosts))
	var wg sync.WaitGroup
	for i, a := range hosts {
		out[i].Host = a
		info, err := p2p.ParsePeerAddr(a)
		if err != nil {
			out[i].Err = spindle.E(spindle.Invalid, fmt.Errorf("dir host %q: %w", a, err))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i].Head, out[i].Err = r.headOf(ctx, owner, info.ID)
		}()
	}
	wg.Wait()
	for i := range out {
		h := &out[i]
		if h.Head == nil {
			continue
		}
		// Record the newest head as seen; one that forks from the
		// newest seen is refused. One older than it is only behind.
		floor := r.heads.floor(owner)
		if floor != nil && h.Head.Seq < floor.Seq {
			continue
		}
		if err := r.heads.check(floor, h.Head); err != nil {
			h.Err = r.keepEvidence(err, floor, h.Head)
			h.Head = nil
		}
	}
	newest := r.heads.floor(owner)
	for i := range out {
		h := &out[i]
		h.CaughtUp = h.Head != nil && (newest == nil || h.Head.Seq >= newest.Seq)
	}
	return out, newest
}

// headOf asks the dir host to for its head of owner's log and checks the
// head's signature.
func (r *remote) headOf(ctx context.Context, owner spindle.UserName, to peer.ID) (*dirlog.Head, error) {
	ctx, cancel := context.WithTimeout(ctx, hostHeadTimeout)
	defer cancel()
	resp, err := callTo[wire.DirHeadRequest, wire.DirHeadResponse](ctx, r, wire.DirHead, &wire.DirHeadRequest{User: owner}, to)
	if err != nil {
		return nil, err
	}
	h := resp.Head
	switch {
	case h == nil:
		return nil, spindle.E(spindle.IO, fmt.Sprintf("dir host %s sent no head", to))
	case h.User != owner:
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("dir host %s answered with the head of %s's log", to, h.User))
	}
	if r.verifyHead != nil {
		// A host's head here proves no answer: it needs no cosignatures.
		if err := r.verifyHead(ctx, h, false); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// A SequencerDownError is the failure of a write to a tree whose
// sequencer, the first dir host its owner's key record names, cannot be
// reached. It comes wrapped in an IO error. Mirrors holds what the other
// dir hosts offered: the owner may make one whose head is CaughtUp the
// sequencer (Failover), and no other without losing entries.
type SequencerDownError struct {
	Owner     spindle.UserName
	Sequencer spindle.PeerAddr // As the key record names it.
	Mirrors   []HostHead       // The other dir hosts, in the record's order.
	Newest    *dirlog.Head     // The newest head known of the log; nil if none.
	Err       error            // Why the sequencer could not be reached.
}

func (e *SequencerDownError) Error() string {
	msg := fmt.Sprintf("the sequencer of %s's tree, dir host %s (the first its key record names), cannot be reached, and %s",
		e.Owner, hostID(e.Sequencer), mirrorsText(e.Mirrors, e.Newest))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *SequencerDownError) Unwrap() error { return e.Err }

// CaughtUp returns the mirrors whose head is the newest known, in the
// record's order.
func (e *SequencerDownError) CaughtUp() []spindle.PeerAddr {
	var out []spindle.PeerAddr
	for _, m := range e.Mirrors {
		if m.CaughtUp {
			out = append(out, m.Host)
		}
	}
	return out
}

// mirrorsText says which of the mirrors hold the newest head, and what
// the others offer.
func mirrorsText(mirrors []HostHead, newest *dirlog.Head) string {
	if len(mirrors) == 0 {
		return "the tree has no other dir host"
	}
	var up, notes []string
	if newest != nil {
		notes = append(notes, fmt.Sprintf("sequence %d", newest.Seq))
	}
	for _, m := range mirrors {
		id := hostID(m.Host)
		switch {
		case m.CaughtUp:
			up = append(up, id)
		case m.Err != nil:
			notes = append(notes, fmt.Sprintf("dir host %s gave no head: %v", id, m.Err))
		default:
			notes = append(notes, fmt.Sprintf("dir host %s is behind at sequence %d", id, m.Head.Seq))
		}
	}
	var b strings.Builder
	switch len(up) {
	case 0:
		b.WriteString("no mirror holds")
	case 1:
		fmt.Fprintf(&b, "dir host %s holds", up[0])
	default:
		fmt.Fprintf(&b, "dir hosts %s hold", strings.Join(up, ", "))
	}
	b.WriteString(" the newest head this client has seen")
	if len(notes) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(notes, "; "))
	}
	return b.String()
}

// hostID returns the peer ID a dir host's address ends in, or the address
// if it does not parse.
func hostID(a spindle.PeerAddr) string {
	if info, err := p2p.ParsePeerAddr(a); err == nil {
		return info.ID.String()
	}
	return string(a)
}

// sequencerDown returns the error for a write to owner's tree that its
// sequencer seq could not take because it could not be reached (err),
// naming what the other dir hosts of the record offer.
func (r *remote) sequencerDown(ctx context.Context, owner spindle.UserName, seq peer.ID, err error) error {
	e := &SequencerDownError{Owner: owner, Sequencer: spindle.PeerAddr(seq.String()), Err: err}
	if r.hostAddrs != nil {
		var others []spindle.PeerAddr
		for _, a := range r.hostAddrs(ctx, owner) {
			if info, perr := p2p.ParsePeerAddr(a); perr == nil && info.ID == seq {
				e.Sequencer = a
				continue
			}
			others = append(others, a)
		}
		e.Mirrors, e.Newest = r.hostHeads(ctx, owner, others)
	}
	return spindle.E(owner, spindle.IO, e)
}

// Failover makes a mirror of the user's tree its sequencer, when the
// sequencer cannot be reached: the first mirror, in the key record's
// order, whose head is the newest known (see DirHostHeads) goes first,
// and the others, the old sequencer among them, follow in their order.
// It refuses, changing nothing, when the sequencer answers (Exist: there
// is nothing to fail over from) and when no mirror holds the newest head
// (a *SequencerDownError, wrapped in an IO error). It returns the new
// record.
func (c *Client) Failover(ctx context.Context) (*spindle.User, error) {
	const op spindle.Op = "client.Failover"
	u, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return nil, spindle.E(op, c.user, err)
	}
	if len(u.DirHosts) == 0 {
		return nil, spindle.E(op, c.user, spindle.NotExist, ErrNoDirHost)
	}
	heads, newest := c.svc.hostHeads(ctx, c.user, u.DirHosts)
	seq := heads[0]
	if seq.CaughtUp {
		return nil, spindle.E(op, c.user, spindle.Exist, fmt.Sprintf("the sequencer of your tree, dir host %s, answers with the newest head (sequence %d): there is nothing to fail over from", hostID(seq.Host), seq.Head.Seq))
	}
	if seq.Head != nil {
		seq.Err = fmt.Errorf("it answers with a head behind the newest, at sequence %d", seq.Head.Seq)
	}
	if errors.Is(seq.Err, spindle.Integrity) {
		// The sequencer answered with a head that forks from the newest
		// known: that is for spin audit, not for a failover.
		return nil, spindle.E(op, c.user, seq.Err)
	}
	down := &SequencerDownError{Owner: c.user, Sequencer: seq.Host, Mirrors: heads[1:], Newest: newest, Err: seq.Err}
	to := -1
	for i, m := range heads[1:] {
		if m.CaughtUp {
			to = i + 1
			break
		}
	}
	if to < 0 {
		return nil, spindle.E(op, c.user, spindle.IO, down)
	}
	hosts := []spindle.PeerAddr{u.DirHosts[to]}
	for i, a := range u.DirHosts {
		if i != to {
			hosts = append(hosts, a)
		}
	}
	if err := c.SetDirHosts(ctx, hosts); err != nil {
		return nil, spindle.E(op, c.user, err)
	}
	c.log.Info("sequencing moved", "user", c.user, "from", hostID(seq.Host), "to", hostID(u.DirHosts[to]), "seq", heads[to].Head.Seq)
	return c.lookupUser(ctx, c.user, true)
}
