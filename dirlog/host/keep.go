package host

import (
	"context"
	"slices"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Retention: a host keeps every state of a user's tree inside the user's
// window (Config.Retain) readable. The window starts at the state the tree
// was in Keep ago: the tree after the last entry made at or before then,
// called the floor. Compaction folds the log only up to the floor, and
// the blocks leased for the user (see [Server.Refs]) are those of the
// tree at the floor and of every file an entry after it put: together,
// every file of every state inside the window.

// retained returns how long user's states are kept (0 for only the
// current one) and the sequences of user's named snapshots.
func (s *Server) retained(ctx context.Context, user spindle.UserName) (time.Duration, []int64) {
	if s.cfg.Retain == nil {
		return 0, nil
	}
	keep, pins := s.cfg.Retain(ctx, user)
	return max(keep, 0), pins
}

// now is the server's clock.
func (s *Server) now() time.Time {
	if s.cfg.Now != nil {
		return s.cfg.Now()
	}
	return time.Now()
}

// A window is a log as scanned for retention: the checkpoint it starts
// with, the entries after it with their stored records, and the floor.
type window struct {
	cp      *dirlog.Checkpoint
	entries []*dirlog.Entry
	recs    [][]byte // The stored record of each of entries.
	floor   int64    // The sequence of the tree at the window's start.
}

// scanWindow reads l's log and finds the floor of a window of keep
// ending at now. l's appendMu is held.
func (s *Server) scanWindow(ctx context.Context, l *hosted, keep time.Duration, now time.Time) (*window, error) {
	if l.log == nil {
		return &window{}, nil
	}
	var ls dirlog.LogScan
	w := new(window)
	err := l.log.Scan(ctx, func(b []byte) error {
		n := len(ls.Pending)
		ls.Add(b)
		if len(ls.Pending) > n {
			p := ls.Pending[n]
			if p.Err != nil {
				return p.Err
			}
			w.entries = append(w.entries, p.Entry)
			w.recs = append(w.recs, append([]byte(nil), b...))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if w.cp, err = ls.Chunker.Checkpoint(); err != nil {
		return nil, spindle.E(spindle.Integrity, l.user, err)
	}
	if w.cp != nil {
		w.floor = w.cp.Seq
	}
	from := now.Add(-keep)
	for _, e := range w.entries {
		if keep > 0 && e.Time.Go().After(from) {
			break
		}
		w.floor = e.Seq
	}
	return w, nil
}

// treeAt folds w up to sequence seq, which is at least the checkpoint's.
func (w *window) treeAt(user spindle.UserName, seq int64) (*dirlog.Tree, error) {
	t := dirlog.NewTree(user)
	if w.cp != nil {
		var err error
		if t, err = w.cp.Fold(); err != nil {
			return nil, spindle.E(spindle.Integrity, user, err)
		}
	}
	for _, e := range w.entries {
		if e.Seq > seq {
			break
		}
		if _, err := t.Apply(e); err != nil {
			return nil, spindle.E(spindle.Integrity, user, err)
		}
	}
	return t, nil
}

// keptRefs returns the blocks of the files of every state of l's tree
// inside the window and of every pinned state, beyond those of the
// current tree: the trees at the floor and at each pin, and every file
// put after the floor. l's appendMu is held.
func (s *Server) keptRefs(ctx context.Context, l *hosted, keep time.Duration, pins []int64) ([]spindle.Ref, error) {
	w, err := s.scanWindow(ctx, l, keep, s.now())
	if err != nil {
		return nil, err
	}
	var since, head int64
	if w.cp != nil {
		since, head = w.cp.Seq, w.cp.Seq
	}
	if n := len(w.entries); n > 0 {
		head = w.entries[n-1].Seq
	}
	// The states whose trees to walk, in order; the head's is the
	// current tree, which the caller has.
	var at []int64
	if w.floor < head {
		at = append(at, w.floor)
	}
	for _, p := range pins {
		if p >= since && p < head {
			at = append(at, p)
		}
	}
	slices.Sort(at)
	at = slices.Compact(at)
	var refs []spindle.Ref
	add := func(e *spindle.DirEntry) {
		for _, b := range e.Blocks {
			refs = append(refs, b.Ref)
		}
		if s.cfg.MoreRefs != nil && len(e.Blocks) > 0 {
			refs = append(refs, s.cfg.MoreRefs(e)...) // An erasure-coded file's shards.
		}
	}
	if len(at) > 0 {
		t := dirlog.NewTree(l.user)
		if w.cp != nil {
			if t, err = w.cp.Fold(); err != nil {
				return nil, spindle.E(spindle.Integrity, l.user, err)
			}
		}
		i := 0
		for _, seq := range at {
			for ; i < len(w.entries) && w.entries[i].Seq <= seq; i++ {
				if _, err := t.Apply(w.entries[i]); err != nil {
					return nil, spindle.E(spindle.Integrity, l.user, err)
				}
			}
			if t.Root != nil {
				dirlog.Walk(t.Root, func(n *dirlog.Node) bool { add(&n.Entry); return true })
			}
		}
	}
	if w.floor < head {
		for _, e := range w.entries {
			if e.Seq > w.floor && e.Op == dirlog.OpPut {
				add(&e.Entry)
			}
		}
	}
	return refs, nil
}

// compactTo replaces l's log with a checkpoint of its tree at the floor
// of its window and the entries after it; see [Server.Compact]. With no
// window it is compaction to the head. l's appendMu is held.
func (s *Server) compactTo(ctx context.Context, op spindle.Op, l *hosted, keep time.Duration, pins []int64) (*dirlog.Checkpoint, error) {
	if keep <= 0 && len(pins) == 0 {
		return s.compact(ctx, op, l)
	}
	if l.log == nil {
		return nil, spindle.E(op, spindle.NotExist, l.user, "no log to compact")
	}
	now := s.now()
	w, err := s.scanWindow(ctx, l, keep, now)
	if err != nil {
		return nil, spindle.E(op, l.user, err)
	}
	since := int64(0)
	if w.cp != nil {
		since = w.cp.Seq
	}
	pinned := false
	for _, p := range pins {
		if p >= since && p < w.floor {
			w.floor, pinned = p, true // A named snapshot stays readable.
		}
	}
	if pinned && w.floor == since {
		// Held by a snapshot, not by time: look again in an hour.
		l.holdUntil = now.Add(time.Hour)
		return w.cp, nil
	}
	if w.floor == since {
		// Nothing is outside the window yet: try again once the entry
		// after the floor leaves it.
		l.holdUntil = holdUntil(w, w.floor+1, keep)
		return w.cp, nil
	}
	if n := len(w.entries); n > 0 && w.floor == w.entries[n-1].Seq {
		return s.compact(ctx, op, l)
	}
	t, err := w.treeAt(l.user, w.floor)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	var tail [][]byte
	for i, e := range w.entries {
		if e.Seq > w.floor {
			tail = append(tail, w.recs[i])
		}
	}
	cp := t.Checkpoint()
	if err := s.replaceWith(ctx, op, l, cp, tail); err != nil {
		return nil, err
	}
	l.holdUntil = holdUntil(w, w.floor+1, keep)
	return cp, nil
}

// holdUntil returns when entry seq of w leaves a window of keep: the
// time before which compacting again would drop nothing.
func holdUntil(w *window, seq int64, keep time.Duration) time.Time {
	for _, e := range w.entries {
		if e.Seq == seq {
			return e.Time.Go().Add(keep)
		}
	}
	return time.Time{}
}
