package fsys

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"spindle.dev"
)

// unwatchedTTL is how long an answer about a tree that is not being
// watched is used before it is asked again.
const unwatchedTTL = time.Second

// meta caches directory entries and listings, invalidated by the watch
// stream of each tree they are in.
type meta struct {
	fs *filesys

	mu      sync.Mutex // Guards the maps and the trees' fields.
	entries map[spindle.PathName]*entryItem
	lists   map[spindle.PathName]*listItem
	trees   map[spindle.UserName]*tree
	// held are entries answered whatever the tree says, while this
	// mount replaces them in more than one step.
	held map[spindle.PathName]*spindle.DirEntry
}

// An entryItem is a cached answer to a lookup: an entry, or the error
// NotExist or Private.
type entryItem struct {
	e     *spindle.DirEntry
	err   error
	at    time.Time
	stale bool // Changed since: kept only to answer while the node cannot be reached.
}

// A listItem is a cached listing of a directory.
type listItem struct {
	es    []*spindle.DirEntry
	at    time.Time
	stale bool
}

// A tree is the state of the watch of one user's tree.
type tree struct {
	watching bool      // The watch stream is open.
	since    time.Time // When it was opened: older answers may be stale.
	gen      uint64    // Changes with every event, so that an answer asked for before it is not taken as fresh.
}

func newMeta(fs *filesys) *meta {
	return &meta{fs: fs, entries: map[spindle.PathName]*entryItem{}, lists: map[spindle.PathName]*listItem{}, trees: map[spindle.UserName]*tree{}, held: map[spindle.PathName]*spindle.DirEntry{}}
}

func userOf(name spindle.PathName) spindle.UserName {
	u, _, _ := strings.Cut(string(name), "/")
	return spindle.UserName(u)
}

// parentOf returns the directory holding name, or "" for a root.
func parentOf(name spindle.PathName) spindle.PathName {
	s := strings.TrimSuffix(string(name), "/")
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return ""
	}
	if !strings.Contains(s[:i], "/") {
		return spindle.PathName(s[:i+1])
	}
	return spindle.PathName(s[:i])
}

// fresh reports whether an answer about user's tree got at at may be used
// without asking again. c.mu is held.
func (c *meta) fresh(user spindle.UserName, at time.Time) bool {
	if t := c.trees[user]; t != nil && t.watching && !at.Before(t.since) {
		return true
	}
	return time.Since(at) < unwatchedTTL
}

// gen returns the generation of user's tree and starts its watch if it
// has none. c.mu is held.
func (c *meta) gen(user spindle.UserName) uint64 {
	t := c.trees[user]
	if t == nil {
		t = &tree{}
		c.trees[user] = t
		go c.watch(user, t)
	}
	return t.gen
}

// lookup returns the entry for name, not following a final link.
func (c *meta) lookup(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	user := userOf(name)
	c.mu.Lock()
	if e := c.held[name]; e != nil {
		c.mu.Unlock()
		return e, nil
	}
	it := c.entries[name]
	if it != nil && !it.stale && c.fresh(user, it.at) {
		c.mu.Unlock()
		return it.e, it.err
	}
	if it == nil && user == c.fs.client.User() {
		// A name missing from a listing of one's own tree, which
		// lists everything, does not exist: a new file's name is not
		// asked for.
		if l := c.lists[parentOf(name)]; l != nil && !l.stale && c.fresh(user, l.at) {
			c.mu.Unlock()
			return nil, spindle.E(spindle.NotExist, name)
		}
	}
	gen := c.gen(user)
	c.mu.Unlock()
	at := time.Now()
	e, err := bounded(ctx, c.fs.timeout, func(ctx context.Context) (*spindle.DirEntry, error) {
		return c.fs.client.Lookup(ctx, name, false)
	})
	if err != nil && unreachable(err) && it != nil {
		c.fs.log.Debug("node unreachable: cached answer", "name", name, "err", err)
		return it.e, it.err
	}
	if err != nil {
		c.fs.log.Debug("lookup failed", "name", name, "err", err, "cached", it != nil, "kind", int(spindle.KindOf(err)))
	}
	if err == nil || errors.Is(err, spindle.NotExist) || errors.Is(err, spindle.Private) {
		c.mu.Lock()
		// Changed meanwhile: kept only as an answer for when the
		// node cannot be reached.
		c.entries[name] = &entryItem{e: e, err: err, at: at, stale: c.trees[user].gen != gen}
		c.mu.Unlock()
	}
	return e, err
}

// list returns the entries of directory dir.
func (c *meta) list(ctx context.Context, dir spindle.PathName) ([]*spindle.DirEntry, error) {
	user := userOf(dir)
	c.mu.Lock()
	it := c.lists[dir]
	if it != nil && !it.stale && c.fresh(user, it.at) {
		es := it.es // Replaced, never changed, under c.mu.
		c.mu.Unlock()
		return es, nil
	}
	gen := c.gen(user)
	c.mu.Unlock()
	at := time.Now()
	pattern := spindle.GlobEscape(strings.TrimSuffix(string(dir), "/")) + "/*"
	es, err := bounded(ctx, c.fs.timeout, func(ctx context.Context) ([]*spindle.DirEntry, error) {
		return c.fs.client.Glob(ctx, pattern)
	})
	if err != nil {
		if unreachable(err) && it != nil {
			c.mu.Lock()
			defer c.mu.Unlock()
			return it.es, nil
		}
		return nil, err
	}
	c.mu.Lock()
	stale := c.trees[user].gen != gen
	c.lists[dir] = &listItem{es: es, at: at, stale: stale}
	for _, e := range es {
		c.entries[e.Name] = &entryItem{e: e, at: at, stale: stale}
	}
	c.mu.Unlock()
	return es, nil
}

// hold answers e for name until unhold.
func (c *meta) hold(name spindle.PathName, e *spindle.DirEntry) {
	c.mu.Lock()
	c.held[name] = e
	c.mu.Unlock()
}

func (c *meta) unhold(name spindle.PathName) {
	c.mu.Lock()
	delete(c.held, name)
	c.mu.Unlock()
}

// stored notes e as the entry now at its name, after this mount changed it:
// the cached listing of its directory is changed to hold it, and the
// tree's event for it changes nothing more.
func (c *meta) stored(e *spindle.DirEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trees[userOf(e.Name)]; t != nil {
		t.gen++
	}
	c.entries[e.Name] = &entryItem{e: e, at: time.Now()}
	if e.Attr.IsDir() {
		prefix := strings.TrimSuffix(string(e.Name), "/") + "/"
		for n, it := range c.entries {
			if strings.HasPrefix(string(n), prefix) {
				it.stale = true
			}
		}
		for n, it := range c.lists {
			if n == e.Name || strings.HasPrefix(string(n), prefix) {
				it.stale = true
			}
		}
	}
	c.listed(e, false)
}

// listed puts e in, or if gone takes it out of, the cached listing of its
// directory. c.mu is held.
func (c *meta) listed(e *spindle.DirEntry, gone bool) {
	it := c.lists[parentOf(e.Name)]
	if it == nil {
		return
	}
	es := slices.Clone(it.es)
	i := slices.IndexFunc(es, func(x *spindle.DirEntry) bool { return x.Name == e.Name })
	switch {
	case gone && i >= 0:
		es = slices.Delete(es, i, i+1)
	case gone:
	case i >= 0:
		es[i] = e
	default:
		es = append(es, e)
	}
	it.es = es
}

// event applies an event of a watched tree. A file of the client's own
// tree, which it may list whole, is changed in place in the caches: a new
// file's name then is still known not to exist before it is written.
// Anything else is asked again.
func (c *meta) event(ev spindle.Event) {
	e := ev.Entry
	if userOf(e.Name) != c.fs.client.User() || e.Attr.IsDir() {
		c.changed(e.Name, e.Attr.IsDir())
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trees[userOf(e.Name)]; t != nil {
		t.gen++
	}
	if ev.Delete {
		c.entries[e.Name] = &entryItem{err: spindle.E(spindle.NotExist, e.Name), at: time.Now()}
	} else {
		c.entries[e.Name] = &entryItem{e: e, at: time.Now()}
	}
	c.listed(e, ev.Delete)
}

// madeDir notes that dir was made, empty, by this mount.
func (c *meta) madeDir(e *spindle.DirEntry) {
	c.stored(e)
	c.mu.Lock()
	c.lists[e.Name] = &listItem{at: time.Now()}
	c.mu.Unlock()
}

// known reports whether ev tells of an entry this mount stored, and
// already knows.
func (c *meta) known(ev spindle.Event) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	it := c.entries[ev.Entry.Name]
	return !ev.Delete && it != nil && !it.stale && it.e != nil && ev.Entry.Sequence != 0 && it.e.Sequence == ev.Entry.Sequence
}

// changed marks as stale what is cached about name, its directory's
// listing and, if below is set, everything under it: it is asked again,
// and used only if the node cannot be reached.
func (c *meta) changed(name spindle.PathName, below bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.trees[userOf(name)]; t != nil {
		t.gen++
	}
	if it := c.entries[name]; it != nil {
		it.stale = true
	}
	for _, d := range []spindle.PathName{name, parentOf(name)} {
		if it := c.lists[d]; it != nil {
			it.stale = true
		}
	}
	if below {
		prefix := strings.TrimSuffix(string(name), "/") + "/"
		for n, it := range c.entries {
			if strings.HasPrefix(string(n), prefix) {
				it.stale = true
			}
		}
		for n, it := range c.lists {
			if strings.HasPrefix(string(n), prefix) {
				it.stale = true
			}
		}
	}
}

// watch keeps a watch stream open on user's tree while the mount is,
// forgetting what each event changes, and reopens it when it breaks.
func (c *meta) watch(user spindle.UserName, t *tree) {
	ctx := c.fs.ctx
	root := spindle.PathName(string(user) + "/")
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(ctx)
		// Opening the stream is bounded; the stream itself lasts.
		timer := time.AfterFunc(c.fs.timeout, cancel)
		events, err := c.fs.client.Watch(wctx, root, -1)
		opened := timer.Stop()
		if err == nil && opened {
			c.mu.Lock()
			t.watching, t.since = true, time.Now()
			c.mu.Unlock()
			c.fs.log.Debug("watching", "tree", root)
			for ev := range events {
				if ev.Err != nil {
					err = ev.Err
					break
				}
				if ev.Entry != nil && !c.known(ev) {
					c.event(ev)
				}
			}
			c.mu.Lock()
			t.watching = false
			c.mu.Unlock()
		}
		cancel()
		wait := time.Second
		if err != nil && !unreachable(err) {
			// Not allowed to watch this tree: answers about it are
			// kept for unwatchedTTL. Ask again now and then, since
			// the tree may be shared later.
			wait = 30 * time.Second
		}
		c.fs.log.Debug("tree not watched", "tree", root, "err", err, "retry", wait)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}
