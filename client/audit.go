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
	// Checkpoint is the sequence number of the checkpoint a compacted log
	// starts with, 0 if the log is whole. Writers then counts the entries
	// the checkpoint kept and those after it.
	Checkpoint int64
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
//
// A compacted log starts with a checkpoint (see dirlog.Checkpoint): Audit
// checks that a dir host of the owner signed it, every entry it kept with
// the keys its writer held, that its items make the map root it names,
// and then the entries after it as above (dirlog.CheckLogFrom). What it
// cannot check is the entries the checkpoint dropped.
func (c *Client) Audit(ctx context.Context) (*AuditReport, error) {
	for try := 1; ; try++ {
		rep, _, _, err := c.audit(ctx)
		// NotExist: the node compacted the log while it was read.
		if err == nil || try == 3 || spindle.KindOf(err) != spindle.NotExist {
			return rep, err
		}
	}
}

// audit audits the client's own tree and returns, besides the report, the
// checkpoint the log starts with (nil if it is whole) and the entries
// after it, all checked against the report's head (see versions.go).
func (c *Client) audit(ctx context.Context) (*AuditReport, *dirlog.Checkpoint, []*dirlog.Entry, error) {
	const op spindle.Op = "client.Audit"
	// The checkpoint first: the head read after it is at or after it.
	resp, err := call[wire.DirCheckpointRequest, wire.DirCheckpointResponse](ctx, c.svc, wire.DirCheckpoint, c.user, &wire.DirCheckpointRequest{User: c.user})
	if err != nil {
		return nil, nil, nil, spindle.E(op, c.user, err)
	}
	var cp *dirlog.Checkpoint
	var base int64 // Entries before the first one read.
	if len(resp.Checkpoint) > 0 {
		if cp, err = dirlog.UnmarshalCheckpoint(resp.Checkpoint); err != nil {
			return nil, nil, nil, spindle.E(op, c.user, spindle.Integrity, err)
		}
		u, err := c.lookupUser(ctx, c.user, false)
		if err != nil {
			return nil, nil, nil, spindle.E(op, c.user, err)
		}
		if err := cp.Verify(ctx, nil, nil, dirHosts(u.DirHosts)); err != nil {
			return nil, nil, nil, spindle.E(op, c.user, err)
		}
		base = cp.Seq
	}
	h, err := c.svc.Head(ctx, c.user)
	if err != nil {
		return nil, nil, nil, spindle.E(op, c.user, err)
	}
	var all []*dirlog.Entry
	for base+int64(len(all)) < h.Seq {
		from := base + int64(len(all)) + 1
		resp, err := call[wire.DirEntriesRequest, wire.DirEntriesResponse](ctx, c.svc, wire.DirEntries, c.user, &wire.DirEntriesRequest{User: c.user, From: from, Max: auditPage})
		if err != nil {
			return nil, nil, nil, spindle.E(op, c.user, err)
		}
		if len(resp.Log) == 0 {
			break // CheckLog says what is missing.
		}
		for _, b := range resp.Log {
			e, err := dirlog.UnmarshalEntry(b)
			if err != nil {
				return nil, nil, nil, spindle.E(op, c.user, spindle.Integrity, err)
			}
			if e.Seq != base+int64(len(all))+1 {
				return nil, nil, nil, spindle.E(op, c.user, spindle.Integrity, fmt.Sprintf("node sent entry %d where entry %d belongs", e.Seq, base+int64(len(all))+1))
			}
			all = append(all, e)
			if e.Seq == h.Seq {
				break
			}
		}
	}
	if err := dirlog.CheckLogFrom(cp, all, h); err != nil {
		return nil, nil, nil, spindle.E(op, c.user, err)
	}
	rep := &AuditReport{Head: h, Writers: make(map[spindle.UserName]int)}
	tail := all
	if cp != nil {
		rep.Checkpoint = cp.Seq
		all = append(cp.Entries[:len(cp.Entries):len(cp.Entries)], all...)
	}
	for _, e := range all {
		if serr := c.checkSig(ctx, e); serr != nil {
			err := spindle.E(op, c.user, spindle.Integrity, fmt.Errorf("entry %d (%s of %s by %s), served through %s: %v", e.Seq, e.Op, e.Entry.Name, e.Writer, c.svc.peer, serr))
			if errors.Is(serr, spindle.IO) {
				return nil, nil, nil, err // The writer's keys could not be looked up: no evidence.
			}
			ev := &Evidence{Kind: EvidenceBadEntry, User: c.user, Peer: c.svc.peer.String(), Time: spindle.Now(), Heads: []*dirlog.Head{h}, Entry: e, Note: err.Error()}
			return nil, nil, nil, c.saved(err, ev)
		}
		rep.Writers[e.Writer]++
	}
	return rep, cp, tail, nil
}
