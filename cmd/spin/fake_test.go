package main

import (
	"bytes"
	"context"
	"io"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"spindle.dev"
)

// fakeClient is an in-memory spindle.Client for testing the command line:
// a map of entries for every user, with just enough of Spindle's rules to
// tell the commands' handling of each outcome apart. The acting user may
// do anything in its own tree; in another user's tree it may read only
// what that user granted with grant, and sees the rest as private.
type fakeClient struct {
	me spindle.UserName
	*fakeWorld
}

// A fakeWorld is what all fake clients made with as share.
type fakeWorld struct {
	mu       sync.Mutex
	entries  map[spindle.PathName]*spindle.DirEntry
	data     map[spindle.PathName][]byte
	readable map[spindle.PathName]bool // Paths in others' trees that me may read.
	users    map[spindle.UserName]*spindle.User
	seq      int64
	events   []spindle.Event
	shares   []spindle.ShareReport
	putWarn  error // Returned, with the entry, by every successful Put.
	signedUp bool
	closed   int

	putDelay time.Duration // Each Put takes this long, to measure concurrency.
	inFlight int
	maxPuts  int // Most Puts in flight at once.
	puts     int
}

var _ spindle.Client = (*fakeClient)(nil)

func newFakeClient(me spindle.UserName, others ...spindle.UserName) *fakeClient {
	c := &fakeClient{me: me, fakeWorld: &fakeWorld{
		entries:  make(map[spindle.PathName]*spindle.DirEntry),
		data:     make(map[spindle.PathName][]byte),
		readable: make(map[spindle.PathName]bool),
		users:    make(map[spindle.UserName]*spindle.User),
	}}
	for _, u := range append([]spindle.UserName{me}, others...) {
		root := spindle.PathName(u + "/")
		c.entries[root] = &spindle.DirEntry{Name: root, Attr: spindle.AttrDirectory, Writer: u}
		c.users[u] = &spindle.User{Name: u, PublicKey: spindle.PublicKey("p256:key-of-" + u), DirHosts: []spindle.PeerAddr{"/ip4/127.0.0.1/tcp/4242/p2p/12D3KooWfake"}}
	}
	return c
}

const fakeOp spindle.Op = "fake"

// as returns a client for user u in the same world.
func (c *fakeClient) as(u spindle.UserName) *fakeClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	root := spindle.PathName(u + "/")
	if _, ok := c.entries[root]; !ok {
		c.entries[root] = &spindle.DirEntry{Name: root, Attr: spindle.AttrDirectory, Writer: u}
	}
	return &fakeClient{me: u, fakeWorld: c.fakeWorld}
}

func (c *fakeClient) User() spindle.UserName { return c.me }

// clean expands @ and cleans name.
func (c *fakeClient) clean(name spindle.PathName) (spindle.Parsed, error) {
	p, err := expand(c.me, string(name))
	if err != nil {
		return spindle.Parsed{}, err
	}
	return spindle.Parse(p)
}

// check decides whether me may act on p; write asks for a write right. In
// another user's tree, me may read what is marked readable, or what an
// Access file mentioning me governs. Callers hold c.mu.
func (c *fakeClient) check(p spindle.Parsed, write bool) error {
	if p.User() == c.me {
		return nil
	}
	if !write && c.readable[p.Path()] {
		return nil
	}
	if !write {
		for dir := p.Dir(); ; dir = dir.Dir() {
			if a, ok := c.data[join(dir.Path(), "Access")]; ok {
				if strings.Contains(string(a), string(c.me)) {
					return nil
				}
				break
			}
			if dir.IsRoot() {
				break
			}
		}
	}
	if _, ok := c.entries[p.Path()]; ok && !write {
		return spindle.E(fakeOp, spindle.Permission, p.Path())
	}
	if write {
		return spindle.E(fakeOp, spindle.Permission, p.Path())
	}
	return spindle.E(fakeOp, spindle.Private, p.Path())
}

func (c *fakeClient) parentDir(p spindle.Parsed) error {
	if p.IsRoot() {
		return nil
	}
	dir, ok := c.entries[p.Dir().Path()]
	if !ok {
		return spindle.E(fakeOp, spindle.NotExist, p.Dir().Path())
	}
	if !dir.Attr.IsDir() {
		return spindle.E(fakeOp, spindle.NotDir, p.Dir().Path())
	}
	return nil
}

func (c *fakeClient) record(e *spindle.DirEntry, del bool) {
	cp := *e
	c.events = append(c.events, spindle.Event{Entry: &cp, Delete: del})
}

func (c *fakeClient) put(p spindle.Parsed, e *spindle.DirEntry) (*spindle.DirEntry, error) {
	if err := c.check(p, true); err != nil {
		return nil, err
	}
	if err := c.parentDir(p); err != nil {
		return nil, err
	}
	if old, ok := c.entries[p.Path()]; ok && old.Attr.IsDir() {
		return nil, spindle.E(fakeOp, spindle.IsDir, p.Path())
	}
	c.seq++
	e.Name, e.Writer, e.Sequence, e.Time = p.Path(), c.me, c.seq, spindle.Time(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).UnixNano())
	c.entries[p.Path()] = e
	c.record(e, false)
	cp := *e
	return &cp, nil
}

func (c *fakeClient) Put(ctx context.Context, name spindle.PathName, r io.Reader, packing spindle.Packing, progress func(int64)) (*spindle.DirEntry, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, spindle.E(fakeOp, spindle.IO, name, err)
	}
	c.mu.Lock()
	c.puts++
	c.inFlight++
	c.maxPuts = max(c.maxPuts, c.inFlight)
	delay := c.putDelay
	c.mu.Unlock()
	time.Sleep(delay)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight--
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	if packing == spindle.UnknownPack {
		packing = spindle.EEPack
	}
	e := &spindle.DirEntry{Packing: packing, Size: int64(len(data)), Blocks: []spindle.DirBlock{{Ref: "bafkfake", Size: int64(len(data))}}}
	e, err = c.put(p, e)
	if err != nil {
		return nil, err
	}
	c.data[p.Path()] = data
	return e, c.putWarn
}

// lookup returns the entry for p, following links if follow is set.
// Callers hold c.mu.
func (c *fakeClient) lookup(p spindle.Parsed, follow bool) (*spindle.DirEntry, error) {
	for range 10 {
		if err := c.check(p, false); err != nil {
			return nil, err
		}
		e, ok := c.entries[p.Path()]
		if !ok {
			return nil, spindle.E(fakeOp, spindle.NotExist, p.Path())
		}
		if !follow || !e.Attr.IsLink() {
			cp := *e
			return &cp, nil
		}
		var err error
		if p, err = spindle.Parse(e.Link); err != nil {
			return nil, err
		}
	}
	return nil, spindle.E(fakeOp, spindle.BrokenLink, p.Path(), "too many links")
}

type fakeFile struct {
	*bytes.Reader
	entry *spindle.DirEntry
}

func (f *fakeFile) Close() error             { return nil }
func (f *fakeFile) Entry() *spindle.DirEntry { return f.entry }

func (c *fakeClient) Open(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	e, err := c.lookup(p, true)
	if err != nil {
		return nil, err
	}
	if e.Attr.IsDir() {
		return nil, spindle.E(fakeOp, spindle.IsDir, e.Name)
	}
	return &fakeFile{Reader: bytes.NewReader(c.data[e.Name]), entry: e}, nil
}

func (c *fakeClient) Lookup(ctx context.Context, name spindle.PathName, follow bool) (*spindle.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	return c.lookup(p, follow)
}

func (c *fakeClient) Glob(ctx context.Context, pattern string) ([]*spindle.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pp, err := c.clean(spindle.PathName(pattern))
	if err != nil {
		return nil, err
	}
	if err := c.check(pp.First(0), false); err != nil && pp.User() != c.me {
		return nil, err
	}
	var out []*spindle.DirEntry
	for name, e := range c.entries {
		p, _ := spindle.Parse(name)
		if p.User() != pp.User() || p.NElem() != pp.NElem() || p.IsRoot() {
			continue
		}
		match := true
		for i := range p.NElem() {
			if ok, err := path.Match(pp.Elem(i), p.Elem(i)); err != nil {
				return nil, spindle.E(fakeOp, spindle.Invalid, err)
			} else if !ok {
				match = false
				break
			}
		}
		if match && c.check(p, false) == nil {
			cp := *e
			out = append(out, &cp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (c *fakeClient) MakeDirectory(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	if _, ok := c.entries[p.Path()]; ok {
		return nil, spindle.E(fakeOp, spindle.Exist, p.Path())
	}
	return c.put(p, &spindle.DirEntry{Attr: spindle.AttrDirectory})
}

func (c *fakeClient) Delete(ctx context.Context, name spindle.PathName) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return err
	}
	if err := c.check(p, true); err != nil {
		return err
	}
	e, ok := c.entries[p.Path()]
	if !ok {
		return spindle.E(fakeOp, spindle.NotExist, p.Path())
	}
	if e.Attr.IsDir() {
		for other := range c.entries {
			if strings.HasPrefix(string(other), strings.TrimSuffix(string(p.Path()), "/")+"/") && other != p.Path() {
				return spindle.E(fakeOp, spindle.NotEmpty, p.Path())
			}
		}
	}
	delete(c.entries, p.Path())
	delete(c.data, p.Path())
	c.seq++
	e.Sequence = c.seq
	c.record(e, true)
	return nil
}

func (c *fakeClient) PutLink(ctx context.Context, target, linkName spindle.PathName) (*spindle.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(linkName)
	if err != nil {
		return nil, err
	}
	t, err := c.clean(target)
	if err != nil {
		return nil, err
	}
	return c.put(p, &spindle.DirEntry{Attr: spindle.AttrLink, Link: t.Path()})
}

func (c *fakeClient) Rename(ctx context.Context, oldName, newName spindle.PathName) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	op, err := c.clean(oldName)
	if err != nil {
		return err
	}
	np, err := c.clean(newName)
	if err != nil {
		return err
	}
	if err := c.check(op, true); err != nil {
		return err
	}
	if err := c.check(np, true); err != nil {
		return err
	}
	if _, ok := c.entries[op.Path()]; !ok {
		return spindle.E(fakeOp, spindle.NotExist, op.Path())
	}
	if _, ok := c.entries[np.Path()]; ok {
		return spindle.E(fakeOp, spindle.Exist, np.Path())
	}
	if err := c.parentDir(np); err != nil {
		return err
	}
	for name, e := range c.entries {
		p, _ := spindle.Parse(name)
		if !p.HasPrefix(op) {
			continue
		}
		rest := strings.TrimPrefix(string(name), string(op.Path()))
		nn := spindle.PathName(string(np.Path()) + rest)
		delete(c.entries, name)
		e.Name = nn
		c.entries[nn] = e
		if d, ok := c.data[name]; ok {
			delete(c.data, name)
			c.data[nn] = d
		}
	}
	return nil
}

func (c *fakeClient) WhichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	for dir := p.Dir(); ; dir = dir.Dir() {
		if e, ok := c.entries[join(dir.Path(), "Access")]; ok {
			cp := *e
			return &cp, nil
		}
		if dir.IsRoot() {
			return nil, nil
		}
	}
}

func (c *fakeClient) Watch(ctx context.Context, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.clean(name)
	if err != nil {
		return nil, err
	}
	// As host.Server.Watch: 0 sends the current state, -1 nothing
	// that has happened, n every change from sequence n on. The fake then
	// closes the channel instead of waiting for more.
	var evs []spindle.Event
	switch fromSeq {
	case -1:
	case 0:
		for name, e := range c.entries {
			ep, _ := spindle.Parse(name)
			if ep.HasPrefix(p) {
				cp := *e
				evs = append(evs, spindle.Event{Entry: &cp})
			}
		}
		sort.Slice(evs, func(i, j int) bool { return evs[i].Entry.Name < evs[j].Entry.Name })
	default:
		for _, ev := range c.events {
			ep, _ := spindle.Parse(ev.Entry.Name)
			if ev.Entry.Sequence >= fromSeq && ep.HasPrefix(p) {
				evs = append(evs, ev)
			}
		}
	}
	ch := make(chan spindle.Event, len(evs))
	for _, ev := range evs {
		ch <- ev
	}
	close(ch)
	return ch, nil
}

func (c *fakeClient) Share(ctx context.Context, name spindle.PathName, recursive, fix bool) ([]spindle.ShareReport, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]spindle.ShareReport, len(c.shares))
	for i, r := range c.shares {
		r.Fixed = fix && (len(r.Missing) > 0 || len(r.Extra) > 0)
		out[i] = r
	}
	return out, nil
}

func (c *fakeClient) Readers(ctx context.Context, name spindle.PathName) ([]spindle.UserName, error) {
	return []spindle.UserName{c.me}, nil
}

func (c *fakeClient) Signup(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.signedUp = true
	if _, ok := c.users[c.me]; !ok {
		c.users[c.me] = &spindle.User{Name: c.me, PublicKey: spindle.PublicKey("p256:key-of-" + c.me)}
	}
	return nil
}

func (c *fakeClient) SignupSuffixed(ctx context.Context, s spindle.Signer) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	name := s.UserName()
	if name == c.me || spindle.BaseUser(name) != c.me {
		return spindle.E(fakeOp, name, spindle.Invalid, "not a +suffix user of "+string(c.me))
	}
	if u, ok := c.users[name]; ok && u.PublicKey != s.PublicKey() {
		return spindle.E(fakeOp, name, spindle.Exist)
	}
	c.users[name] = &spindle.User{Name: name, PublicKey: s.PublicKey()}
	return nil
}

func (c *fakeClient) LookupUser(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	u, ok := c.users[name]
	if !ok {
		return nil, spindle.E(fakeOp, spindle.NotExist, name)
	}
	cp := *u
	return &cp, nil
}

func (c *fakeClient) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed++
	return nil
}
