package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// Restoring a past state, and finding what was deleted (issue 29).

// A RestoreResult says what [Client.Restore] wrote.
type RestoreResult struct {
	Files   int                // Files written.
	Skipped []spindle.PathName // Access and Group files, not restored.
}

// Restore writes from, as it was in past, back as new entries under to
// (which may equal from). A directory is restored with everything that
// was under it; the directories above to that do not exist are made.
// Each file is written again as a new file, its key wrapped for the
// readers the Access files name now, not then. Access and Group files
// are not restored, so that a restore never gives back a right taken
// away since: they are listed in the result. A file stored with a
// [spindle.Warning] counts as restored.
func (c *Client) Restore(ctx context.Context, past *Past, from, to spindle.PathName) (RestoreResult, error) {
	const op spindle.Op = "client.Restore"
	var res RestoreResult
	top, err := past.Lookup(from)
	if err != nil {
		return res, spindle.E(op, err)
	}
	dst, err := c.clean(to)
	if err != nil {
		return res, spindle.E(op, err)
	}
	if err := c.makeParents(ctx, dst); err != nil {
		return res, spindle.E(op, err)
	}
	r := &restorer{c: c, p: past, from: top.Name, to: dst.Path()}
	err = r.restore(ctx, top)
	res.Files, res.Skipped = r.files, r.skipped
	if err != nil {
		return res, spindle.E(op, err)
	}
	return res, nil
}

// makeParents makes the directories above p that do not exist.
func (c *Client) makeParents(ctx context.Context, p spindle.Parsed) error {
	for i := 1; i < p.NElem(); i++ {
		dir := p.First(i).Path()
		_, err := c.Lookup(ctx, dir, false)
		if errors.Is(err, spindle.NotExist) {
			_, err = c.MakeDirectory(ctx, dir)
			if errors.Is(err, spindle.Exist) {
				err = nil
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// A restorer writes a past state back, from under from to under to.
type restorer struct {
	c        *Client
	p        *Past
	from, to spindle.PathName
	files    int
	skipped  []spindle.PathName
}

func (r *restorer) restore(ctx context.Context, e *spindle.DirEntry) error {
	dst := r.to + e.Name[len(r.from):]
	switch {
	case e.Attr.IsDir():
		if _, err := r.c.MakeDirectory(ctx, dst); err != nil && !errors.Is(err, spindle.Exist) {
			return err
		}
		kids, err := r.p.List(e.Name)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if err := r.restore(ctx, k); err != nil {
				return err
			}
		}
		return nil
	case e.Attr.IsLink():
		if cur, err := r.c.Lookup(ctx, dst, false); err == nil && cur.Attr.IsLink() && cur.Link == e.Link {
			return nil
		}
		_, err := r.c.PutLink(ctx, e.Link, dst)
		return err
	case isRules(e.Name):
		r.skipped = append(r.skipped, e.Name)
		return nil
	}
	f, err := r.p.Open(ctx, e.Name)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := r.c.Put(ctx, dst, f, e.Packing, nil); err != nil {
		var w *spindle.Warning
		if !errors.As(err, &w) {
			return err
		}
	}
	r.files++
	return nil
}

// A Removed is a name of the client's own tree that was there in a state
// of the retained log and is not now: deleted, or moved away by a rename.
type Removed struct {
	Name    spindle.PathName
	Dir     bool
	Size    int64            // A file's size.
	Seq     int64            // The last sequence at which it was there whole: restore from it.
	Time    spindle.Time     // When it went.
	Writer  spindle.UserName // Who removed it.
	Op      string           // delete or rename.
	NewName spindle.PathName // A rename's destination.
}

// removalGap is the longest pause between the deletions of one removal
// of a directory with what was in it, as "spin rm -R" makes them.
const removalGap = time.Minute

// Deleted lists what was removed under the directory dir of the client's
// own tree: each name under it that was in a state of the retained log
// (since the checkpoint, if any) and is not now, newest removal first,
// from the proved log. A directory removed with what was in it, by one
// rename or by deletions one after the other (no more than a minute
// apart, as "spin rm -R" makes them), counts once, as the directory,
// and its Seq is that before the first of them; what was removed under
// it before is listed on its own.
func (c *Client) Deleted(ctx context.Context, dir spindle.PathName) ([]Removed, error) {
	const op spindle.Op = "client.Deleted"
	p, err := c.ownPast(op, dir)
	if err != nil {
		return nil, err
	}
	cp, tail, _, err := c.provedLog(ctx)
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	out, err := deleted(c.user, cp, tail, p)
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	return out, nil
}

// removal is what Deleted keeps of one removed name.
type removal struct {
	Removed
	at    int // Index in the tail of the entry that removed it.
	first int // Index in the tail of the first entry of its removal.
}

func deleted(user spindle.UserName, cp *dirlog.Checkpoint, tail []*dirlog.Entry, p spindle.Parsed) ([]Removed, error) {
	t := dirlog.NewTree(user)
	if cp != nil {
		var err error
		if t, err = cp.Fold(); err != nil {
			return nil, spindle.E(spindle.Integrity, err)
		}
	}
	last := map[spindle.PathName]*removal{}
	for i, e := range tail {
		switch e.Op {
		case dirlog.OpPut, dirlog.OpMkdir, dirlog.OpLink:
			delete(last, e.Entry.Name)
		case dirlog.OpDelete, dirlog.OpRename:
			if n := t.Lookup(e.Entry.Name); n != nil && touches(p, e.Entry.Name) && e.Entry.Name != p.Path() {
				rm := &removal{Removed: Removed{
					Name: e.Entry.Name, Dir: n.Entry.Attr.IsDir(), Time: e.Time, Writer: e.Writer,
					Op: e.Op.String(), NewName: e.NewName,
				}, at: i, first: runStart(tail, i)}
				if !rm.Dir && !n.Entry.Attr.IsLink() {
					rm.Size = n.Entry.Size
				}
				rm.Seq = tail[rm.first].Seq - 1
				last[e.Entry.Name] = rm
			}
		}
		if _, err := t.Apply(e); err != nil {
			return nil, spindle.E(spindle.Integrity, err)
		}
	}
	var out []Removed
	for name, rm := range last {
		if t.Lookup(name) != nil || within(t, last, rm) {
			continue
		}
		out = append(out, rm.Removed)
	}
	slices.SortFunc(out, func(a, b Removed) int {
		if a.Time != b.Time {
			if a.Time > b.Time {
				return -1
			}
			return 1
		}
		return strings.Compare(string(a.Name), string(b.Name))
	})
	return out, nil
}

// runStart returns the index of the first entry of the removal that the
// entry at i ends: the deletions and renames away of names under the
// one it removes that come right before it, each within removalGap of
// the next.
func runStart(tail []*dirlog.Entry, i int) int {
	top, err := spindle.Parse(tail[i].Entry.Name)
	if err != nil {
		return i
	}
	first := i
	for j := i - 1; j >= 0; j-- {
		e := tail[j]
		if e.Op != dirlog.OpDelete && e.Op != dirlog.OpRename {
			break
		}
		if e.Entry.Name == top.Path() || !touches(top, e.Entry.Name) || e.Op == dirlog.OpRename && touches(top, e.NewName) {
			break
		}
		if tail[first].Time.Go().Sub(e.Time.Go()) > removalGap {
			break
		}
		first = j
	}
	return first
}

// within reports whether rm went in the removal of a directory above it
// that is not in the tree t now.
func within(t *dirlog.Tree, last map[spindle.PathName]*removal, rm *removal) bool {
	q, err := spindle.Parse(rm.Name)
	if err != nil {
		return false
	}
	for q.NElem() > 1 {
		q = q.Dir()
		up := last[q.Path()]
		if up != nil && up.Dir && rm.at >= up.first && rm.at <= up.at && t.Lookup(up.Name) == nil {
			return true
		}
	}
	return false
}
