package dirlog

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"spindle.dev"
)

// A Sequencer accepts signed entries for users' logs. [host.Server] implements
// it; a remote dir host reached over the network can too.
type Sequencer interface {
	// Head returns the head of owner's log.
	Head(ctx context.Context, owner spindle.UserName) (*Head, error)
	// Append checks, stores and applies a signed entry (see [host.Server.Append]).
	Append(ctx context.Context, e *Entry) (*spindle.DirEntry, error)
	// AppendBatch appends signed entries of one tree in order, and
	// returns those it appended and why it stopped short, if it did (see
	// [host.Server.AppendBatch]).
	AppendBatch(ctx context.Context, es []*Entry) ([]*spindle.DirEntry, error)
}

// A Service is everything a dir host offers, each read naming the
// requesting user. [host.Server] implements it.
type Service interface {
	Sequencer
	Lookup(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error)
	Glob(ctx context.Context, user spindle.UserName, pattern string) ([]*spindle.DirEntry, error)
	WhichAccess(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error)
	Watch(ctx context.Context, user spindle.UserName, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error)
}

// maxTries bounds how often Submit signs again after the head moved.
const maxTries = 16

// Submit makes, signs and appends the entry doing op to d (for a rename, d
// names the item to move and newName its destination), retrying with a
// fresh head when another writer got in first. It sets the entry's
// sequence number, writer and, if zero, its time. It returns what Append
// returns; after too many conflicts, the last Transient error.
func Submit(ctx context.Context, seq Sequencer, signer spindle.Signer, op Operation, d *spindle.DirEntry, newName spindle.PathName) (*spindle.DirEntry, error) {
	return submit(ctx, seq, signer, op, d, newName, nil, anchors{readersAt: -1})
}

// anchors are what a writer sets in its entries besides the operation:
// the head at which it worked out a file's readers (negative: the head
// it signs after, for an entry that wraps no key for readers it looked
// up), and the function that gives the size of the key log it follows
// (nil: 0).
type anchors struct {
	readersAt int64
	keyAt     func() int64
	refresh   func(context.Context) error // See Client.FollowKeyLog.
}

// caughtUp reports, after the dir host refused an entry with Stale,
// whether the key log was behind and has caught up: the entry may then
// be signed again, anchored afresh. A Stale that was about the readers
// leaves the key log where it was.
func (a anchors) caughtUp(ctx context.Context, err error) bool {
	if a.refresh == nil || a.keyAt == nil || !errors.Is(err, spindle.Stale) {
		return false
	}
	before := a.keyAt()
	return a.refresh(ctx) == nil && a.keyAt() > before
}

// set sets e's ReadersAt and KeyAt, e being signed after head h.
func (a anchors) set(e *Entry, h Head) {
	e.ReadersAt = h.Seq
	if a.readersAt >= 0 {
		// Never after the head signed after: a head the writer has
		// not caught up with yet is refused as moved anyway.
		e.ReadersAt = min(a.readersAt, h.Seq)
	}
	if a.keyAt != nil {
		e.KeyAt = a.keyAt()
	}
}

// A headCache remembers, per tree, the head after a client's own last
// append, so that the next entry can be signed without asking for the head.
type headCache struct {
	mu    sync.Mutex
	heads map[spindle.UserName]Head
}

func (c *headCache) get(u spindle.UserName) (Head, bool) {
	if c == nil {
		return Head{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h, ok := c.heads[u]
	return h, ok
}

func (c *headCache) set(u spindle.UserName, h *Head) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil {
		delete(c.heads, u)
		return
	}
	if c.heads == nil {
		c.heads = make(map[spindle.UserName]Head)
	}
	c.heads[u] = *h
}

func submit(ctx context.Context, seq Sequencer, signer spindle.Signer, op Operation, d *spindle.DirEntry, newName spindle.PathName, cache *headCache, an anchors) (*spindle.DirEntry, error) {
	const eop spindle.Op = "dirlog.Submit"
	p, err := spindle.Parse(d.Name)
	if err != nil {
		return nil, spindle.E(eop, signer.UserName(), err)
	}
	if newName != "" {
		q, err := spindle.Parse(newName)
		if err != nil {
			return nil, spindle.E(eop, signer.UserName(), err)
		}
		newName = q.Path()
	}
	// Refuse a bad new name here, with the same error the dir host gives,
	// rather than sign an entry that will be refused.
	if err := checkNames(newNames(op, &spindle.DirEntry{Name: p.Path(), Link: d.Link}, newName)); err != nil {
		return nil, spindle.E(eop, signer.UserName(), err)
	}
	var last error
	usedCache := false
	caughtUp := false // The key log caught up once after a Stale.
	for try := 0; try < maxTries; try++ {
		if try > 0 && !(try == 1 && usedCache) {
			// Back off a little, with jitter, so that contending writers
			// spread out.
			wait := time.Duration(rand.N(1<<min(try, 8))) * time.Millisecond
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return nil, spindle.E(eop, p.Path(), signer.UserName(), spindle.Transient, ctx.Err())
			}
		}
		h, ok := cache.get(p.User())
		usedCache = ok && try == 0
		if !ok || try > 0 {
			got, err := headOf(ctx, seq, p.User())
			if err != nil {
				return nil, spindle.E(eop, p.Path(), signer.UserName(), err)
			}
			h = *got
		}
		e := &Entry{
			Seq:     h.Seq + 1,
			Prev:    h.Hash,
			Time:    spindle.Now(),
			Op:      op,
			Entry:   *CloneEntry(d),
			NewName: newName,
		}
		e.Entry.Name = p.Path()
		e.Entry.Sequence = e.Seq
		if e.Entry.Time == 0 && (op == OpMkdir || op == OpLink) {
			e.Entry.Time = e.Time
		}
		an.set(e, h)
		if err := e.Sign(signer); err != nil {
			return nil, spindle.E(eop, err)
		}
		out, err := seq.Append(ctx, e)
		if err == nil && out == nil {
			err = spindle.E(eop, spindle.IO, p.Path(), "the dir host appended the entry and answered no entry")
		}
		if err == nil {
			cache.set(p.User(), &Head{User: p.User(), Seq: e.Seq, Hash: e.Hash()})
			return out, nil
		}
		cache.set(p.User(), nil)
		if !caughtUp && an.caughtUp(ctx, err) {
			caughtUp = true
			last = err
			continue
		}
		if !errors.Is(err, spindle.Transient) {
			return nil, err
		}
		last = err
	}
	return nil, last
}

// headOf asks seq for the head of owner's log. A dir host that answers
// no head and no error is an I/O error, not a head to sign after.
func headOf(ctx context.Context, seq Sequencer, owner spindle.UserName) (*Head, error) {
	h, err := seq.Head(ctx, owner)
	if err == nil && h == nil {
		err = spindle.E(spindle.IO, owner, "the dir host answered no head")
	}
	return h, err
}

// submitBatch puts the entries ds, all of one tree, as Client.Put would one
// after another, sending as many as the sequencer takes at once: each
// round signs the entries still to go for the places after the head, one
// after another, and appends them together. An entry refused for a reason
// other than a moved head gets its error and the rest are signed again
// after it. It returns each entry's result and error.
func submitBatch(ctx context.Context, seq Sequencer, signer spindle.Signer, ds []*spindle.DirEntry, cache *headCache, an anchors, readersAt []int64) ([]*spindle.DirEntry, []error) {
	const eop spindle.Op = "dirlog.Submit"
	outs := make([]*spindle.DirEntry, len(ds))
	errs := make([]error, len(ds))
	var todo []int // Indexes into ds still to put, in order.
	var names []spindle.Parsed
	var owner spindle.UserName
	for i, d := range ds {
		p, err := spindle.Parse(d.Name)
		if err == nil {
			err = checkNames(newNames(putOp(d), &spindle.DirEntry{Name: p.Path(), Link: d.Link}, ""))
		}
		if err == nil && len(todo) > 0 && p.User() != owner {
			err = spindle.E(spindle.Invalid, "a batch holds entries of one tree only")
		}
		if err != nil {
			errs[i] = spindle.E(eop, signer.UserName(), err)
			continue
		}
		owner = p.User()
		todo = append(todo, i)
		names = append(names, p)
	}
	var last error
	fresh := false    // The head was read after the last conflict.
	caughtUp := false // The key log caught up once after a Stale.
	for tries := 0; len(todo) > 0 && tries < maxTries; {
		h, ok := cache.get(owner)
		if !ok {
			got, err := headOf(ctx, seq, owner)
			if err != nil {
				for _, i := range todo {
					errs[i] = spindle.E(eop, ds[i].Name, signer.UserName(), err)
				}
				return outs, errs
			}
			h, fresh = *got, true
		}
		es := make([]*Entry, 0, min(len(todo), MaxBatch))
		for j, i := range todo[:cap(es)] {
			e := &Entry{
				Seq:   h.Seq + 1,
				Prev:  h.Hash,
				Time:  spindle.Now(),
				Op:    putOp(ds[i]),
				Entry: *CloneEntry(ds[i]),
			}
			e.Entry.Name = names[j].Path()
			e.Entry.Sequence = e.Seq
			if e.Entry.Time == 0 && (e.Op == OpMkdir || e.Op == OpLink) {
				e.Entry.Time = e.Time
			}
			an.readersAt = -1
			if i < len(readersAt) {
				an.readersAt = readersAt[i]
			}
			an.set(e, h)
			if err := e.Sign(signer); err != nil {
				for _, i := range todo {
					errs[i] = spindle.E(eop, err)
				}
				return outs, errs
			}
			es = append(es, e)
			h = Head{User: owner, Seq: e.Seq, Hash: e.Hash()}
		}
		done, err := seq.AppendBatch(ctx, es)
		if len(done) > len(es) {
			done, err = nil, spindle.E(eop, spindle.IO, owner, fmt.Sprintf("dir host answered %d entries for %d", len(done), len(es)))
		}
		if j := slices.Index(done, nil); j >= 0 {
			done, err = done[:j], spindle.E(eop, spindle.IO, owner, fmt.Sprintf("dir host answered no entry for the %d of %d it appended", j+1, len(done)))
		}
		for j, d := range done {
			outs[todo[j]] = d
		}
		if len(done) > 0 {
			e := es[len(done)-1]
			cache.set(owner, &Head{User: owner, Seq: e.Seq, Hash: e.Hash()})
		}
		todo, names = todo[len(done):], names[len(done):]
		switch {
		case err != nil && len(todo) == 0:
			// Every entry appended, and an error besides: a dir host that
			// contradicts itself. The entries stand as it answered them;
			// what it appended a reader checks against its proofs.
		case err != nil && !caughtUp && an.caughtUp(ctx, err):
			// Anchored behind the key log: sign again, anchored afresh.
			caughtUp, last = true, err
			cache.set(owner, nil)
		case err == nil && len(done) < len(es):
			err = spindle.E(eop, spindle.IO, owner, fmt.Sprintf("dir host appended %d of %d entries and gave no reason", len(done), len(es)))
			fallthrough
		case err != nil && !errors.Is(err, spindle.Transient):
			// The first entry left is refused; the head is where the
			// entries appended left it, or where it was.
			errs[todo[0]] = err
			todo, names = todo[1:], names[1:]
			if len(done) == 0 {
				cache.set(owner, &Head{User: owner, Seq: es[0].Seq - 1, Hash: es[0].Prev})
			}
		case err != nil:
			// Another writer got in first: read the head again and,
			// unless the head was fresh already, sign again at once.
			last = err
			cache.set(owner, nil)
			if len(done) == 0 {
				tries++
				if fresh {
					wait := time.Duration(rand.N(1<<min(tries, 8))) * time.Millisecond
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						last = spindle.E(eop, owner, signer.UserName(), spindle.Transient, ctx.Err())
						tries = maxTries
					}
				}
			}
		}
		fresh = false
	}
	for _, i := range todo {
		errs[i] = last
	}
	return outs, errs
}

// putOp is the operation that puts d.
func putOp(d *spindle.DirEntry) Operation {
	switch {
	case d.Attr.IsDir():
		return OpMkdir
	case d.Attr.IsLink():
		return OpLink
	}
	return OpPut
}

// A Client acts for one user on a dir host: it signs the user's changes
// and reads as that user. It implements [spindle.DirServer].
type Client struct {
	svc    Service
	signer spindle.Signer
	heads  headCache
	// See FollowKeyLog.
	keyAt   func() int64
	refresh func(context.Context) error
}

var _ spindle.DirServer = (*Client)(nil)

// NewClient returns a client of svc acting for the signer's user.
func NewClient(svc Service, signer spindle.Signer) *Client {
	return &Client{svc: svc, signer: signer}
}

// FollowKeyLog has c anchor every entry it signs at the size of the key
// cluster's log that keyAt returns: the log its user's client follows
// (see [Entry.KeyAt]). Without it entries are anchored at 0. It must be
// called before c is used.
//
// refresh, if not nil, brings the log followed up to date: when a dir
// host refuses an entry as anchored too far behind (Stale), the client
// calls it and, if keyAt then returns more, signs the entry again once.
func (c *Client) FollowKeyLog(keyAt func() int64, refresh func(context.Context) error) {
	c.keyAt, c.refresh = keyAt, refresh
}

// anchors returns how c anchors an entry whose readers were worked out at
// readersAt (negative: not looked up).
func (c *Client) anchors(readersAt int64) anchors {
	return anchors{readersAt: readersAt, keyAt: c.keyAt, refresh: c.refresh}
}

// Lookup implements [spindle.DirServer].
func (c *Client) Lookup(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return c.svc.Lookup(ctx, c.signer.UserName(), name)
}

// Put implements [spindle.DirServer]: it makes the file, or, by the
// entry's attribute, the directory or link that entry describes. The
// entry's Writer and Sequence are set by signing.
func (c *Client) Put(ctx context.Context, entry *spindle.DirEntry) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, putOp(entry), entry, "", &c.heads, c.anchors(-1))
}

// PutAt is Put for a file whose readers the writer worked out, and
// wrapped its key for, under the tree's head at sequence readersAt (see
// [Entry.ReadersAt]); a negative readersAt means none were looked up. If
// the Access or Group files that decide them have changed since, the dir
// host refuses the entry with Stale, and the writer must work the
// readers out again.
func (c *Client) PutAt(ctx context.Context, entry *spindle.DirEntry, readersAt int64) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, putOp(entry), entry, "", &c.heads, c.anchors(readersAt))
}

// PutBatch puts entries of one tree, as Put would one after another, with
// as few round trips to the dir host as it allows. It returns the result
// and the error of each entry; one entry's failure does not stop the others.
func (c *Client) PutBatch(ctx context.Context, entries []*spindle.DirEntry) ([]*spindle.DirEntry, []error) {
	return submitBatch(ctx, c.svc, c.signer, entries, &c.heads, c.anchors(-1), nil)
}

// PutBatchAt is PutBatch with, for each entry, the head at which its
// readers were worked out (see [Client.PutAt]); a negative one means
// none were looked up.
func (c *Client) PutBatchAt(ctx context.Context, entries []*spindle.DirEntry, readersAt []int64) ([]*spindle.DirEntry, []error) {
	return submitBatch(ctx, c.svc, c.signer, entries, &c.heads, c.anchors(-1), readersAt)
}

// Delete implements [spindle.DirServer].
func (c *Client) Delete(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, OpDelete, &spindle.DirEntry{Name: name}, "", &c.heads, c.anchors(-1))
}

// Glob implements [spindle.DirServer].
func (c *Client) Glob(ctx context.Context, pattern string) ([]*spindle.DirEntry, error) {
	return c.svc.Glob(ctx, c.signer.UserName(), pattern)
}

// WhichAccess implements [spindle.DirServer].
func (c *Client) WhichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return c.svc.WhichAccess(ctx, c.signer.UserName(), name)
}

// MakeDirectory creates the directory name.
func (c *Client) MakeDirectory(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, OpMkdir, &spindle.DirEntry{Name: name, Attr: spindle.AttrDirectory}, "", &c.heads, c.anchors(-1))
}

// PutLink creates or replaces the link name pointing to target.
func (c *Client) PutLink(ctx context.Context, target, name spindle.PathName) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, OpLink, &spindle.DirEntry{Name: name, Attr: spindle.AttrLink, Link: target}, "", &c.heads, c.anchors(-1))
}

// Rename moves the file, link or directory oldName, with everything below
// it, to newName, which must not exist.
func (c *Client) Rename(ctx context.Context, oldName, newName spindle.PathName) (*spindle.DirEntry, error) {
	return submit(ctx, c.svc, c.signer, OpRename, &spindle.DirEntry{Name: oldName}, newName, &c.heads, c.anchors(-1))
}

// Watch streams changes under name (see [host.Server.Watch]).
func (c *Client) Watch(ctx context.Context, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	return c.svc.Watch(ctx, c.signer.UserName(), name, fromSeq)
}

// RememberHead has c sign its next change to h.User's tree for the place
// after h without asking for the head first, as it does after a change of
// its own. A new client that remembers the head its last run left saves a
// request; a head that has moved on since costs one request more, as the
// change is refused as a conflict and signed again after the head.
func (c *Client) RememberHead(h *Head) {
	c.heads.set(h.User, h)
}

// Head returns the head of owner's log.
func (c *Client) Head(ctx context.Context, owner spindle.UserName) (*Head, error) {
	return c.svc.Head(ctx, owner)
}

// MaxBatch is the most entries [host.Server.AppendBatch] takes at once.
const MaxBatch = 256
