package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/node/wire"
	"spindle.dev/pack"
)

// Put implements spindle.Client.
func (c *Client) Put(ctx context.Context, name spindle.PathName, r io.Reader, packing spindle.Packing, progress func(int64)) (*spindle.DirEntry, error) {
	const op spindle.Op = "client.Put"
	p, err := c.cleanFile(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	name = p.Path()
	if access.IsAccessFile(name) || access.IsGroupFile(name) {
		e, err := c.putRules(ctx, name, r)
		if _, ok := err.(*spindle.Warning); ok {
			return e, err
		}
		if err != nil {
			return nil, spindle.E(op, name, err)
		}
		return e, nil
	}
	if packing == spindle.UnknownPack {
		packing = c.cfg.Packing
	}
	if packing == spindle.UnknownPack {
		packing = spindle.EEPack
	}
	ctx, gossip := deferGossip(ctx)
	var readers []spindle.PublicKey
	readersAt := int64(-1)
	if packing == spindle.EEPack {
		var public bool
		readers, public, readersAt, err = c.putReaders(ctx, name)
		if err != nil {
			return nil, spindle.E(op, name, err)
		}
		if public {
			// Anyone may read it: encryption would protect nothing.
			packing = spindle.EEIntegrityPack
		}
	}
	if progress != nil {
		r = &progressReader{r: r, fn: progress}
	}
	// The node admits blocks only from a signed-in peer; after it has
	// restarted, or the connection dropped, sign in again first.
	if c.disconnected.Swap(false) {
		if err := c.auth(ctx); err != nil {
			return nil, spindle.E(op, name, err)
		}
	}
	pipe := newPutPipe(c.putter(), putInFlight, c.putSlots, &c.bufs)
	entry := &spindle.DirEntry{Name: name}
	pc := pack.Config{
		Packing: packing,
		Signer:  c.keys,
		Readers: readers,
		Put:     pipe.put,
	}
	var held *heldBlocks
	if sc := c.erasure.Load(); sc != nil {
		pc.Erasure = pack.Erasure{K: sc.K, M: sc.M}
		pc.Stripe = stripePut(*sc, pipe)
	} else if c.takesBlocks.Load() {
		// A small file's blocks go with its entry (see inline.go).
		held = &heldBlocks{}
		pc.Put = held.holding(pipe.put)
	}
	err = pack.Pack(ctx, entry, r, pc)
	if werr := pipe.wait(); err == nil {
		err = werr
	}
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	// The blocks went out beside the gossip: they are of no use without
	// the entry, whose wrapped keys the key records looked up chose.
	if err := gossip.wait(); err != nil {
		return nil, spindle.E(op, name, err)
	}
	if held != nil {
		c.svc.held.add(held)
		defer c.svc.held.remove(held)
	}
	e, err := c.putFile(ctx, entry, readersAt)
	if gerr := gossip.wait(); err == nil {
		err = gerr
	}
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	return e, nil
}

// putRules stores an Access or Group file, whose text travels in its entry,
// and then re-wraps the keys of every file whose readers it may have
// changed, so that new readers can read at once.
//
// Everything that can make the put fail is checked before the entry is
// appended: its size and syntax, including the rules of access.Check that
// the host applies too. Whatever goes wrong after the append cannot undo
// it, so it is reported as a *spindle.Warning with the stored entry: a
// group the file names that does not exist or cannot be read (which
// Upspin allows: the group may be made later), and files that could not be
// re-wrapped.
func (c *Client) putRules(ctx context.Context, name spindle.PathName, r io.Reader) (*spindle.DirEntry, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxRulesSize+1))
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	if len(data) > maxRulesSize {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("Access and Group files are limited to %d bytes", maxRulesSize))
	}
	if err := access.Check(name, data); err != nil {
		return nil, err
	}
	groups, err := namedGroups(name, data)
	if err != nil {
		return nil, err
	}
	if data == nil {
		data = []byte{}
	}
	c.forgetReaders()
	e, err := c.dir.Put(ctx, &spindle.DirEntry{
		Name:    name,
		Packing: spindle.PlainPack,
		Time:    spindle.Now(),
		Size:    int64(len(data)),
		Inline:  data,
	})
	if err != nil {
		return nil, err
	}
	var w warnings
	for _, g := range groups {
		if _, err := c.loadGroup(ctx, g); err != nil {
			w.group("named by "+string(name), g, err)
		}
	}
	if access.IsAccessFile(name) {
		if err := c.wildcardWarning(ctx, name, data); err != nil {
			w.add(err)
		}
	}
	// Re-share what the change governs: for an Access file its directory,
	// for a Group file the owner's whole tree (any Access file may name it).
	p, _ := spindle.Parse(name)
	scope := p.Dir()
	if access.IsGroupFile(name) {
		scope = p.First(0)
	}
	reps, err := c.share(ctx, scope.Path(), true, true)
	for _, rep := range reps {
		for _, gerr := range rep.Groups {
			w.group("named by "+string(name), pathOf(gerr), gerr)
		}
		if rep.Err != nil {
			w.add(spindle.E(rep.Name, &ReshareError{Path: rep.Name, Err: rep.Err}))
		}
	}
	if err != nil {
		w.add(spindle.E(scope.Path(), &ReshareError{Path: scope.Path(), Tree: true, Err: err}))
	}
	return e, w.err()
}

// namedGroups returns the groups an Access or Group file names directly.
func namedGroups(name spindle.PathName, data []byte) ([]spindle.PathName, error) {
	if access.IsAccessFile(name) {
		a, err := access.Parse(name, data)
		if err != nil {
			return nil, err
		}
		return a.Groups(), nil
	}
	g, err := access.ParseGroup(name, data)
	if err != nil {
		return nil, err
	}
	return g.Groups(), nil
}

// loadGroup looks up and parses a Group file, once verified as its
// owner's.
func (c *Client) loadGroup(ctx context.Context, g spindle.PathName) (*access.Group, error) {
	ge, err := c.dir.Lookup(ctx, g)
	if err != nil {
		return nil, err
	}
	text, err := c.rulesText(ctx, ge, g)
	if err != nil {
		return nil, err
	}
	return access.ParseGroup(g, text)
}

// whichAccess returns the Access file that governs name, as the node
// answers, once checked to be an Access file above name and verified as
// its owner's; nil if the node says none does.
func (c *Client) whichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	ae, err := c.dir.WhichAccess(ctx, name)
	if err != nil || ae == nil {
		return nil, err
	}
	if err := checkGoverns(ae, name); err != nil {
		return nil, err
	}
	if _, err := c.rulesText(ctx, ae, ae.Name); err != nil {
		return nil, err
	}
	return ae, nil
}

// pathOf returns the path an error names: for an error from
// access.KnownUsers, the group.
func pathOf(err error) spindle.PathName {
	var e *spindle.Error
	if errors.As(err, &e) {
		return e.Path
	}
	return ""
}

// warnings collects the problems of a command that took effect, one per
// path, for a *spindle.Warning.
type warnings struct {
	problems []error
	seen     map[spindle.PathName]bool
}

func (w *warnings) add(err error) {
	p := pathOf(err)
	if w.seen[p] {
		return
	}
	if w.seen == nil {
		w.seen = make(map[spindle.PathName]bool)
	}
	w.seen[p] = true
	w.problems = append(w.problems, err)
}

// group adds the problem of a group that could not be loaded; what says
// where it is named ("named by ann@example.com/docs/Access").
func (w *warnings) group(what string, g spindle.PathName, err error) {
	if errors.Is(err, spindle.NotExist) {
		w.add(spindle.E(g, spindle.NotExist, fmt.Sprintf("group %s: until it exists it grants nothing, and its members get no keys", what)))
		return
	}
	w.add(spindle.E(g, spindle.KindOf(err), because(fmt.Sprintf("group %s cannot be read, so its members are not known and get no keys from you", what), err)))
}

// innermost returns the cause at the bottom of a chain of *spindle.Errors
// as a plain error, without the operations, paths and kinds above it, or
// nil if there is none.
func innermost(err error) error {
	for {
		e, ok := err.(*spindle.Error)
		if !ok {
			return errors.New(err.Error())
		}
		if e.Err == nil {
			return nil
		}
		err = e.Err
	}
}

// because appends ": cause" to msg if err has a cause below its kinds.
func because(msg string, err error) string {
	if c := innermost(err); c != nil {
		return msg + ": " + c.Error()
	}
	return msg
}

func (w *warnings) err() error {
	if len(w.problems) == 0 {
		return nil
	}
	return &spindle.Warning{Problems: w.problems}
}

// readersTTL is how long a client reuses the reader keys it worked out
// for a directory when putting files: a copy of many files asks once, not
// once a file. The client's own Access and Group changes clear the cache;
// another client's become visible within readersTTL (and the re-sharing
// their writer's client does covers files put meanwhile).
const readersTTL = 2 * time.Second

type cachedReaders struct {
	keys      []spindle.PublicKey
	public    bool
	readersAt int64 // The head of the tree they were worked out under, -1 if unknown.
	at        time.Time
}

// putReaders is readerKeys for a new file, cached per directory. It also
// returns the sequence number of the oldest head of name's tree that the
// answers it used were proved against (see dirlog.Entry.ReadersAt), -1
// if none was.
func (c *Client) putReaders(ctx context.Context, name spindle.PathName) ([]spindle.PublicKey, bool, int64, error) {
	dir := pathDir(name)
	c.mu.Lock()
	r, ok := c.readersCache[dir]
	c.mu.Unlock()
	if ok && time.Since(r.at) < readersTTL {
		return r.keys, r.public, r.readersAt, nil
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, false, 0, err
	}
	rctx, ra := withReadersAt(ctx, p.User())
	if c.keyLog != nil {
		// The readers' key records come with the Access file.
		rctx = context.WithValue(rctx, keepProofsKey{}, c.keepProofs)
	}
	keys, public, _, err := c.readerKeys(rctx, name)
	if err != nil {
		return nil, false, 0, err
	}
	c.mu.Lock()
	if c.readersCache == nil {
		c.readersCache = make(map[spindle.PathName]cachedReaders)
	}
	c.readersCache[dir] = cachedReaders{keys: keys, public: public, readersAt: ra.at(), at: time.Now()}
	c.mu.Unlock()
	return keys, public, ra.at(), nil
}

// forgetReaders clears the reader cache, after a change of rights.
func (c *Client) forgetReaders() {
	c.mu.Lock()
	c.readersCache = nil
	c.mu.Unlock()
}

// maxRulesSize bounds Access and Group files, which travel inside log entries.
const maxRulesSize = 64 << 10

// readerKeys returns the keys to wrap a new file at name for: every user the
// governing Access file grants read, and the tree's owner. public reports
// that the file is readable by all. unknown lists readers that could not be
// named with a key (wildcards, unregistered users).
//
// Groups that cannot be loaded are left out: a new file is wrapped for the
// readers the client can name, and spin share reports the rest.
//
// The client's own user is wrapped for with the keys the client holds,
// not with a key record from the cluster: a file its writer can open is
// right whatever the record says, and a new spin process then writes a
// file only its owner reads without a lookup, a round trip and a proof
// check. (Signatures are still checked against records: see writerKeys.)
func (c *Client) readerKeys(ctx context.Context, name spindle.PathName) (keys []spindle.PublicKey, public bool, unknown []string, err error) {
	users, _, err := c.readerUsers(ctx, name)
	if err != nil {
		return nil, false, nil, err
	}
	others := slices.DeleteFunc(slices.Clone(users), func(u spindle.UserName) bool { return u == c.user })
	keys, public, unknown, err = c.keysFor(ctx, others)
	if err != nil || public || len(others) == len(users) {
		return keys, public, unknown, err
	}
	return append([]spindle.PublicKey{c.keys.PublicKey()}, keys...), false, unknown, nil
}

// readerUsers returns the users granted read on name, with the owner and
// with every *@domain expanded, and an error naming each group that grants
// read but could not be loaded.
func (c *Client) readerUsers(ctx context.Context, name spindle.PathName) ([]spindle.UserName, []error, error) {
	users, groups, err := c.readers(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	users, err = c.expandWildcards(ctx, users)
	if err != nil {
		return nil, nil, err
	}
	return users, groups, nil
}

// keysFor returns the current keys of users, as readerKeys does.
func (c *Client) keysFor(ctx context.Context, users []spindle.UserName) (keys []spindle.PublicKey, public bool, unknown []string, err error) {
	if slices.Contains(users, spindle.AllUsers) {
		return nil, true, nil, nil
	}
	for _, u := range users {
		k, err := c.userKey(ctx, u)
		if err != nil {
			if errors.Is(err, spindle.NotExist) || errors.Is(err, spindle.Invalid) {
				unknown = append(unknown, string(u))
				continue
			}
			return nil, false, nil, err
		}
		keys = append(keys, k)
	}
	return keys, false, unknown, nil
}

// expandWildcards replaces each *@domain in users by the users the key
// cluster has registered in that domain. Users who register later get a
// wrapped key when the owner next shares (spin share -fix).
func (c *Client) expandWildcards(ctx context.Context, users []spindle.UserName) ([]spindle.UserName, error) {
	var out []spindle.UserName
	for _, u := range users {
		dom, ok := strings.CutPrefix(string(u), "*@")
		if !ok {
			if !slices.Contains(out, u) {
				out = append(out, u)
			}
			continue
		}
		resp, err := call[wire.KeyDomainRequest, wire.KeyDomainResponse](ctx, c.svc, wire.KeyDomain, "", &wire.KeyDomainRequest{Domain: dom})
		if err != nil {
			return nil, err
		}
		for _, m := range resp.Users {
			// The node lists the users; only users of the domain may be
			// among them, or it would choose who gets file keys.
			if _, d, ok := strings.Cut(string(m), "@"); !ok || d != dom || strings.HasPrefix(string(m), "*") {
				return nil, spindle.E(spindle.PathName(u), spindle.Integrity, fmt.Sprintf("node listed %s among the users of %s", m, dom))
			}
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out, nil
}

// readers returns the users granted read on name, with the owner, and an
// error naming each group that grants read but could not be loaded.
func (c *Client) readers(ctx context.Context, name spindle.PathName) ([]spindle.UserName, []error, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, nil, err
	}
	owner := p.User()
	ae, err := c.whichAccess(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if ae == nil {
		return []spindle.UserName{owner}, nil, nil
	}
	a, err := access.Parse(ae.Name, ae.Inline)
	if err != nil {
		return nil, nil, err
	}
	users, groups, err := a.KnownUsers(access.Read, func(g spindle.PathName) (*access.Group, error) {
		return c.loadGroup(ctx, g)
	})
	if err != nil {
		return nil, nil, err
	}
	// A group that cannot be read is left out and reported; one the node
	// lied about stops everything, as any other lie does.
	for _, g := range groups {
		if errors.Is(g, spindle.Integrity) {
			return nil, nil, g
		}
	}
	if !slices.Contains(users, owner) {
		users = append(users, owner)
	}
	return users, groups, nil
}

// wrappedUsers names the holders of wrapped keys for e, as far as the
// client can: it matches the wraps' key hashes against the keys of readers
// (the file's readers as readerUsers finds them, or nil if unknown), its
// owner and its writer, and names the wrap for pack.AllKey AllUsers.
// Unmatched hashes are returned in hex.
func (c *Client) wrappedUsers(ctx context.Context, e *spindle.DirEntry, readers []spindle.UserName) ([]spindle.UserName, []string, error) {
	hashes, err := pack.WrappedKeys(e)
	if err != nil {
		return nil, nil, err
	}
	p, _ := spindle.Parse(e.Name)
	cands := append(slices.Clone(readers), p.User(), e.Writer, c.user)
	byHash := map[[32]byte]spindle.UserName{}
	for _, u := range cands {
		if k, err := c.userKey(ctx, u); err == nil {
			if h, err := spindle.KeyHash(k); err == nil {
				byHash[h] = u
			}
		}
	}
	// Last, so that a user who registered the all users key as their own
	// (and so made their files everyone's) cannot pass for a single reader.
	if h, err := spindle.KeyHash(pack.AllKey()); err == nil {
		byHash[h] = spindle.AllUsers
	}
	var users []spindle.UserName
	var unknown []string
	for _, h := range hashes {
		if u, ok := byHash[h]; ok {
			if !slices.Contains(users, u) {
				users = append(users, u)
			}
		} else {
			unknown = append(unknown, fmt.Sprintf("%x", h[:8]))
		}
	}
	slices.Sort(users)
	return users, unknown, nil
}

// Share implements spindle.Client.
func (c *Client) Share(ctx context.Context, name spindle.PathName, recursive, fix bool) ([]spindle.ShareReport, error) {
	const op spindle.Op = "client.Share"
	p, err := c.clean(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	reps, err := c.share(ctx, p.Path(), recursive, fix)
	if err != nil {
		return reps, spindle.E(op, p.Path(), err)
	}
	return reps, nil
}

// share reports on (and with fix, repairs) every ee file at name. A file
// that cannot be checked or repaired is reported with its Err and the
// others are still done; the error is for a name that cannot be listed.
func (c *Client) share(ctx context.Context, name spindle.PathName, recursive, fix bool) ([]spindle.ShareReport, error) {
	files, err := c.files(ctx, name, recursive)
	if err != nil {
		return nil, err
	}
	var reps []spindle.ShareReport
	for _, e := range files {
		if e.Packing != spindle.EEPack || e.Attr.IsIncomplete() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return reps, spindle.E(spindle.Transient, err)
		}
		rep, err := c.shareOne(ctx, e, fix)
		rep.Err = err
		reps = append(reps, rep)
	}
	return reps, nil
}

// files returns the file entries at name: the file itself, or the files in
// the directory (and below it if recursive).
func (c *Client) files(ctx context.Context, name spindle.PathName, recursive bool) ([]*spindle.DirEntry, error) {
	e, err := c.dir.Lookup(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := answerFor(e, name); err != nil {
		return nil, err
	}
	if err := c.verifyEntry(ctx, e); err != nil {
		return nil, err
	}
	if !e.Attr.IsDir() {
		if e.Attr.IsLink() {
			return nil, nil
		}
		return []*spindle.DirEntry{e}, nil
	}
	var out []*spindle.DirEntry
	dirs := []spindle.PathName{name}
	for len(dirs) > 0 {
		d := dirs[0]
		dirs = dirs[1:]
		pat := string(d)
		if pat[len(pat)-1] != '/' {
			pat += "/"
		}
		es, err := c.glob(ctx, spindle.GlobEscape(pat)+"*")
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			switch {
			case e.Attr.IsDir():
				if recursive {
					dirs = append(dirs, e.Name)
				}
			case e.Attr.IsLink():
			default:
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// shareOne compares the wraps of one ee file with its readers and, with fix,
// re-wraps its key for exactly its readers: for all of them, if the
// Access file lets all read it (the wrap for pack.AllKey). While a group
// that grants read cannot be read, or all may read, it removes no wrap but
// the one for all: holders it cannot account for may be that group's
// members, and when all may read every holder is a reader.
func (c *Client) shareOne(ctx context.Context, e *spindle.DirEntry, fix bool) (spindle.ShareReport, error) {
	rep := spindle.ShareReport{Name: e.Name}
	p, err := spindle.Parse(e.Name)
	if err != nil {
		return rep, err
	}
	rctx, ra := withReadersAt(ctx, p.User())
	direct, groups, err := c.readers(rctx, e.Name)
	if err != nil {
		return rep, err
	}
	readers, err := c.expandWildcards(ctx, direct)
	if err != nil {
		return rep, err
	}
	if rep.Domains, err = c.domainMembers(ctx, direct); err != nil {
		return rep, err
	}
	rep.Readers, rep.Groups = readers, groups
	unsure := slices.ContainsFunc(groups, func(err error) bool { return !errors.Is(err, spindle.NotExist) })
	// When all may read, every holder is a reader: no wrap is extra, and
	// keeping them spares the readers named later a key the owner may not
	// be able to give them again.
	everyone := slices.Contains(readers, spindle.AllUsers)
	wrapped, unknown, err := c.wrappedUsers(ctx, e, readers)
	if err != nil {
		return rep, err
	}
	rep.Wrapped, rep.Unknowns = wrapped, unknown
	want := slices.Clone(readers)
	if !slices.Contains(want, e.Writer) {
		want = append(want, e.Writer) // The writer keeps its wrap, as pack always gives one.
	}
	for _, u := range readers {
		if slices.Contains(wrapped, u) {
			continue
		}
		if u == spindle.AllUsers {
			rep.Missing = append(rep.Missing, u)
		} else if _, err := c.userKey(ctx, u); err == nil {
			rep.Missing = append(rep.Missing, u)
		}
	}
	for _, u := range wrapped {
		switch {
		case slices.Contains(want, u), everyone:
		case unsure && u != spindle.AllUsers: // No group holds all.
			rep.Unsure = append(rep.Unsure, u)
		default:
			rep.Extra = append(rep.Extra, u)
		}
	}
	keepOthers := unsure || everyone
	removable := len(rep.Extra) > 0 || !keepOthers && len(rep.Unknowns) > 0
	if !fix || (len(rep.Missing) == 0 && !removable) {
		return rep, nil
	}
	// The key is about to be wrapped for the readers of this name, and
	// the entry signed anew: it must be the one its writer signed for
	// this name, not another file of the owner's served in its place.
	if err := c.verifyPacked(ctx, e); err != nil {
		return rep, err
	}
	// Wrap for every reader who can be named, and for all if all may read.
	named := slices.DeleteFunc(slices.Clone(readers), func(u spindle.UserName) bool { return u == spindle.AllUsers })
	keys, _, _, err := c.keysFor(ctx, named)
	if err != nil {
		return rep, err
	}
	if wk, err := c.userKey(ctx, e.Writer); err == nil && !slices.Contains(keys, wk) {
		keys = append(keys, wk)
	}
	if slices.Contains(readers, spindle.AllUsers) {
		keys = append(keys, pack.AllKey())
	}
	var pd []byte
	if keepOthers {
		var remove []spindle.PublicKey
		if slices.Contains(rep.Extra, spindle.AllUsers) {
			remove = append(remove, pack.AllKey())
		}
		pd, err = pack.AddReaders(e, c.keys, keys, remove)
	} else {
		pd, err = pack.Share(e, c.keys, keys)
	}
	if err != nil {
		return rep, err
	}
	ne := *e
	ne.Packdata = pd
	ne.Signed = nil
	// After a key rotation, the entry goes in the log past the point up
	// to which the old key may sign: its signature must be the new key's.
	oldKey := e.Writer == c.user && pack.Verify(e, []spindle.PublicKey{c.keys.PublicKey()}) != nil
	if e.Writer != c.user || e.SignedName != "" || oldKey {
		// The log records who changed the entry; the packing's signature
		// must name the same writer, with a key it holds now, and the name
		// the entry has now (a host refuses an entry that names another),
		// so sign it anew (the commitment, not the key, is signed, so
		// nothing else changes).
		if err := pack.Resign(&ne, ne.Name, c.keys); err != nil {
			return rep, err
		}
	}
	// The readers were worked out under ra's head: if the Access or
	// Group files deciding them change before the entry is appended, it
	// is refused (Stale), and spin share -fix, run again, works them out
	// anew.
	if _, err := c.dir.PutAt(ctx, &ne, ra.at()); err != nil {
		return rep, err
	}
	rep.Fixed = true
	return rep, nil
}

// verifyPacked checks the writer's signature in e's packdata against the
// writer's keys, current and then earlier; the name it signs is checked
// by verifyEntry.
func (c *Client) verifyPacked(ctx context.Context, e *spindle.DirEntry) error {
	return c.tryWriterKeys(ctx, e, c.svc.puts.signedAt(e), func(wkeys []spindle.PublicKey) error { return pack.Verify(e, wkeys) })
}

// progressReader reports the bytes read through it.
type progressReader struct {
	r  io.Reader
	fn func(int64)
	n  int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}

// putPipe stores blocks with several in flight, so that the network round
// trip and the node's fsync of one block overlap the packing of the next.
type putPipe struct {
	store  refPutter
	sem    chan struct{} // Blocks in flight for this put.
	shared chan struct{} // Blocks in flight for all the client's puts, which bounds their buffers.
	wg     sync.WaitGroup
	pool   *sync.Pool // Buffers of MaxStoredBlockSize, shared by the client's puts.

	mu  sync.Mutex
	err error
}

// refPutter stores a block whose ref the caller has computed; the store
// checks it (p2p.RemoteStore does).
type refPutter interface {
	PutRef(ctx context.Context, ref spindle.Ref, data []byte) error
}

func newPutPipe(store refPutter, inFlight int, shared chan struct{}, pool *sync.Pool) *putPipe {
	return &putPipe{store: store, sem: make(chan struct{}, inFlight), shared: shared, pool: pool}
}

// put is a pack.PutFunc.
func (p *putPipe) put(ctx context.Context, ref spindle.Ref, data []byte) error {
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case p.sem <- struct{}{}:
	case <-ctx.Done():
		return spindle.E(spindle.Transient, ctx.Err())
	}
	select {
	case p.shared <- struct{}{}:
	case <-ctx.Done():
		<-p.sem
		return spindle.E(spindle.Transient, ctx.Err())
	}
	// Whole blocks reuse pooled buffers; the short last block of a file
	// gets one of its own size.
	var buf []byte
	pooled := len(data) >= spindle.MaxBlockSize/2
	if pooled {
		if b, ok := p.pool.Get().(*[]byte); ok {
			buf = (*b)[:len(data)]
		} else {
			buf = make([]byte, len(data), spindle.MaxStoredBlockSize)
		}
	} else {
		buf = make([]byte, len(data))
	}
	copy(buf, data)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := p.store.PutRef(ctx, ref, buf)
		if pooled {
			p.pool.Put(&buf)
		}
		<-p.shared
		<-p.sem
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = err
			}
			p.mu.Unlock()
		}
	}()
	return nil
}

// wait waits for every block to be stored and returns the first error.
func (p *putPipe) wait() error {
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// putInFlight is the number of blocks a Put keeps on their way to the node
// at once, to cover the node's fsync of each. 16 measured no faster.
// clientPutInFlight bounds the blocks of all of a client's puts together
// (spin cp puts many files at once), and so the memory their buffers take:
// it matches the requests a node serves at once on one block stream.
const (
	putInFlight       = 8
	clientPutInFlight = 16
)
