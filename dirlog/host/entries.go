package host

import (
	"context"
	"errors"
	"fmt"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// MaxEntriesBytes bounds the encoded entries one [Server.Entries] call
// returns, so that an answer fits a message of the client protocol.
const MaxEntriesBytes = 8 << 20

// errEnough stops a Scan.
var errEnough = errors.New("enough")

// ownerOnly checks that user and owner are valid names and that user is
// owner: only the owner may read a tree's log (see [Server.Entries]).
func ownerOnly(user, owner spindle.UserName) error {
	if err := dirlog.CheckUser(user); err != nil {
		return err
	}
	if err := dirlog.CheckUser(owner); err != nil {
		return err
	}
	if user != owner {
		return spindle.E(spindle.Private, spindle.PathName(owner+"/"), user, "only the owner may read a tree's log")
	}
	return nil
}

// ownerLog returns owner's log, for user, unless it is damaged; nil, nil
// if there is none.
func (s *Server) ownerLog(user, owner spindle.UserName) (*hosted, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.damageFor(owner, user); err != nil {
		return nil, err
	}
	return s.served(owner), nil
}

// Entries returns the entries of owner's log from sequence from (1 for the
// start) on: at most max of them and at most MaxEntriesBytes encoded, but
// always at least one if there is one. Only the owner may read the log: it
// holds every name, writer and wrapped key of the tree, where readers see
// only what the Access files let them. With the entries and a signed head,
// the owner checks the head against the log (see [dirlog.MapRoot]), as `spin
// audit` does. Others get Private. Once the log is compacted, entries up
// to its checkpoint are gone: asking for them is NotExist, and a reader
// starts from [Server.Checkpoint] instead.
func (s *Server) Entries(ctx context.Context, user, owner spindle.UserName, from int64, max int) ([]*dirlog.Entry, error) {
	const op spindle.Op = "dirlog.Entries"
	if err := ownerOnly(user, owner); err != nil {
		return nil, spindle.E(op, err)
	}
	if from < 1 || max < 1 {
		return nil, spindle.E(op, spindle.Invalid, owner, fmt.Sprintf("entries from %d, at most %d", from, max))
	}
	l, err := s.ownerLog(user, owner)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if l == nil {
		return nil, nil
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.log == nil {
		return nil, nil
	}
	var out []*dirlog.Entry
	size := 0
	var seq int64 // Records are entries 1, 2, ... in order (see replay).
	if l.cp != nil {
		if from <= l.cp.Seq {
			return nil, spindle.E(op, spindle.NotExist, owner, fmt.Sprintf("entries 1 to %d of the log were compacted into a checkpoint: read it (Server.Checkpoint) and the entries from %d", l.cp.Seq, l.cp.Seq+1))
		}
		seq = l.cp.Seq
	}
	// The checkpoint's records, then entries seq+1 on: a page is read
	// from its first record, not from the log's start.
	first := l.cpRecs + int(from-1-seq)
	seq = from - 1
	err = l.log.ScanFrom(ctx, first, func(b []byte) error {
		seq++
		p := dirlog.DecodePending(b)
		if p.Err != nil {
			return p.Err
		}
		if p.Entry.Seq != seq {
			return spindle.E(spindle.Integrity, owner, fmt.Sprintf("stored log changed while in use: record %d holds entry %d", seq, p.Entry.Seq))
		}
		n := len(p.Record.Entry)
		if len(out) > 0 && (len(out) >= max || size+n > MaxEntriesBytes) {
			return errEnough
		}
		out = append(out, p.Entry)
		size += n
		return nil
	})
	if err != nil && err != errEnough {
		return nil, spindle.E(op, owner, err)
	}
	return out, nil
}
