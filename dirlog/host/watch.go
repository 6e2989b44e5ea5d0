package host

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/dirlog"
)

// seqEvents are the changes one entry made.
type seqEvents struct {
	seq    int64
	events []dirlog.Change
}

// maxRecentEvents bounds the events kept in memory for watchers; older
// ones are recomputed from the log.
const maxRecentEvents = 4096

func (l *hosted) push(seq int64, events []dirlog.Change, max int) {
	l.recent = append(l.recent, seqEvents{seq, events})
	l.nrecent += len(events)
	for len(l.recent) > 1 && l.nrecent > max {
		l.nrecent -= len(l.recent[0].events)
		l.recent[0] = seqEvents{}
		l.recent = l.recent[1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// Watch streams the changes to name and everything below it that user may
// see, as Lookup would show them, until ctx is cancelled, then closes the
// channel. With fromSeq 0 it first sends the current state (one event per
// item); with -1 only changes from now on; with a positive fromSeq every
// change from that sequence number on, then new ones. A delete event holds
// the item's last state with the sequence number of the delete; a rename
// is a delete of every moved item followed by its put at the new name.
// Whether the user may see a change is judged by the Access file that
// governed the item when the change was made (and the groups as they are
// when the event is sent). The channel is also closed when the server is. If the watch fails, the
// last event carries the error. The user needs some right on name.
//
// A watch shows no more than Lookup and Glob would: name itself as Lookup
// shows it, and an item below it only if the user may list the directory
// holding it and every directory between that and name, as a pattern
// name/*/.../* would find it (see [Server.Glob]). A user who may read but
// not list a directory learns, by watching it, of the directory alone.
func (s *Server) Watch(ctx context.Context, user spindle.UserName, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	const op spindle.Op = "dirlog.Watch"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	if fromSeq < -1 {
		return nil, spindle.E(op, spindle.Invalid, p.Path(), user, fmt.Sprintf("bad sequence %d", fromSeq))
	}
	v := s.view()
	if err := s.damageFor(p.User(), user); err != nil {
		v.release()
		return nil, spindle.E(op, p.Path(), user, err)
	}
	r := v.readerFor(p.User(), user)
	err = dirlog.Need(r.can, user, access.AnyRight, p)
	l := v.served(p.User())
	if err == nil && (l == nil || l.t.Seq == 0) {
		err = spindle.E(spindle.NotExist, p.Path(), user, "the tree does not exist")
	}
	var first []spindle.Event
	next := fromSeq
	if err == nil {
		switch fromSeq {
		case 0:
			if n, _ := r.t.Find(p); n != nil {
				first, err = r.current(n)
			}
			next = r.t.Seq + 1
		case -1:
			next = r.t.Seq + 1
		}
	}
	v.release()
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	ch := make(chan spindle.Event, 64)
	go s.watch(ctx, l, user, p, next, first, ch)
	return ch, nil
}

// seen returns d, an item at or below the watched name p, as the watcher
// may see it, or nil. The watched item itself is shown as Lookup shows it.
// An item below it is shown only to a user who may list its directory and
// every directory between it and p, as a pattern p/*/.../* would find it
// (whole only to one who may also read the item): a watch reveals no name
// a listing would not. can decides rights on the item and dirCan on its
// directory, as they were at the change; the directories between are
// judged as they are now. A right that cannot be decided (a group cannot
// be loaded) is not held: the item is left out and the watch goes on,
// telling the watcher nothing of the group (Lookup reports it to whoever
// may know).
func (r *reader) seen(p spindle.Parsed, d *spindle.DirEntry, can, dirCan dirlog.RightsFunc) (*spindle.DirEntry, error) {
	if d.Name == p.Path() {
		return r.showWith(can, d, access.AnyRight)
	}
	q, err := spindle.Parse(d.Name)
	if err != nil {
		return nil, spindle.E(spindle.Internal, d.Name, err)
	}
	dir := q.Dir()
	if ok, err := dirCan(r.user, access.List, dir.Path()); err != nil || !ok {
		return nil, nil
	}
	for a := dir; a.NElem() > p.NElem(); {
		a = a.Dir()
		if ok, err := r.can(r.user, access.List, a.Path()); err != nil || !ok {
			return nil, nil
		}
	}
	return r.listed(can, d), nil
}

// listed returns d, which the user may list, as the user sees it: whole
// with read on it, incomplete otherwise. As in Upspin's listDir, a read
// right that cannot be decided is not held.
func (r *reader) listed(can dirlog.RightsFunc, d *spindle.DirEntry) *spindle.DirEntry {
	if read, err := can(r.user, access.Read, d.Name); err == nil && read {
		return dirlog.CloneEntry(d)
	}
	return incomplete(d)
}

// current returns the events that show the watched item n and everything
// below it as the watcher may see them now (see seen), parents before
// children, children in name order. A directory the user may not list
// hides everything below it.
func (r *reader) current(n *dirlog.Node) ([]spindle.Event, error) {
	d, err := r.show(&n.Entry, access.AnyRight)
	if err != nil {
		return nil, err
	}
	var out []spindle.Event
	if d != nil {
		out = append(out, spindle.Event{Entry: d})
	}
	var visit func(dir *dirlog.Node)
	visit = func(dir *dirlog.Node) {
		if len(dir.Kids) == 0 {
			return
		}
		if ok, err := r.can(r.user, access.List, dir.Entry.Name); err != nil || !ok {
			return
		}
		names := make([]string, 0, len(dir.Kids))
		for k := range dir.Kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			kid := dir.Kids[k]
			out = append(out, spindle.Event{Entry: r.listed(r.can, &kid.Entry)})
			visit(kid)
		}
	}
	visit(n)
	return out, nil
}

func (s *Server) watch(ctx context.Context, l *hosted, user spindle.UserName, p spindle.Parsed, next int64, batch []spindle.Event, ch chan<- spindle.Event) {
	const op spindle.Op = "dirlog.Watch"
	defer close(ch)
	for {
		for _, ev := range batch {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
		batch = nil
		l.mu.RLock()
		wait := l.changed
		head := l.t.Seq
		var raw []seqEvents
		history := false
		if next <= head {
			if len(l.recent) > 0 && l.recent[0].seq <= next {
				i := sort.Search(len(l.recent), func(i int) bool { return l.recent[i].seq >= next })
				raw = append(raw, l.recent[i:]...)
			} else {
				history = true
			}
		}
		l.mu.RUnlock()
		if history {
			var err error
			raw, err = s.history(ctx, l, next)
			if err != nil {
				if ctx.Err() == nil {
					select {
					case ch <- spindle.Event{Err: spindle.E(op, p.Path(), user, err)}:
					case <-ctx.Done():
					}
				}
				return
			}
		}
		if len(raw) > 0 {
			v := s.view()
			r := v.readerFor(p.User(), user)
			var err error
			for _, se := range raw {
				for _, c := range se.events {
					q, _ := spindle.Parse(c.Event.Entry.Name)
					if !q.HasPrefix(p) {
						continue
					}
					// Judge by the Access files in force at the change, so
					// that a rename cannot reveal what was hidden.
					can := func(u spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
						return c.Access.Can(u, right, name, r.load)
					}
					dirCan := func(u spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
						return c.DirAccess.Can(u, right, name, r.load)
					}
					var d *spindle.DirEntry
					if d, err = r.seen(p, c.Event.Entry, can, dirCan); err != nil {
						break
					}
					if d != nil {
						batch = append(batch, spindle.Event{Entry: d, Delete: c.Event.Delete})
					}
				}
				next = se.seq + 1
			}
			v.release()
			if err != nil {
				batch = append(batch, spindle.Event{Err: spindle.E(op, p.Path(), user, err)})
				for _, ev := range batch {
					select {
					case ch <- ev:
					case <-ctx.Done():
						return
					}
				}
				return
			}
			continue
		}
		select {
		case <-wait:
		case <-s.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// history recomputes the events of l's entries from sequence from on by
// folding the stored log again, up to the entry l's tree was at when it
// began; the watch catches up on later ones. It holds l's appendMu only to
// take that position and open a reader of the log of its own, and scans
// without it, so that a watcher reading far back never holds up the
// owner's appends. A log replaced meanwhile (compacted) is read again.
func (s *Server) history(ctx context.Context, l *hosted, from int64) ([]seqEvents, error) {
	for try := 0; ; try++ {
		out, replaced, err := s.historyOnce(ctx, l, from)
		if replaced && try < 3 {
			continue
		}
		return out, err
	}
}

// errUpTo stops a history scan at the position it was taken for.
var errUpTo = errors.New("up to the position taken")

// foldStored applies to t the entries lg holds after its first skip
// records (a checkpoint's, which t was folded from), in order, until t
// reaches upto or stop, if set, refuses the next entry; each, if set, is
// given each applied entry's changes. lg is a handle of its own on a log
// that may be appended to meanwhile: whatever follows upto (an append in
// progress, even a torn one) is not read, and an entry out of place says
// the stored log changed under it.
func foldStored(ctx context.Context, lg Log, user spindle.UserName, t *dirlog.Tree, skip int, upto int64, stop func(*dirlog.Entry) bool, each func(seq int64, changes []dirlog.Change)) error {
	err := lg.Scan(ctx, func(b []byte) error {
		if skip > 0 {
			skip--
			return nil
		}
		if t.Seq >= upto {
			return errUpTo
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		p := dirlog.DecodePending(b)
		if p.Err != nil {
			return p.Err
		}
		if stop != nil && stop(p.Entry) {
			return errUpTo
		}
		if p.Entry.Seq != t.Seq+1 || p.Entry.Prev != t.Head {
			return spindle.E(spindle.Integrity, user, fmt.Sprintf("stored log changed while in use: entry %d does not follow entry %d", p.Entry.Seq, t.Seq))
		}
		changes, err := t.Apply(p.Entry)
		if err != nil {
			return spindle.E(spindle.Internal, user, fmt.Errorf("stored log changed while in use: %w", err))
		}
		if each != nil {
			each(p.Entry.Seq, changes)
		}
		return nil
	})
	if err == errUpTo || err != nil && t.Seq >= upto {
		return nil // Stopped, or damage after upto: an append in progress.
	}
	return err
}

// historyOnce is one try of history. replaced reports that the log was
// replaced while it read it, so that what it read may not be the log
// whose position it took.
func (s *Server) historyOnce(ctx context.Context, l *hosted, from int64) (out []seqEvents, replaced bool, err error) {
	l.appendMu.Lock()
	if l.log == nil {
		l.appendMu.Unlock()
		return nil, false, nil
	}
	// t changes only with appendMu held, as do cp, cpRecs and replaced.
	cp, skip, upto, gen := l.cp, l.cpRecs, l.t.Seq, l.replaced.Load()
	var lg Log
	if from <= upto && (cp == nil || from > cp.Seq) {
		lg, err = s.store.Open(ctx, l.user)
	}
	l.appendMu.Unlock()
	if err != nil {
		return nil, false, err
	}
	if cp != nil && from <= cp.Seq {
		return nil, false, spindle.E(spindle.NotExist, l.user, fmt.Sprintf("the changes of entries 1 to %d were compacted into a checkpoint; watch from %d or from the current state", cp.Seq, cp.Seq+1))
	}
	if lg == nil {
		return nil, false, nil
	}
	defer lg.Close()
	t := dirlog.NewTree(l.user)
	if cp != nil {
		if t, err = cp.Fold(); err != nil {
			return nil, false, spindle.E(spindle.Integrity, l.user, err)
		}
	}
	t.Map = nil // Events need no map.
	err = foldStored(ctx, lg, l.user, t, skip, upto, nil, func(seq int64, events []dirlog.Change) {
		if seq >= from {
			out = append(out, seqEvents{seq, events})
		}
	})
	replaced = l.replaced.Load() != gen
	if err == nil && t.Seq < upto {
		err = spindle.E(spindle.Integrity, l.user, fmt.Sprintf("stored log ends at entry %d, before entry %d", t.Seq, upto))
	}
	return out, replaced, err
}
