package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/dirlog"
)

// Reads of the past by others than the owner (issue 29). The owner reads
// the whole log and folds it (client.PastAt); a reader who may not read
// the log asks the host for a state after entry seq, which the host folds
// from the log and answers from as it answers from the current tree: each
// answer proved against a head of that state, signed now, whose log root
// the reader checks against the newest head it holds with a consistency
// proof (dir.step). A reader gets what the Access files of then and of now
// both allow: of then, because a file's key was wrapped only for the
// readers of then; of now, because a reader the owner removed must not
// read through the past what the owner took from them.

// maxPastTrees bounds the past states a server keeps folded.
const maxPastTrees = 4

// A pastKey names a folded state: the log's owner, the sequence, and how
// many times the log had been replaced, so that a state folded from a log
// since refilled is not served.
type pastKey struct {
	owner spindle.UserName
	seq   int64
	gen   int64
}

// pastTrees caches folded states, the newest last.
type pastTrees struct {
	mu    sync.Mutex
	keys  []pastKey
	trees map[pastKey]*dirlog.Tree
}

func (c *pastTrees) get(k pastKey) *dirlog.Tree {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.trees[k]
}

func (c *pastTrees) put(k pastKey, t *dirlog.Tree) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.trees == nil {
		c.trees = make(map[pastKey]*dirlog.Tree)
	}
	if _, ok := c.trees[k]; ok {
		return
	}
	if len(c.keys) == maxPastTrees {
		delete(c.trees, c.keys[0])
		c.keys = c.keys[1:]
	}
	c.keys = append(c.keys, k)
	c.trees[k] = t
}

// pastTree returns owner's tree after entry seq or, if when is not zero,
// as it was at when (after the last entry made at or before it). A state
// before the log's checkpoint, or past its head, is NotExist. The log is
// read through a handle of its own, up to the state asked for, with no
// lock held, so that readers of the past do not hold up the owner's
// appends; a log replaced meanwhile (compacted) is read again.
func (s *Server) pastTree(ctx context.Context, owner spindle.UserName, seq int64, when time.Time) (*dirlog.Tree, error) {
	for try := 1; ; try++ {
		t, replaced, err := s.pastTreeOnce(ctx, owner, seq, when)
		if !replaced || try == 3 {
			if replaced && err == nil {
				err = spindle.E(spindle.Transient, spindle.PathName(owner+"/"), "the log was replaced while it was read; try again")
			}
			return t, err
		}
	}
}

// pastTreeOnce is one try of pastTree; replaced reports that the log was
// replaced while it was read.
func (s *Server) pastTreeOnce(ctx context.Context, owner spindle.UserName, seq int64, when time.Time) (t *dirlog.Tree, replaced bool, err error) {
	root := spindle.PathName(owner + "/")
	s.mu.RLock()
	l := s.served(owner)
	s.mu.RUnlock()
	if l == nil {
		return nil, false, spindle.E(spindle.NotExist, root, "no tree of the user on this dir host")
	}
	l.appendMu.Lock()
	head, cp, skip, gen := l.pos().seq, l.cp, l.cpRecs, l.replaced.Load()
	var lg Log
	if l.log != nil && head > 0 {
		lg, err = s.store.Open(ctx, l.user)
	}
	l.appendMu.Unlock()
	if err != nil {
		return nil, false, err
	}
	if lg == nil {
		return nil, false, spindle.E(spindle.NotExist, root, "the tree has no entries")
	}
	defer lg.Close()
	var since int64
	if cp != nil {
		since = cp.Seq
	}
	if when.IsZero() && seq < 0 {
		seq += head
	}
	if when.IsZero() {
		switch {
		case seq <= 0 || seq > head:
			return nil, false, spindle.E(spindle.NotExist, root, fmt.Sprintf("no sequence %d: the log ends at %d", seq, head))
		case seq < since:
			return nil, false, spindle.E(spindle.NotExist, root, fmt.Sprintf("sequence %d was compacted into the checkpoint at %d", seq, since))
		}
		if t := s.past.get(pastKey{owner, seq, gen}); t != nil {
			return t, false, nil
		}
	}
	t = dirlog.NewTree(owner)
	found := false // At a time: whether a state at or before it is known.
	if cp != nil {
		if t, err = cp.Fold(); err != nil {
			return nil, false, spindle.E(spindle.Integrity, owner, err)
		}
		for _, e := range cp.Entries {
			found = found || e.Seq == since && !when.IsZero() && !e.Time.Go().After(when)
		}
	}
	target := seq
	if !when.IsZero() {
		target = head
	}
	var stop func(*dirlog.Entry) bool
	if !when.IsZero() {
		stop = func(e *dirlog.Entry) bool { return e.Time.Go().After(when) }
	}
	err = foldStored(ctx, lg, owner, t, skip, target, stop, nil)
	if l.replaced.Load() != gen {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	found = found || t.Seq > since
	if !when.IsZero() {
		if !found {
			if cp != nil {
				return nil, false, spindle.E(spindle.NotExist, root, fmt.Sprintf("the tree at %s was compacted into the checkpoint at %d", when.UTC().Format(time.RFC3339), since))
			}
			return nil, false, spindle.E(spindle.NotExist, root, fmt.Sprintf("the tree has no entry at or before %s", when.UTC().Format(time.RFC3339)))
		}
	} else if t.Seq != seq {
		return nil, false, spindle.E(spindle.Integrity, owner, fmt.Sprintf("stored log ends at entry %d, before entry %d", t.Seq, seq))
	}
	s.past.put(pastKey{owner, t.Seq, gen}, t)
	return t, false, nil
}

// pastReaderFor returns a reader of past, a state of owner's tree, for
// user, part of v, with the rights of then and of now both required.
func (v *view) pastReaderFor(owner, user spindle.UserName, past *dirlog.Tree) *reader {
	now := v.readerFor(owner, user)
	load := v.groupsFor(user, v.currentGroups(past))
	then := past.Rights(load)
	can := func(u spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
		ok, err := then(u, right, name)
		if err != nil || !ok {
			return ok, err
		}
		return now.can(u, right, name)
	}
	return &reader{s: v.s, v: v, t: past, user: user, load: load, can: can}
}

// pastHead returns the head of past, a state of owner's tree, signed now.
func (s *Server) pastHead(owner spindle.UserName, past *dirlog.Tree) (*dirlog.Head, error) {
	h := &dirlog.Head{User: owner, Seq: past.Seq, Hash: past.Head, Root: past.MapRoot(), Time: spindle.Now()}
	s.mu.RLock()
	l := s.served(owner)
	s.mu.RUnlock()
	if l != nil {
		l.mu.RLock()
		h.LogRoot = l.logRootAt(past.Seq)
		l.mu.RUnlock()
	}
	if s.cfg.Host != nil {
		if err := h.Sign(s.cfg.Host); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// pastFor returns the state of owner's tree user asks for, after checking
// that user may know of the log at all (see knowsLog).
func (s *Server) pastFor(ctx context.Context, user, owner spindle.UserName, seq int64, when time.Time) (*dirlog.Tree, error) {
	v := s.view()
	err := s.damageFor(owner, user)
	if err == nil && !v.knowsLog(user, owner) {
		err = spindle.E(spindle.Private, spindle.PathName(owner+"/"), user)
	}
	v.release()
	if err != nil {
		return nil, err
	}
	return s.pastTree(ctx, owner, seq, when)
}

// LookupProvedAt is [Server.LookupProved] in the state of the tree after
// entry seq (-seq entries before the head if negative) or, if when is not
// zero, at time when; its proof is against a head of that state. The
// Access files of that state and of now must both allow the read.
func (s *Server) LookupProvedAt(ctx context.Context, user spindle.UserName, name spindle.PathName, seq int64, when time.Time) (*spindle.DirEntry, *dirlog.Proved, error) {
	const op spindle.Op = "dirlog.LookupProvedAt"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, nil, spindle.E(op, user, err)
	}
	past, err := s.pastFor(ctx, user, p.User(), seq, when)
	if err != nil {
		return nil, nil, spindle.E(op, p.Path(), user, err)
	}
	v := s.view()
	d, pr, _, err := lookupProvedBy(v.pastReaderFor(p.User(), user, past), p)
	v.release()
	if pr != nil {
		h, herr := s.pastHead(p.User(), past)
		if herr != nil {
			return nil, nil, spindle.E(op, p.Path(), herr)
		}
		pr.Head = h
	}
	if err != nil {
		err = spindle.E(op, p.Path(), user, err)
	}
	return d, pr, err
}

// GlobProvedAt is [Server.GlobProved] in a state of the tree, as
// [Server.LookupProvedAt] reads it.
func (s *Server) GlobProvedAt(ctx context.Context, user spindle.UserName, pattern string, seq int64, when time.Time) ([]*spindle.DirEntry, []*dirlog.Proved, *dirlog.Head, error) {
	const op spindle.Op = "dirlog.GlobProvedAt"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, nil, nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, nil, nil, spindle.E(op, user, err)
	}
	past, err := s.pastFor(ctx, user, p.User(), seq, when)
	if err != nil {
		return nil, nil, nil, spindle.E(op, p.Path(), user, err)
	}
	v := s.view()
	out, prs, _, err := globBy(v.pastReaderFor(p.User(), user, past), p, true)
	v.release()
	var head *dirlog.Head
	if err == nil || len(prs) > 0 {
		var herr error
		if head, herr = s.pastHead(p.User(), past); herr != nil {
			return nil, nil, nil, spindle.E(op, p.Path(), herr)
		}
	}
	if err != nil {
		return nil, prs, head, spindle.E(op, p.Path(), user, err)
	}
	return out, prs, head, nil
}
