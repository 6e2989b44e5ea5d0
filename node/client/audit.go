package client

import (
	"context"
	"errors"
	"fmt"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// An AuditReport says what an audit of a tree's log found.
type AuditReport struct {
	Head    *dirlog.Head // The head checked, signed by a dir host of the owner.
	Writers map[spindle.UserName]int
}

// auditPage is how many entries one request asks for.
const auditPage = 4096

// Audit checks the dir host's word about the client's own tree against the
// log itself: it takes the current signed head (checked as every head is:
// signed by a dir host the key record names, not behind one seen before),
// reads the whole log, checks every entry's signature with the keys its
// writer held at that point, and recomputes the tree map the head commits
// to (dirlog.CheckLog). A host that dropped, reverted, reordered or
// invented an entry, or signed a head the log does not make, fails it with
// an Integrity error that shows both values. Only the owner may read a
// tree's log.
func (c *Client) Audit(ctx context.Context) (*AuditReport, error) {
	const op spindle.Op = "client.Audit"
	h, err := c.svc.Head(ctx, c.user)
	if err != nil {
		return nil, spindle.E(op, c.user, err)
	}
	var all []*dirlog.Entry
	for int64(len(all)) < h.Seq {
		from := int64(len(all)) + 1
		resp, err := c.svc.call(ctx, &wire.Request{Method: wire.DirEntries, User: c.user, Seq: from, Size: auditPage})
		if err != nil {
			return nil, spindle.E(op, c.user, err)
		}
		if len(resp.Log) == 0 {
			break // CheckLog says what is missing.
		}
		for _, b := range resp.Log {
			e, err := dirlog.UnmarshalEntry(b)
			if err != nil {
				return nil, spindle.E(op, c.user, spindle.Integrity, err)
			}
			if e.Seq != int64(len(all))+1 {
				return nil, spindle.E(op, c.user, spindle.Integrity, fmt.Sprintf("node sent entry %d where entry %d belongs", e.Seq, len(all)+1))
			}
			all = append(all, e)
			if e.Seq == h.Seq {
				break
			}
		}
	}
	if err := dirlog.CheckLog(all, h); err != nil {
		return nil, spindle.E(op, c.user, err)
	}
	rep := &AuditReport{Head: h, Writers: make(map[spindle.UserName]int)}
	for _, e := range all {
		if serr := c.checkSig(ctx, e); serr != nil {
			err := spindle.E(op, c.user, spindle.Integrity, fmt.Errorf("entry %d (%s of %s by %s), served through %s: %v", e.Seq, e.Op, e.Entry.Name, e.Writer, c.svc.peer, serr))
			if errors.Is(serr, spindle.IO) {
				return nil, err // The writer's keys could not be looked up: no evidence.
			}
			ev := &Evidence{Kind: EvidenceBadEntry, User: c.user, Peer: c.svc.peer.String(), Time: spindle.Now(), Heads: []*dirlog.Head{h}, Entry: e, Note: err.Error()}
			return nil, c.saved(err, ev)
		}
		rep.Writers[e.Writer]++
	}
	return rep, nil
}
