package host

import (
	"context"
	"fmt"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Compact replaces owner's log with a checkpoint of its tree now (or, if
// Config.Retain keeps a window of earlier states, of its tree at the start
// of the window; see keep.go), signed
// by the host if the server has a Host signer (see [dirlog.Checkpoint]): entries
// 1 to the head are dropped, and the entries appended after are kept
// after the checkpoint. Every item's signed entries stay in the
// checkpoint, so every signature a reader checks still verifies. The
// replacement is durable and atomic: a crash leaves the old log or the
// new one. It returns the checkpoint. Appends to the log wait while it
// runs. A log with no entries, or none since its checkpoint, or none
// since it outside its retention window, is left alone and its
// checkpoint, if any, returned.
func (s *Server) Compact(ctx context.Context, owner spindle.UserName) (*dirlog.Checkpoint, error) {
	const op spindle.Op = "dirlog.Compact"
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	s.mu.RLock()
	if err := s.damageFor(owner, ""); err != nil {
		s.mu.RUnlock()
		return nil, spindle.E(op, err)
	}
	l := s.served(owner)
	s.mu.RUnlock()
	if l == nil {
		return nil, spindle.E(op, spindle.NotExist, owner, "no log to compact")
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	keep, pins := s.retained(ctx, owner)
	return s.compactTo(ctx, op, l, keep, pins)
}

// compact is Compact with l's appendMu held.
func (s *Server) compact(ctx context.Context, op spindle.Op, l *hosted) (*dirlog.Checkpoint, error) {
	if l.log == nil {
		return nil, spindle.E(op, spindle.NotExist, l.user, "no log to compact")
	}
	s.mu.RLock()
	if l.t.Seq == 0 {
		s.mu.RUnlock()
		return nil, spindle.E(op, spindle.NotExist, l.user, "the log has no entries to compact")
	}
	if l.cp != nil && l.cp.Seq == l.t.Seq {
		cp := l.cp
		s.mu.RUnlock()
		return cp, nil
	}
	cp := l.t.Checkpoint()
	s.mu.RUnlock()
	if err := s.replaceWith(ctx, op, l, cp, nil); err != nil {
		return nil, err
	}
	return cp, nil
}

// replaceWith signs cp, if the server has a Host signer, and replaces l's
// log with it followed by tail, the stored records of the entries after
// it. l's appendMu is held.
func (s *Server) replaceWith(ctx context.Context, op spindle.Op, l *hosted, cp *dirlog.Checkpoint, tail [][]byte) error {
	if s.cfg.Host != nil {
		if err := cp.Sign(s.cfg.Host); err != nil {
			return spindle.E(op, err)
		}
	}
	chunks := cp.Chunks()
	if err := l.log.Replace(ctx, append(chunks, tail...)...); err != nil {
		// The log may or may not have been replaced: learn which.
		var ls dirlog.LogScan
		if serr := l.log.Scan(ctx, func(b []byte) error { ls.Add(b); return nil }); serr != nil {
			return spindle.E(op, l.user, fmt.Errorf("%w; and then the log could not be read: %v", err, serr))
		}
		if got, _ := ls.Chunker.Checkpoint(); got != nil && got.Seq == cp.Seq && got.Hash == cp.Hash {
			l.cp, l.cpRecs = got, ls.NChunks
			l.replaced.Add(1)
		}
		return spindle.E(op, l.user, err)
	}
	l.cp, l.cpRecs = cp, len(chunks)
	l.replaced.Add(1)
	return nil
}

// startCompactor starts the goroutine that compacts logs in the
// background once Config.CompactAfter says they are due, so that the
// append that crosses the threshold does not wait for the compaction.
// Close ends it.
func (s *Server) startCompactor() {
	if s.cfg.CompactAfter <= 0 {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	s.stop, s.stopped = stop, make(chan struct{})
	s.compactDue = make(map[spindle.UserName]bool)
	s.compactWake = make(chan struct{}, 1)
	go s.compactor(ctx)
}

// stopCompactor ends the compactor, if there is one, and waits for it: a
// compaction in progress finishes first, and logs still due are left
// for the next start.
func (s *Server) stopCompactor() {
	if s.stop == nil {
		return
	}
	s.stop()
	<-s.stopped
}

// compactor compacts the logs noteAppended finds due, one at a time,
// until ctx ends.
func (s *Server) compactor(ctx context.Context) {
	defer close(s.stopped)
	defer func() {
		s.compactMu.Lock()
		for u := range s.compactDue {
			delete(s.compactDue, u)
			s.compactWG.Done()
		}
		s.compactMu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.compactWake:
		}
		for {
			s.compactMu.Lock()
			var user spindle.UserName
			for u := range s.compactDue {
				user = u
				break
			}
			s.compactMu.Unlock()
			if user == "" {
				break
			}
			if ctx.Err() == nil {
				s.compactDueLog(ctx, user)
			}
			s.compactMu.Lock()
			delete(s.compactDue, user)
			s.compactMu.Unlock()
			s.compactWG.Done()
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// compactDueLog compacts user's log if Config.CompactAfter says it is
// due. A failure is logged, not returned: the entries are stored.
func (s *Server) compactDueLog(ctx context.Context, user spindle.UserName) {
	s.mu.RLock()
	l, closed := s.served(user), s.closed
	s.mu.RUnlock()
	if l == nil || closed {
		return
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if !s.due(l) {
		return
	}
	keep, pins := s.retained(ctx, user)
	if _, err := s.compactTo(ctx, spindle.Op("dirlog.Compact"), l, keep, pins); err != nil {
		s.cfg.Logger.Error("dirlog: compaction failed; the log is whole", "user", string(l.user), "err", err)
	}
}

// due reports whether Config.CompactAfter says l is to be compacted. l's
// appendMu is held.
func (s *Server) due(l *hosted) bool {
	k := s.cfg.CompactAfter
	if k <= 0 || l.log == nil {
		return false
	}
	if !l.holdUntil.IsZero() && s.now().Before(l.holdUntil) {
		return false // Every entry past the threshold is inside the retention window.
	}
	var since int64
	if l.cp != nil {
		since = l.cp.Seq
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return l.t != nil && l.t.Seq-since > int64(k)
}

// noteAppended hands l to the compactor if an append made it due. l's
// appendMu is held.
func (s *Server) noteAppended(l *hosted) {
	if s.compactDue == nil || !s.due(l) {
		return
	}
	select {
	case <-s.stopped:
		return // Closed: left for the next start.
	default:
	}
	s.compactMu.Lock()
	if !s.compactDue[l.user] {
		s.compactDue[l.user] = true
		s.compactWG.Add(1)
	}
	s.compactMu.Unlock()
	select {
	case s.compactWake <- struct{}{}:
	default:
	}
}

// compactions waits until the compactor has done every compaction due
// so far: for tests.
func (s *Server) compactions() { s.compactWG.Wait() }

// Checkpoint returns the checkpoint owner's log starts with, or nil if the
// log is whole (or empty). Only the owner may read it, as for
// [Server.Entries]; with the entries after it, read with Entries from
// Seq+1, it is the whole log a mirror or an auditor needs (see
// [dirlog.CheckLogFrom] and [dirlog.Audit]). The caller must not change it.
func (s *Server) Checkpoint(ctx context.Context, user, owner spindle.UserName) (*dirlog.Checkpoint, error) {
	const op spindle.Op = "dirlog.Checkpoint"
	if err := ownerOnly(user, owner); err != nil {
		return nil, spindle.E(op, err)
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
	return l.cp, nil
}

// Export returns owner's log as stored, framed records without the file
// header (a checkpoint, if the log was compacted, and the entries after
// it), for a new mirror or an auditor to load with [dirlog.Audit]. Only the owner
// may read it.
func (s *Server) Export(ctx context.Context, user, owner spindle.UserName) ([]byte, error) {
	const op spindle.Op = "dirlog.Export"
	if err := ownerOnly(user, owner); err != nil {
		return nil, spindle.E(op, err)
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
	return l.log.Raw(ctx)
}

// StartFrom makes cp the start of owner's log on this server, for a
// mirror that is behind a source whose log was compacted past its own
// head: the log becomes cp alone, and entries after cp.Seq are appended
// as usual. It checks every entry's signature in cp with the server's
// Keys and KeyHistory and that cp's items make its map root (the host's
// signature is the caller's to check, with [dirlog.Checkpoint.Verify]: only it
// knows which hosts may vouch for the log). It refuses, with Integrity
// or Exist and leaving the log as it was, a checkpoint that does not
// verify, a log already past cp.Seq, or one that disagrees with cp (a
// head at cp.Seq, or an entry cp holds, with another hash). A log already
// at cp (same sequence and hash) is left alone. Like Compact the
// replacement is durable and atomic: a crash leaves the old log or cp.
func (s *Server) StartFrom(ctx context.Context, cp *dirlog.Checkpoint) error {
	const op spindle.Op = "dirlog.StartFrom"
	if cp == nil {
		return spindle.E(op, spindle.Invalid, "nil checkpoint")
	}
	owner := cp.User
	if err := dirlog.CheckUser(owner); err != nil {
		return spindle.E(op, spindle.Integrity, err)
	}
	// Re-decode, so that what is checked and stored is what a replay
	// will read, whatever the caller does with cp afterwards.
	cp, err := dirlog.UnmarshalCheckpoint(cp.Marshal())
	if err != nil {
		return spindle.E(op, spindle.Integrity, owner, err)
	}
	if cp.Seq < 1 {
		return spindle.E(op, spindle.Integrity, owner, fmt.Sprintf("checkpoint at sequence %d", cp.Seq))
	}
	t, invalid, fatal := cp.Tree(ctx, s.cfg.Keys, s.cfg.KeyHistory)
	if fatal != nil {
		return spindle.E(op, owner, fatal)
	}
	if invalid != nil {
		return spindle.E(op, spindle.Integrity, owner, fmt.Errorf("checkpoint at sequence %d: %w", cp.Seq, invalid))
	}
	l, err := s.lockLog(ctx, owner)
	if err != nil {
		return spindle.E(op, err)
	}
	defer s.unlockLog(l)
	s.mu.RLock()
	seq, head := l.t.Seq, l.t.Head
	s.mu.RUnlock()
	switch {
	case seq > cp.Seq:
		return spindle.E(op, spindle.Exist, owner, fmt.Sprintf("the log here is at sequence %d, past the checkpoint at %d: nothing installed", seq, cp.Seq))
	case seq == cp.Seq && head == cp.Hash:
		return nil
	case seq == cp.Seq:
		return spindle.E(op, spindle.Integrity, owner, fmt.Sprintf("the log here forks from the checkpoint at sequence %d (hash %s here, %s in the checkpoint signed by %s): nothing installed", seq, head, cp.Hash, cp.Host))
	}
	if seq > 0 {
		for _, e := range cp.Entries {
			if e.Seq == seq && e.Hash() != head {
				return spindle.E(op, spindle.Integrity, owner, fmt.Sprintf("the log here forks from the checkpoint: entry %d has hash %s here, %s in the checkpoint signed by %s: nothing installed", seq, head, e.Hash(), cp.Host))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return spindle.E(op, spindle.Transient, owner, err)
	}
	if l.log == nil {
		lg, err := s.store.Open(ctx, owner)
		if err != nil {
			return spindle.E(op, owner, err)
		}
		if err := lg.Scan(ctx, func([]byte) error { return errExistingLog }); err != nil {
			lg.Close()
			return spindle.E(op, spindle.Internal, owner, fmt.Errorf("new log of %s: %w", owner, err))
		}
		l.log = lg
	}
	recs := cp.Chunks()
	if err := l.log.Replace(ctx, recs...); err != nil {
		// The log may or may not have been replaced: learn which, and
		// serve what is stored.
		var ls dirlog.LogScan
		if serr := l.log.Scan(ctx, func(b []byte) error { ls.Add(b); return nil }); serr != nil {
			return spindle.E(op, owner, fmt.Errorf("%w; and then the log could not be read: %v", err, serr))
		}
		if got, _ := ls.Chunker.Checkpoint(); got != nil && got.Seq == cp.Seq && got.Hash == cp.Hash && len(ls.Pending) == 0 {
			s.install(l, got, t, ls.NChunks)
		}
		return spindle.E(op, owner, err)
	}
	s.install(l, cp, t, len(recs))
	s.mark(ctx, owner, Mark{Seq: cp.Seq, Hash: cp.Hash})
	return nil
}

// install makes cp, folded into t and stored in n records, the whole of
// l. l's appendMu is held.
func (s *Server) install(l *hosted, cp *dirlog.Checkpoint, t *dirlog.Tree, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t, l.cp, l.cpRecs = t, cp, n
	l.replaced.Add(1)
	l.recent, l.nrecent, l.head = nil, 0, nil
	close(l.changed)
	l.changed = make(chan struct{})
}
