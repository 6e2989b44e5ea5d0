package client

import (
	"context"
	"errors"
	"fmt"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// Published heads.
//
// A dir host publishes the signed head of each log it sequences in the
// DHT (see package node, headpub.go), where any reader finds it through
// its own node. A host that serves an older head than the published one
// has rolled the tree back, and two signed heads for one sequence number
// are a fork, whichever host signed them. The published head is believed
// only if a dir host in the user's key record signed it; one that is older
// than a head already seen is not held against anyone, since publishing
// lags the log.

// A HeadsReport is what CheckHeads found about a user's log.
type HeadsReport struct {
	User      spindle.UserName
	Served    *dirlog.Head // The head the user's dir host served, or nil if the caller may not see it.
	ServedErr error        // Why Served is nil.
	Published *dirlog.Head // The newest head in the DHT, or nil if none is published.
	Seen      *dirlog.Head // The newest head this client has seen, after the check.
}

// CheckHeads compares the head of owner's log that its dir host serves
// (if the caller has a right in the tree) with the newest published in
// the DHT and the newest the client has seen. A published head not signed
// by a dir host of owner, a fork, and a host serving an older head than
// the published one are Integrity errors naming the user, the sequences
// and the peer, with their evidence saved (Config.Evidence).
func (c *Client) CheckHeads(ctx context.Context, owner spindle.UserName) (*HeadsReport, error) {
	const op spindle.Op = "client.CheckHeads"
	owner, err := spindle.CleanUser(owner)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	rep := &HeadsReport{User: owner}
	served, err := c.svc.Head(ctx, owner)
	switch {
	case errors.Is(err, spindle.Integrity):
		return nil, spindle.E(op, err)
	case err != nil:
		rep.ServedErr = err
	default:
		rep.Served = served
	}
	pub, err := c.PublishedHead(ctx, owner)
	if err != nil && !errors.Is(err, spindle.NotExist) {
		return rep, spindle.E(op, err)
	}
	rep.Published = pub
	if pub != nil {
		seen := c.heads.floor(owner)
		if seen != nil && pub.Seq < seen.Seq {
			// Publishing lags: nothing to hold against anyone.
		} else if err := c.svc.checkStep(ctx, seen, c.heads.anchor(owner), pub); err != nil {
			// A published head that moves the client must extend the
			// head it saw, as one that comes with an answer must.
			return rep, spindle.E(op, err)
		} else if err := c.heads.check(seen, pub); err != nil {
			return rep, spindle.E(op, c.svc.keepEvidence(err, seen, pub))
		}
		if rep.Served != nil && pub.Seq > rep.Served.Seq {
			via := c.svc.peer.String()
			err := spindle.E(op, spindle.Integrity, owner, fmt.Sprintf("rollback: served through %s, the log at sequence %d (signed by %s), but sequence %d (signed by %s) is published", via, rep.Served.Seq, rep.Served.Host, pub.Seq, pub.Host))
			ev := &Evidence{Kind: EvidenceRollback, User: owner, Peer: via, Time: spindle.Now(), Heads: []*dirlog.Head{pub, rep.Served}, Note: err.Error()}
			return rep, c.saved(err, ev)
		}
	}
	rep.Seen = c.heads.floor(owner)
	return rep, nil
}

// PublishedHead returns the newest head of owner's log published in the
// DHT, as the client's node finds it, checked against owner's key record:
// signed by one of owner's dir hosts (Integrity if not). NotExist if none
// is published.
func (c *Client) PublishedHead(ctx context.Context, owner spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "client.PublishedHead"
	resp, err := call[wire.DirPublishedRequest, wire.DirPublishedResponse](ctx, c.svc, wire.DirPublished, "", &wire.DirPublishedRequest{User: owner})
	if err != nil {
		return nil, spindle.E(op, err)
	}
	h := resp.Head
	if h == nil {
		return nil, spindle.E(op, spindle.IO, owner, "node sent no published head")
	}
	if h.User != owner {
		return nil, spindle.E(op, spindle.Integrity, owner, "node answered with the published head of "+string(h.User))
	}
	if err := c.verifyHead(ctx, h, false); err != nil {
		return nil, spindle.E(op, spindle.Integrity, owner, fmt.Errorf("published head of sequence %d: %w", h.Seq, err))
	}
	return h, nil
}

// saved saves ev if the client keeps evidence, and returns err naming the
// file.
func (c *Client) saved(err error, ev *Evidence) error {
	if c.svc.evidence == "" {
		return err
	}
	file, serr := saveEvidence(c.svc.evidence, ev)
	if serr != nil {
		c.log.Warn("cannot save evidence", "err", serr)
		return err
	}
	return spindle.E(spindle.Integrity, ev.User, fmt.Errorf("%w (evidence saved in %s)", err, file))
}

// VerifyEvidence checks evidence that a dir host of e.User misbehaved
// against e.User's current key record, and returns what it shows. Every
// head must be signed by a dir host of the user. A fork (two heads, one
// sequence number, two hashes or map roots) and a bad entry (one whose
// signature no key of its writer verifies) are proved; a rollback shows
// two genuine heads, and that the older was served after the newer was
// seen is the reporter's word. Evidence that shows nothing is Invalid;
// a head not signed by a dir host is Integrity.
func (c *Client) VerifyEvidence(ctx context.Context, e *Evidence) (string, error) {
	const op spindle.Op = "client.VerifyEvidence"
	for i, h := range e.Heads {
		if err := c.verifyHeadWith(ctx, h, true, false); err != nil {
			return "", spindle.E(op, spindle.Integrity, e.User, fmt.Errorf("head %d of the evidence: %w", i+1, err))
		}
	}
	switch e.Kind {
	case EvidenceFork:
		a, b := e.Heads[0], e.Heads[1]
		if a.Seq != b.Seq || dirlog.CheckHead(a, b) == nil {
			return "", spindle.E(op, spindle.Invalid, e.User, fmt.Sprintf("no fork: heads of sequences %d (%s) and %d (%s) agree", a.Seq, a.Hash, b.Seq, b.Hash))
		}
		return fmt.Sprintf("proved: fork of %s's log at sequence %d: %s signed %s, %s signed %s", e.User, a.Seq, a.Host, a.Hash, b.Host, b.Hash), nil
	case EvidenceRollback:
		newer, older := e.Heads[0], e.Heads[1]
		if older.Seq >= newer.Seq {
			return "", spindle.E(op, spindle.Invalid, e.User, fmt.Sprintf("no rollback: the head served (%d) is not older than the one seen (%d)", older.Seq, newer.Seq))
		}
		return fmt.Sprintf("both heads genuine: %s signed %s's log at sequence %d, %s at %d; that %s served %d after %d was seen is the reporter's word", newer.Host, e.User, newer.Seq, older.Host, older.Seq, e.Peer, older.Seq, newer.Seq), nil
	case EvidenceKeyFork:
		if c.keyLog == nil {
			return "", spindle.E(op, spindle.Invalid, "this client keeps no key log, so it knows no members to check the key heads against")
		}
		msg, err := c.keyLog.chk().CheckFork(e.Fork)
		if err != nil {
			return "", spindle.E(op, err)
		}
		return msg + " (the key cluster's log was forked: show this file to its operators)", nil
	case EvidenceBadEntry:
		err := c.checkSig(ctx, e.Entry)
		if err == nil {
			return "", spindle.E(op, spindle.Invalid, e.User, fmt.Sprintf("entry %d (%s of %s by %s) verifies: not evidence", e.Entry.Seq, e.Entry.Op, e.Entry.Entry.Name, e.Entry.Writer))
		}
		if errors.Is(err, spindle.IO) {
			return "", spindle.E(op, err)
		}
		return fmt.Sprintf("proved: entry %d of %s's log (%s of %s by %s) is bad: %v", e.Entry.Seq, e.User, e.Entry.Op, e.Entry.Entry.Name, e.Entry.Writer, err), nil
	}
	return "", spindle.E(op, spindle.Invalid, "unknown kind of evidence "+e.Kind)
}
