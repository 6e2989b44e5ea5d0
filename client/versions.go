package client

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// Versions: reading a tree as it was at an earlier sequence (issue 29).
//
// An answer about the past is proved as an audit proves the present: the
// client reads the whole log, checks every entry's signature and that
// the log makes the current signed head (see [Client.Audit]), and folds
// the entries through the sequence asked for. The log is hash-chained
// and the head commits to its log tree, so a node that serves another
// version under a past sequence changes the log and fails the check with
// Integrity.
//
// Rights: only the owner may read a tree's log (host.Server.Entries), so
// only the owner reads the past this way, holding every right now and
// then. Others read a tree's past through its dir host (see
// pastremote.go and [Client.PastOf]), where the rights of now and of
// then must both allow it: then, because a key was wrapped only for the
// readers of then; now, because a reader the owner removed must not read
// through the past what the owner took from them.

// A Version is one entry of a tree's log that touched a name.
type Version struct {
	Seq     int64
	Time    spindle.Time
	Writer  spindle.UserName
	Op      string           // put, mkdir, link, delete or rename.
	Name    spindle.PathName // The name the entry put, deleted or moved.
	NewName spindle.PathName // A rename's destination.
	Size    int64            // A put file's size.
}

// provedLog returns the checked log of the client's own tree: the
// checkpoint it starts with (nil if whole), the entries after it and
// the signed head they make.
func (c *Client) provedLog(ctx context.Context) (*dirlog.Checkpoint, []*dirlog.Entry, *dirlog.Head, error) {
	for try := 1; ; try++ {
		rep, cp, tail, err := c.audit(ctx)
		if err == nil {
			return cp, tail, rep.Head, nil
		}
		if try == 3 || spindle.KindOf(err) != spindle.NotExist {
			return nil, nil, nil, err
		}
	}
}

// ownPast checks that name is in the client's own tree.
func (c *Client) ownPast(op spindle.Op, name spindle.PathName) (spindle.Parsed, error) {
	p, err := c.clean(name)
	if err != nil {
		return p, spindle.E(op, err)
	}
	if p.User() != c.user {
		return p, spindle.E(op, p.Path(), spindle.Private, "only the owner may read a tree's past")
	}
	return p, nil
}

// TreeAt returns the client's own tree as it was after entry seq (0 for
// the current head), proved against the current signed head.
func (c *Client) TreeAt(ctx context.Context, seq int64) (*dirlog.Tree, error) {
	const op spindle.Op = "client.TreeAt"
	cp, tail, h, err := c.provedLog(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return treeAt(op, c.user, cp, tail, h, seq)
}

func treeAt(op spindle.Op, user spindle.UserName, cp *dirlog.Checkpoint, tail []*dirlog.Entry, h *dirlog.Head, seq int64) (*dirlog.Tree, error) {
	if seq == 0 {
		seq = h.Seq
	}
	if seq < 0 || seq > h.Seq {
		return nil, spindle.E(op, spindle.NotExist, spindle.PathName(user+"/"), fmt.Sprintf("no sequence %d: the log ends at %d", seq, h.Seq))
	}
	t := dirlog.NewTree(user)
	if cp != nil {
		if seq < cp.Seq {
			return nil, spindle.E(op, spindle.NotExist, spindle.PathName(user+"/"), fmt.Sprintf("sequence %d was compacted into the checkpoint at %d", seq, cp.Seq))
		}
		var err error
		if t, err = cp.Fold(); err != nil {
			return nil, spindle.E(op, spindle.Integrity, err)
		}
	}
	for _, e := range tail {
		if e.Seq > seq {
			break
		}
		if _, err := t.Apply(e); err != nil {
			return nil, spindle.E(op, spindle.Integrity, err)
		}
	}
	return t, nil
}

// seqAt returns the sequence of the tree at time when: that of the last
// entry made at or before it, 0 if none was.
func seqAt(cp *dirlog.Checkpoint, tail []*dirlog.Entry, when time.Time) int64 {
	var seq int64
	if cp != nil {
		seq = cp.Seq
	}
	for _, e := range tail {
		if e.Time.Go().After(when) {
			break
		}
		seq = e.Seq
	}
	return seq
}

// A Past is the client's own tree as it was at one sequence, proved
// against the signed head current when it was made (see [Client.PastAt]).
// Its reads need no further round trip but the blocks of the files read.
//
// A Past of another user's tree (see [Client.PastOf]) holds no tree: each
// read asks its dir host, bounded by pastCallTimeout.
type Past struct {
	c *Client
	t *dirlog.Tree // Nil for another user's tree.
	// owner names another user's tree; at and when the state asked
	// for (see PastOf), and seq the state, once an answer told it.
	owner  spindle.UserName
	at     int64
	when   time.Time
	mu     sync.Mutex
	seq    int64
	proved *dirlog.Head // The head of seq last proved to be of the log.
}

// PastAt returns the client's own tree as it was after entry seq, -seq
// entries before the current head if seq is negative, or, if when is not
// zero, as it was at time when (after the last entry made at or before
// it); seq 0 with a zero when is the current head.
func (c *Client) PastAt(ctx context.Context, seq int64, when time.Time) (*Past, error) {
	const op spindle.Op = "client.PastAt"
	cp, tail, h, err := c.provedLog(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if seq < 0 {
		seq = max(h.Seq+seq, 0)
		if seq == 0 {
			return nil, spindle.E(op, spindle.NotExist, spindle.PathName(c.user+"/"), fmt.Sprintf("the log has only %d entries", h.Seq))
		}
	}
	if !when.IsZero() {
		seq = seqAt(cp, tail, when)
		if seq == 0 {
			return nil, spindle.E(op, spindle.NotExist, spindle.PathName(c.user+"/"), fmt.Sprintf("the tree has no entry at or before %s", when.UTC().Format(time.RFC3339)))
		}
	}
	t, err := treeAt(op, c.user, cp, tail, h, seq)
	if err != nil {
		return nil, err
	}
	return &Past{c: c, t: t}, nil
}

// Seq returns the sequence the Past is of.
func (p *Past) Seq() int64 {
	if p.t == nil {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.seq
	}
	return p.t.Seq
}

// Lookup returns the entry of name as it was.
func (p *Past) Lookup(name spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "client.Past.Lookup"
	if p.t == nil {
		return p.remoteLookup(op, name)
	}
	q, err := p.c.ownPast(op, name)
	if err != nil {
		return nil, err
	}
	n := p.t.Lookup(q.Path())
	if n == nil {
		return nil, spindle.E(op, q.Path(), spindle.NotExist, fmt.Sprintf("not in the tree at sequence %d", p.t.Seq))
	}
	return dirlog.CloneEntry(&n.Entry), nil
}

// List returns the entries of the directory dir as it was, sorted by
// name; for a file, its own entry.
func (p *Past) List(dir spindle.PathName) ([]*spindle.DirEntry, error) {
	const op spindle.Op = "client.Past.List"
	if p.t == nil {
		d, err := p.remoteLookup(op, dir)
		if err != nil || !d.Attr.IsDir() {
			if err != nil {
				return nil, err
			}
			return []*spindle.DirEntry{d}, nil
		}
		return p.remoteGlob(op, strings.TrimSuffix(string(d.Name), "/")+"/*")
	}
	q, err := p.c.ownPast(op, dir)
	if err != nil {
		return nil, err
	}
	n := p.t.Lookup(q.Path())
	if n == nil {
		return nil, spindle.E(op, q.Path(), spindle.NotExist, fmt.Sprintf("not in the tree at sequence %d", p.t.Seq))
	}
	if !n.Entry.Attr.IsDir() {
		return []*spindle.DirEntry{dirlog.CloneEntry(&n.Entry)}, nil
	}
	var out []*spindle.DirEntry
	for _, k := range n.Kids {
		out = append(out, dirlog.CloneEntry(&k.Entry))
	}
	slices.SortFunc(out, func(a, b *spindle.DirEntry) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out, nil
}

// Glob returns the entries whose names match pattern (path.Match, one
// element at a time), as they were, sorted by name.
func (p *Past) Glob(pattern string) ([]*spindle.DirEntry, error) {
	const op spindle.Op = "client.Past.Glob"
	if p.t == nil {
		return p.remoteGlob(op, string(p.c.expand(spindle.PathName(pattern))))
	}
	pat := strings.Split(strings.TrimSuffix(string(p.c.expand(spindle.PathName(pattern))), "/"), "/")
	if len(pat) == 0 || spindle.UserName(pat[0]) != p.c.user {
		return nil, spindle.E(op, spindle.PathName(pattern), spindle.Private, "only the owner may read a tree's past")
	}
	nodes := []*dirlog.Node{p.t.Root}
	if p.t.Root == nil {
		nodes = nil
	}
	for _, el := range pat[1:] {
		if _, err := path.Match(el, ""); err != nil {
			return nil, spindle.E(op, spindle.PathName(pattern), spindle.Invalid, err)
		}
		var next []*dirlog.Node
		for _, n := range nodes {
			for name, k := range n.Kids {
				if ok, _ := path.Match(el, name); ok {
					next = append(next, k)
				}
			}
		}
		nodes = next
	}
	out := make([]*spindle.DirEntry, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, dirlog.CloneEntry(&n.Entry))
	}
	slices.SortFunc(out, func(a, b *spindle.DirEntry) int { return strings.Compare(string(a.Name), string(b.Name)) })
	return out, nil
}

// Open opens the file name as it was. Its blocks are checked as
// [Client.Open] checks them; a block no store holds any longer is
// NotExist.
func (p *Past) Open(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	const op spindle.Op = "client.Past.Open"
	e, err := p.Lookup(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if e.Attr.IsDir() {
		return nil, spindle.E(op, e.Name, spindle.IsDir)
	}
	if isRules(e.Name) {
		return newInlineFile(e), nil
	}
	r, err := p.c.openFile(ctx, e)
	if err != nil {
		return nil, spindle.E(op, e.Name, err)
	}
	return r, nil
}

// History lists the entries of the client's own log that put, deleted or
// renamed name or an item under it, oldest first, from the proved log.
func (c *Client) History(ctx context.Context, name spindle.PathName) ([]Version, error) {
	const op spindle.Op = "client.History"
	p, err := c.ownPast(op, name)
	if err != nil {
		return nil, err
	}
	cp, tail, _, err := c.provedLog(ctx)
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	var es []*dirlog.Entry
	if cp != nil {
		es = append(es, cp.Entries...)
	}
	es = append(es, tail...)
	var out []Version
	for _, e := range es {
		if !touches(p, e.Entry.Name) && !touches(p, e.NewName) {
			continue
		}
		out = append(out, versionOf(e))
	}
	return out, nil
}

// Retained lists the entries of the client's own log whose states can
// still be read with [Client.PastAt] (those from the checkpoint on, if
// the log has one), oldest first, from the proved log.
func (c *Client) Retained(ctx context.Context) ([]Version, error) {
	const op spindle.Op = "client.Retained"
	cp, tail, _, err := c.provedLog(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	var es []*dirlog.Entry
	if cp != nil {
		for _, e := range cp.Entries {
			if e.Seq == cp.Seq {
				es = append(es, e)
			}
		}
	}
	es = append(es, tail...)
	out := make([]Version, 0, len(es))
	for _, e := range es {
		out = append(out, versionOf(e))
	}
	return out, nil
}

func versionOf(e *dirlog.Entry) Version {
	v := Version{Seq: e.Seq, Time: e.Time, Writer: e.Writer, Op: e.Op.String(), Name: e.Entry.Name, NewName: e.NewName}
	if e.Op == dirlog.OpPut {
		v.Size = e.Entry.Size
	}
	return v
}

// touches reports whether name is p or under it.
func touches(p spindle.Parsed, name spindle.PathName) bool {
	if name == "" {
		return false
	}
	q, err := spindle.Parse(name)
	return err == nil && q.HasPrefix(p)
}
