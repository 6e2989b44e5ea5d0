package dirlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"

	"spindle.dev"
	"spindle.dev/access"
)

// A KeyFunc returns a user's current public key. Errors of kind NotExist or
// Invalid mean the user has no usable key, which makes the user's entries
// invalid; any other error is a failure to find out, which stops the
// operation without judging the entry.
type KeyFunc func(ctx context.Context, user spindle.UserName) (spindle.PublicKey, error)

// A KeyHistoryFunc returns every key a user has held, current one
// included, as the key cluster's log records them (see [HeldKeys]).
type KeyHistoryFunc func(ctx context.Context, user spindle.UserName) ([]HeldKey, error)

// A HeldKey is a key a user has held, and how far it signs: into the
// user's own tree, and in key time, in every tree.
type HeldKey struct {
	Key spindle.PublicKey
	// Until is the last sequence number of the user's own tree that the
	// key may sign: the DirSeq of the record that replaced it. It is -1
	// for the current key, which signs without limit.
	Until int64
	// Replaced is the index, in the key cluster's transparency log, of
	// the record that replaced the key: it signs only entries anchored at
	// a log size of at most Replaced (Entry.KeyAt), that is, by a writer
	// whose client had not yet seen that record. Unused for the current
	// key.
	Replaced int64
}

// HeldKeys returns the keys a user has held, in the order of the record
// versions given (oldest first), each with the cutoffs that the record
// replacing it set: its DirSeq (see [spindle.User.DirSeq]) and its index
// in the key cluster's log, index[i] being that of versions[i].
//
// This is the rule for rotated keys. An entry signed with a key the user
// replaced is valid only if it is anchored before the replacing record
// (Entry.KeyAt at most its index), in any tree, and, in the user's own
// tree, if its sequence number is at most the DirSeq cutoff. Both
// cutoffs are in the replacing record, which the new key signs and the
// key cluster's transparency log orders; the writer signs the entry's
// sequence number and anchor. A thief holding the replaced key can claim
// any anchor, so a host that sequences a tree takes nothing signed with
// a key that is not current, nor anchored far behind the key log it
// follows (see [KeyAtSlack]), and a tree's anchors never decrease, so a
// backdated entry is refused wherever an entry anchored after the
// rotation precedes it.
//
// What remains: a dir host that colludes with the thief can append, to a
// tree whose entries are all anchored before the rotation (one nothing
// has written to since), an entry backdated to before it, or one in the
// first entry format, which has no anchor and is judged by the first
// rule (another user's tree: any position). A reader sees the entry and
// its proof, not the entries before it: it refuses such an entry only if
// it has seen, proved, an entry of the tree before it anchored after the
// rotation (the client remembers the highest anchor per tree), and
// accepts it otherwise. The tree's other dir hosts and an audit refuse it
// once an entry anchored after the rotation precedes it. A head that
// named the tree's anchor would extend the reader's check to every entry
// after any head it has seen; heads do not name it yet.
func HeldKeys(versions []*spindle.User, index []int64) []HeldKey {
	var held []HeldKey
	for i, u := range versions {
		if i > 0 && versions[i-1].PublicKey != u.PublicKey {
			for j := range held {
				if held[j].Key == versions[i-1].PublicKey {
					held[j].Until = max(held[j].Until, u.DirSeq)
					if i < len(index) {
						held[j].Replaced = max(held[j].Replaced, index[i])
					}
				}
			}
		}
		if !slices.ContainsFunc(held, func(h HeldKey) bool { return h.Key == u.PublicKey }) {
			held = append(held, HeldKey{Key: u.PublicKey, Until: 0})
		}
	}
	if n := len(versions); n > 0 {
		for j := range held {
			if held[j].Key == versions[n-1].PublicKey {
				held[j].Until = -1
			}
		}
	}
	return held
}

// KeyAtSlack is how far behind the newest size of the key cluster's log
// it knows of a dir host lets an entry's anchor be: a writer's client
// follows the log as it looks keys up, and may be that far behind.
const KeyAtSlack = 256

// Signs reports whether the held key may sign an entry written by the
// key's holder at sequence seq of tree and anchored at keyAt (see
// [HeldKeys]). A legacy entry (one of the first format, unanchored) is
// judged by the first rule only: any entry of another user's tree, and
// entries of the holder's own tree up to the cutoff.
func (h HeldKey) Signs(holder, tree spindle.UserName, seq, keyAt int64, legacy bool) bool {
	if h.Until < 0 {
		return true
	}
	if tree == holder && seq > h.Until {
		return false
	}
	return legacy || keyAt <= h.Replaced
}

// VerifySignature checks e's signature with the writer's key: the key the
// host recorded when it accepted the entry, if any, which must be the
// writer's current key or, after a key rotation, one that history confirms
// the writer held when the entry was appended (see [HeldKeys]). It returns
// invalid for a bad entry and fatal when the keys could not be learnt or
// an old key cannot be confirmed.
func VerifySignature(ctx context.Context, keys KeyFunc, history KeyHistoryFunc, e *Entry, recorded spindle.PublicKey) (invalid, fatal error) {
	if keys == nil {
		return nil, spindle.E(spindle.Internal, "dirlog: no key function")
	}
	key, err := keys(ctx, e.Writer)
	if err != nil {
		switch spindle.KindOf(err) {
		case spindle.NotExist, spindle.Invalid:
			return spindle.E(spindle.Permission, e.Entry.Name, e.Writer, fmt.Errorf("writer has no usable key: %w", err)), nil
		}
		return nil, spindle.E(e.Entry.Name, e.Writer, err)
	}
	if recorded != "" && recorded != key {
		if err := spindle.Verify(recorded, e.SignedDigest(), e.Sig); err != nil {
			return spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, "entry signature does not verify with the key recorded for it"), nil
		}
		if history == nil {
			return nil, spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, fmt.Sprintf("entry %d was signed with %s, which is not the writer's current key; without a key history it cannot be confirmed as the writer's (see Config.KeyHistory)", e.Seq, recorded))
		}
		held, err := history(ctx, e.Writer)
		if err != nil {
			return nil, spindle.E(e.Entry.Name, e.Writer, err)
		}
		for _, h := range held {
			if h.Key != recorded {
				continue
			}
			if !h.Signs(e.Writer, e.Tree(), e.Seq, e.KeyAt, e.Legacy) {
				return spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, fmt.Sprintf("entry %d, anchored at key log size %d, was signed with a key the writer replaced after entry %d of its tree, at key log index %d", e.Seq, e.KeyAt, h.Until, h.Replaced)), nil
			}
			return nil, nil
		}
		return spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, "entry was signed with a key the writer never held"), nil
	}
	if err := spindle.Verify(key, e.SignedDigest(), e.Sig); err != nil {
		return spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, "entry signature does not verify with the writer's key"), nil
	}
	return nil, nil
}

// GroupLoader returns the loader for checking an entry of own: own groups
// as they are now, other users' groups from their trees as of the sequence
// numbers dep returns (and records).
func GroupLoader(own *Tree, dep func(user spindle.UserName) (*Tree, int64, error)) access.GroupLoader {
	return func(name spindle.PathName) (*access.Group, error) {
		p, err := spindle.Parse(name)
		if err != nil {
			return nil, err
		}
		if p.User() == own.user {
			return own.groupAt(p.Path(), own.Seq)
		}
		t, seq, err := dep(p.User())
		if err != nil {
			return nil, err
		}
		if t == nil {
			return nil, spindle.E(spindle.NotExist, p.Path(), "no log for "+string(p.User())+" on this host")
		}
		return t.groupAt(p.Path(), seq)
	}
}

// A Pending entry is one read from a log and not yet replayed.
type Pending struct {
	Record *Record // The record read, if it decoded.
	Entry  *Entry  // Its entry, if it decoded.
	Err    error   // Why the record could not be decoded.
}

// DecodePending decodes a record read from a log. A record that does not
// decode gives a Pending with Err set, of kind Integrity.
func DecodePending(b []byte) Pending {
	rec, err := unmarshalRecord(b)
	if err != nil {
		return Pending{Err: spindle.E(spindle.Integrity, fmt.Errorf("malformed record: %w", err))}
	}
	e, err := UnmarshalEntry(rec.Entry)
	if err != nil {
		return Pending{Err: spindle.E(spindle.Integrity, err)}
	}
	return Pending{Record: rec, Entry: e}
}

// A LogScan splits a log's records, as a Scan gives them, into the
// checkpoint it starts with, if any, and the entries after it.
type LogScan struct {
	Chunker chunker   // Collects the checkpoint's records.
	NChunks int       // Records holding the checkpoint.
	Pending []Pending // The entries after the checkpoint.
}

// Add takes the next record of the log.
func (ls *LogScan) Add(b []byte) {
	isCk, err := ls.Chunker.add(b, len(ls.Pending) == 0)
	switch {
	case err != nil:
		ls.Pending = append(ls.Pending, Pending{Err: err})
	case isCk:
		ls.NChunks++
	default:
		ls.Pending = append(ls.Pending, DecodePending(b))
	}
}

// Start returns the tree the entries follow: the checkpoint's, verified
// with keys and history, or an empty one. invalid says why the log is
// not valid from its start.
func (ls *LogScan) Start(ctx context.Context, user spindle.UserName, keys KeyFunc, history KeyHistoryFunc) (t *Tree, cp *Checkpoint, invalid, fatal error) {
	cp, err := ls.Chunker.Checkpoint()
	if err != nil {
		return NewTree(user), nil, err, nil
	}
	if cp == nil {
		return NewTree(user), nil, nil, nil
	}
	if cp.User != user {
		return NewTree(user), nil, spindle.E(spindle.Integrity, user, "the log starts with a checkpoint of "+string(cp.User)+"'s log"), nil
	}
	t, invalid, fatal = cp.Tree(ctx, keys, history)
	if invalid != nil || fatal != nil {
		return NewTree(user), nil, spindle.E(spindle.Integrity, user, fmt.Errorf("checkpoint at sequence %d: %w", cp.Seq, invalid)), fatal
	}
	return t, cp, nil, nil
}

// A Replayer re-checks and folds whole logs, following the dependencies
// between them that the host recorded, so that every decision is taken
// again against exactly the state it was first taken against.
type Replayer struct {
	keys    KeyFunc
	history KeyHistoryFunc
	Recs    map[spindle.UserName][]Pending // Each log's entries; cut where a log is bad.
	Trees   map[spindle.UserName]*Tree     // Each log's fold, as far as replayed.
	next    map[spindle.UserName]int
	busy    map[spindle.UserName]bool
	Bad     map[spindle.UserName]error // Why a log was cut short.
	keyOK   map[spindle.UserName]spindle.PublicKey

	// WaitOnKeys is set by a host opening its own logs: an entry whose
	// writer's key cannot be learnt, for whatever reason, is not judged,
	// and its log waits (in waiting) from that entry on. The host
	// accepted the entry when the key was current, names are never
	// given up, and every record is framed with a checksum and carries
	// the key that signed it, so a failed lookup says the key state is
	// behind (a restarted key-cluster member, an unreachable cluster),
	// not that the entry is bad. Audit judges such entries invalid.
	WaitOnKeys bool
	Waiting    map[spindle.UserName]error // Logs that wait, and why (see WaitOnKeys).
	// RLock, if set, is held while the trees of logs served already
	// (which are consulted, never replayed) are read.
	RLock sync.Locker
}

// A waitError is a key lookup that could not be answered while a host
// replayed its logs (see Replayer.waitOnKeys).
type waitError struct{ err error }

func (w *waitError) Error() string { return w.err.Error() }
func (w *waitError) Unwrap() error { return w.err }

// WaitOf returns the waitError in err's chain, or nil.
func WaitOf(err error) *waitError {
	var w *waitError
	if errors.As(err, &w) {
		return w
	}
	return nil
}

// Lookup is r.keys, with a cache, and with the failures a host waits out
// made waitErrors.
func (r *Replayer) Lookup(ctx context.Context, user spindle.UserName) (spindle.PublicKey, error) {
	k, err := r.cachedKeys(ctx, user)
	if err != nil && r.WaitOnKeys {
		return "", spindle.E(spindle.Transient, &waitError{fmt.Errorf("the key of %s cannot be learnt yet: %w", user, err)})
	}
	return k, err
}

// LookupHistory returns r.history, with the failures a host waits out
// made waitErrors; nil if there is none.
func (r *Replayer) LookupHistory() KeyHistoryFunc {
	if r.history == nil {
		return nil
	}
	return r.waitHistory
}

func (r *Replayer) waitHistory(ctx context.Context, user spindle.UserName) ([]HeldKey, error) {
	h, err := r.history(ctx, user)
	if err != nil && r.WaitOnKeys {
		return nil, spindle.E(spindle.Transient, &waitError{fmt.Errorf("the keys %s held cannot be learnt yet: %w", user, err)})
	}
	return h, err
}

// locked runs fn with r.rlock held, if there is one.
func (r *Replayer) locked(fn func()) {
	if r.RLock != nil {
		r.RLock.Lock()
		defer r.RLock.Unlock()
	}
	fn()
}

// NewReplayer returns a replayer of the logs whose entries recs holds.
// The trees of other logs it consults are set in its Trees before Run.
func NewReplayer(keys KeyFunc, history KeyHistoryFunc, recs map[spindle.UserName][]Pending) *Replayer {
	r := &Replayer{
		keys:    keys,
		history: history,
		Recs:    recs,
		Trees:   make(map[spindle.UserName]*Tree),
		next:    make(map[spindle.UserName]int),
		busy:    make(map[spindle.UserName]bool),
		Bad:     make(map[spindle.UserName]error),
		Waiting: make(map[spindle.UserName]error),
	}
	for u := range recs {
		r.Trees[u] = NewTree(u)
	}
	return r
}

// Run replays every log to its end, in name order (the result does not
// depend on the order). It returns only errors that stop the replay.
func (r *Replayer) Run(ctx context.Context) error {
	users := make([]spindle.UserName, 0, len(r.Recs))
	for u := range r.Recs {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
	for _, u := range users {
		if err := r.advance(ctx, u, 1<<62); err != nil {
			return err
		}
	}
	return nil
}

// advance replays user's log up to sequence upto. An invalid entry cuts the
// log there; the reason is kept in r.bad.
func (r *Replayer) advance(ctx context.Context, user spindle.UserName, upto int64) error {
	t := r.Trees[user]
	if t == nil || r.Waiting[user] != nil {
		return nil
	}
	r.busy[user] = true
	defer delete(r.busy, user)
	for r.next[user] < len(r.Recs[user]) && t.Seq < upto {
		if err := ctx.Err(); err != nil {
			return err
		}
		i := r.next[user]
		p := r.Recs[user][i]
		invalid, fatal := r.validate(ctx, user, t, p)
		if r.WaitOnKeys && WaitOf(fatal) != nil {
			// Wait, unless the record's bytes are not what its
			// writer signed: that is damage whatever the keys.
			if p.Record.Key == "" || spindle.Verify(p.Record.Key, p.Entry.SignedDigest(), p.Entry.Sig) != nil {
				invalid, fatal = spindle.E(spindle.Integrity, p.Entry.Entry.Name, p.Entry.Writer, "entry signature does not verify with the key recorded for it"), nil
			} else {
				r.Waiting[user] = fmt.Errorf("entry %d: %w", t.Seq+1, fatal)
				break
			}
		}
		if fatal != nil {
			return fatal
		}
		if invalid != nil {
			r.Recs[user] = r.Recs[user][:i]
			r.Bad[user] = fmt.Errorf("entry %d: %w", t.Seq+1, invalid)
			break
		}
		if _, err := t.Apply(p.Entry); err != nil {
			return spindle.E(spindle.Internal, user, err) // Validated above: cannot happen.
		}
		r.next[user]++
	}
	return nil
}

func (r *Replayer) validate(ctx context.Context, user spindle.UserName, t *Tree, p Pending) (invalid, fatal error) {
	if p.Err != nil {
		return p.Err, nil
	}
	e := p.Entry
	if e.Tree() != user {
		return spindle.E(spindle.Integrity, e.Entry.Name, fmt.Sprintf("entry of %s's tree found in %s's log", e.Tree(), user)), nil
	}
	if e.Seq != t.Seq+1 || e.Prev != t.Head {
		return spindle.E(spindle.Integrity, e.Entry.Name, fmt.Sprintf("entry claims sequence %d after %.12s; the log is at %d, %.12s", e.Seq, e.Prev, t.Seq, t.Head)), nil
	}
	if invalid, fatal = VerifySignature(ctx, r.Lookup, r.LookupHistory(), e, p.Record.Key); invalid != nil || fatal != nil {
		return invalid, fatal
	}
	deps := make(map[spindle.UserName]int64)
	for _, d := range p.Record.Deps {
		if d.User == user || d.Seq < 0 {
			return spindle.E(spindle.Integrity, e.Entry.Name, fmt.Sprintf("bad dependency %s at %d", d.User, d.Seq)), nil
		}
		if r.busy[d.User] {
			return spindle.E(spindle.Integrity, e.Entry.Name, "dependency cycle through "+string(d.User)+"'s log"), nil
		}
		if err := r.advance(ctx, d.User, d.Seq); err != nil {
			return nil, err
		}
		var have int64
		r.locked(func() {
			if dt := r.Trees[d.User]; dt != nil {
				have = dt.Seq
			}
		})
		if w := r.Waiting[d.User]; w != nil && have < d.Seq {
			return nil, spindle.E(spindle.Transient, &waitError{fmt.Errorf("the decision used %s's log at sequence %d, which waits: %w", d.User, d.Seq, w)})
		}
		if have < d.Seq {
			return spindle.E(spindle.Integrity, e.Entry.Name, fmt.Sprintf("the decision used %s's log at sequence %d, but only %d valid entries of it remain", d.User, d.Seq, have)), nil
		}
		deps[d.User] = d.Seq
	}
	load := GroupLoader(t, func(u spindle.UserName) (*Tree, int64, error) {
		seq, ok := deps[u]
		if !ok {
			return nil, 0, spindle.E(spindle.Integrity, "the decision consulted "+string(u)+"'s log, which the host did not record")
		}
		return r.Trees[u], seq, nil
	})
	var err error
	if len(deps) > 0 {
		r.locked(func() { err = t.check(e, load) })
	} else {
		err = t.check(e, load)
	}
	if err != nil {
		return err, nil
	}
	return nil, nil
}

// cachedKeys is r.keys with a cache, since replay meets the same writers
// again and again.
func (r *Replayer) cachedKeys(ctx context.Context, user spindle.UserName) (spindle.PublicKey, error) {
	if k, ok := r.keyOK[user]; ok {
		return k, nil
	}
	k, err := r.keys(ctx, user)
	if err != nil {
		return "", err
	}
	if r.keyOK == nil {
		r.keyOK = make(map[spindle.UserName]spindle.PublicKey)
	}
	r.keyOK[user] = k
	return k, nil
}

// An AuditReport tells what [Audit] found in one log.
type AuditReport struct {
	User    spindle.UserName
	Entries int64 // Valid entries from the start of the log.
	// Checkpoint is the sequence number of the checkpoint a compacted
	// log starts with, whose entries were checked as [Checkpoint.Verify]
	// does (but for the host's signature, which needs the reader's
	// HeadVerifier); 0 if the log is whole.
	Checkpoint int64
	Head       Hash // Hash of the last valid entry.
	Root       Hash // Root of the tree map after it (see [MapRoot]).
	// Err says why the log is not valid to its end: a damaged frame, an
	// entry that does not decode, verify or follow from the log before it.
	// It is nil for a log that is valid throughout.
	Err error
}

// Audit re-checks whole logs (or compacted ones, from their checkpoint) from their bytes, as stored on disk or held by
// a [host.MemStore], exactly as a host does when it starts: framing, hash chain,
// signatures (with keys), and every writer's rights under the Access and
// Group files in force at each point. Entries signed with a key the writer
// has since replaced need history (which may be nil otherwise). Logs whose decisions consulted other
// users' Group files must be audited together with those users' logs. The
// reports are sorted by user. Audit returns an error only if it could not
// decide, such as when keys fails with a kind other than NotExist or Invalid.
func Audit(ctx context.Context, logs map[spindle.UserName][]byte, keys KeyFunc, history KeyHistoryFunc) ([]AuditReport, error) {
	const op spindle.Op = "dirlog.Audit"
	recs := make(map[spindle.UserName][]Pending)
	scans := make(map[spindle.UserName]*LogScan)
	tails := make(map[spindle.UserName]error)
	for u, data := range logs {
		if len(data) >= len(FileHeader) && string(data[:len(FileHeader)]) == FileHeader {
			data = data[len(FileHeader):]
		}
		var ls LogScan
		_, _, err := ScanFrames(bytes.NewReader(data), 0, func(b []byte) error {
			ls.Add(b)
			return nil
		})
		if err != nil {
			tails[u] = spindle.E(spindle.Integrity, u, err)
		}
		scans[u] = &ls
		recs[u] = ls.Pending
	}
	r := NewReplayer(keys, history, recs)
	cps := make(map[spindle.UserName]int64)
	for u, ls := range scans {
		t, cp, invalid, fatal := ls.Start(ctx, u, keys, history)
		if fatal != nil {
			return nil, spindle.E(op, fatal)
		}
		if invalid != nil {
			r.Bad[u], r.Recs[u] = invalid, nil
		}
		if cp != nil {
			cps[u] = cp.Seq
		}
		r.Trees[u] = t
	}
	if err := r.Run(ctx); err != nil {
		return nil, spindle.E(op, err)
	}
	var out []AuditReport
	for u := range logs {
		t := r.Trees[u]
		rep := AuditReport{User: u, Entries: t.Seq, Checkpoint: cps[u], Head: t.Head, Root: t.MapRoot(), Err: r.Bad[u]}
		if rep.Err == nil {
			rep.Err = tails[u]
		}
		if rep.Err != nil {
			rep.Err = spindle.E(op, spindle.Integrity, u, rep.Err)
		}
		out = append(out, rep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].User < out[j].User })
	return out, nil
}
