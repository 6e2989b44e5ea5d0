package host

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/dirlog"
)

// Append checks a signed entry and, if it is valid, stores it durably and
// applies it to its tree, returning the entry as it now stands (for a
// delete, its last state). The server assigns nothing: the entry must be
// for the next sequence number and name the current head as Prev, or
// Append fails with kind Transient and the writer must read the head and
// sign again (see [dirlog.Client]); a writer with no right anywhere in the tree
// gets Private instead, so that the log's position is not told. Other
// errors: Integrity (the signature does not verify), Permission or Private
// (the writer lacks the right: Permission if the writer has some right on
// the name, as Upspin's errPerm), Invalid, NotExist, Exist, NotDir, IsDir,
// NotEmpty, and IO.
//
// A right that depends on a group that cannot be loaded is not granted.
// The error names the group and says what is wrong with it only to a user
// who may know: one with some right on the Group file (its owner has every
// right) and either some right on the name (so may read the Access file
// that names the group) or the group being the user's own. Anyone else
// gets the plain denial. No error carries a log position.
//
// Append also holds a new entry to what is true now, beyond what replay
// checks (see [Server.Mirror]): its anchor in the key log must be at most
// [dirlog.KeyAtSlack] behind the newest size Config.KeyLogSize knows (and
// no more ahead of it, or Append fails with Invalid), and
// the readers of an encrypted file must have been worked out after the
// log's checkpoint, if it has one; otherwise Append fails with Stale. An
// entry of the first format (dirlog.Entry.Legacy) is refused as Invalid.
func (s *Server) Append(ctx context.Context, e *dirlog.Entry) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Append"
	out, err := s.appendBatch(ctx, op, []*dirlog.Entry{e}, true)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// AppendBatch appends entries to one tree in order, each as [Server.Append]
// would: entry i+1 must follow entry i (its sequence number and Prev), the
// first the current head. It returns, in order, the entries as they now
// stand for the longest prefix of es that was appended; if that is not all
// of es, the error says why the next entry was refused (with Append's
// kinds), and the entries after it were not tried.
//
// Entries that cannot affect one another's checks (files, links and
// directories that are not Access or Group files, none inside another,
// not renames) are checked together and stored with one sync; readers
// see them only when they are durable.
func (s *Server) AppendBatch(ctx context.Context, es []*dirlog.Entry) ([]*spindle.DirEntry, error) {
	return s.appendBatch(ctx, "dirlog.AppendBatch", es, true)
}

// Mirror appends entries another dir host of the tree sequenced, as
// AppendBatch does but for the checks that hold an entry to the time it
// is appended at (its anchor against the key log now, its readers
// against a checkpoint): a mirror copies entries the sequencer took
// then, and checks what replay checks.
func (s *Server) Mirror(ctx context.Context, es []*dirlog.Entry) ([]*spindle.DirEntry, error) {
	return s.appendBatch(ctx, "dirlog.Mirror", es, false)
}

// batchItem is an entry of a batch, decoded from its canonical encoding.
type batchItem struct {
	e       *dirlog.Entry
	encoded []byte
	p       spindle.Parsed
}

func (s *Server) appendBatch(ctx context.Context, op spindle.Op, es []*dirlog.Entry, fresh bool) ([]*spindle.DirEntry, error) {
	if len(es) > dirlog.MaxBatch {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("%d entries in a batch, limit is %d", len(es), dirlog.MaxBatch))
	}
	// Each entry must be one a decoder accepts, or replay would refuse it.
	// From here on the decoded copy is used, so that what is checked,
	// stored and applied are the same whatever the caller does with es.
	items := make([]batchItem, 0, len(es))
	var stop error // Why es[len(items)] is refused, if it is.
	for _, e := range es {
		if e == nil {
			stop = spindle.E(op, spindle.Invalid, "nil entry")
			break
		}
		p, err := dirlog.CleanName(e.Entry.Name, "", "name")
		if err == nil {
			err = dirlog.CheckNewNames(e)
		}
		if err != nil {
			stop = spindle.E(op, e.Writer, err)
			break
		}
		if len(items) > 0 && p.User() != items[0].p.User() {
			stop = spindle.E(op, spindle.Invalid, p.Path(), e.Writer, "a batch holds entries of one tree only")
			break
		}
		encoded := e.Marshal()
		d, err := dirlog.UnmarshalEntry(encoded)
		if err != nil {
			stop = spindle.E(op, p.Path(), e.Writer, err)
			break
		}
		// Rules added since logs began bind what is appended now; replay
		// reads what a log holds as it was read. A signed name is the
		// host's to set, when a rename moves an entry: one set by a
		// writer would let a reader verify the entry against a name it
		// does not have.
		if d.Entry.SignedName != "" {
			stop = spindle.E(op, spindle.Invalid, p.Path(), e.Writer, "the entry sets a signed name ("+string(d.Entry.SignedName)+"); only a rename moves an entry from the name its writer signed")
			break
		}
		// An entry of the first format names neither the head its
		// readers were worked out at nor its anchor in the key log: a
		// sequencer takes none now, though a mirror copies those the
		// log holds (see Mirror).
		if fresh && d.Legacy {
			stop = spindle.E(op, spindle.Invalid, p.Path(), e.Writer, "the entry is of the first format, which names no readers' head and no key log size; a client this old must be upgraded")
			break
		}
		if fresh && s.cfg.KeyLogSize != nil {
			k := s.cfg.KeyLogSize()
			if d.KeyAt < k-dirlog.KeyAtSlack {
				stop = spindle.E(op, spindle.Stale, p.Path(), e.Writer, fmt.Sprintf("the entry is anchored at key log size %d, this host knows of %d; follow the key log and sign again", d.KeyAt, k))
				break
			}
			// Nor far ahead: anchors never decrease, so one far ahead of
			// the log would leave the tree's other writers unable to
			// anchor theirs. (0: the host never learnt the size.)
			if k > 0 && d.KeyAt > k+dirlog.KeyAtSlack {
				stop = spindle.E(op, spindle.Invalid, p.Path(), e.Writer, fmt.Sprintf("the entry is anchored at key log size %d, ahead of the %d this host knows of", d.KeyAt, k))
				break
			}
		}
		if d.Op == dirlog.OpPut && dirlog.Class(p.Path()) != dirlog.Ordinary {
			if err := access.Check(p.Path(), d.Entry.Inline); err != nil {
				stop = spindle.E(op, p.Path(), e.Writer, err)
				break
			}
		}
		items = append(items, batchItem{e: d, encoded: encoded, p: p})
	}
	if len(items) == 0 {
		return nil, stop
	}
	owner := items[0].p.User()
	l, err := s.lockLog(ctx, owner)
	if err != nil {
		return nil, spindle.E(op, items[0].p.Path(), items[0].e.Writer, err)
	}
	defer s.unlockLog(l)
	defer s.noteAppended(l)

	var out []*spindle.DirEntry
	for len(items) > 0 {
		n := independent(items)
		if fresh {
			for i, it := range items[:n] {
				if err := l.t.ReadersKnown(it.e); err != nil {
					n, stop = i, spindle.E(op, err)
					items = items[:i]
					break
				}
			}
			if n == 0 {
				break
			}
		}
		done, err := s.commit(ctx, op, l, items[:n])
		out = append(out, done...)
		if err != nil {
			return out, err
		}
		items = items[n:]
	}
	return out, stop
}

// independent returns the length of the longest prefix of items (at least
// one) whose entries can be checked against one state of the tree: each
// would be judged the same after the others were applied. That holds for
// puts, links, mkdirs and deletes of ordinary names none of which lies at
// or inside another: they leave the Access and Group files, and every
// other entry's name, parent and children, as they were.
func independent(items []batchItem) int {
	for n, it := range items {
		switch it.e.Op {
		case dirlog.OpPut, dirlog.OpLink, dirlog.OpMkdir, dirlog.OpDelete:
		default:
			return max(n, 1)
		}
		if it.p.IsRoot() || dirlog.Class(it.p.Path()) != dirlog.Ordinary {
			return max(n, 1)
		}
		for _, prev := range items[:n] {
			if it.p.HasPrefix(prev.p) || prev.p.HasPrefix(it.p) {
				return n
			}
		}
	}
	return len(items)
}

// commit checks items, which independent has passed, against l's tree,
// stores those before the first that fails with one sync, and then applies
// them. It returns what it applied and, if it applied fewer than all, why
// the next one was refused. l's appendMu is held.
func (s *Server) commit(ctx context.Context, op spindle.Op, l *hosted, items []batchItem) ([]*spindle.DirEntry, error) {
	// Refuse entries that are not for the next places in the log early,
	// before the cost of a signature check.
	seq, head := l.t.Seq, l.t.Head // l's tree changes only with appendMu held.
	var stop error
	for i, it := range items {
		if e := it.e; e.Seq != seq+1 || e.Prev != head {
			stop = s.moved(op, l, it, seq)
			items = items[:i]
			break
		}
		seq, head = it.e.Seq, it.e.Hash()
	}
	keys, errs := s.verifyAll(ctx, op, items)
	for i, err := range errs {
		if err != nil {
			stop = err
			items, keys = items[:i], keys[:i]
			break
		}
	}

	recs := make([][]byte, 0, len(items))
	v := s.view()
	for i, it := range items {
		deps := make(map[spindle.UserName]int64)
		err := l.t.CheckOp(it.e, v.groupsFor(it.e.Writer, dirlog.GroupLoader(l.t, func(u spindle.UserName) (*dirlog.Tree, int64, error) {
			other := v.served(u)
			if other == nil {
				if err := s.damageFor(u, ""); err != nil {
					return nil, 0, err
				}
				deps[u] = 0
				return nil, 0, nil
			}
			seq, ok := deps[u]
			if !ok {
				seq = other.t.Seq
				deps[u] = seq
			}
			return other.t, seq, nil
		})))
		if err != nil {
			stop = spindle.E(op, err)
			items = items[:i]
			break
		}
		rec := dirlog.Record{Entry: it.encoded, Key: keys[i]}
		for u, seq := range deps {
			rec.Deps = append(rec.Deps, dirlog.Dep{User: u, Seq: seq})
		}
		sort.Slice(rec.Deps, func(i, j int) bool { return rec.Deps[i].User < rec.Deps[j].User })
		recs = append(recs, rec.Marshal())
	}
	v.release()
	if len(items) == 0 {
		return nil, stop
	}
	first := items[0]
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, first.p.Path(), first.e.Writer, err)
	}
	if l.log == nil {
		lg, err := s.store.Open(ctx, l.user)
		if err != nil {
			return nil, spindle.E(op, first.p.Path(), first.e.Writer, err)
		}
		if err := lg.Scan(ctx, func([]byte) error { return errExistingLog }); err != nil {
			lg.Close()
			return nil, spindle.E(op, spindle.Internal, first.p.Path(), first.e.Writer, fmt.Errorf("new log of %s: %w", l.user, err))
		}
		l.log = lg
	}
	if err := l.log.Append(ctx, recs...); err != nil {
		return nil, spindle.E(op, first.p.Path(), first.e.Writer, err)
	}
	last := items[len(items)-1].e
	s.mark(ctx, l.user, Mark{Seq: last.Seq, Hash: last.Hash()})

	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*spindle.DirEntry, 0, len(items))
	for _, it := range items {
		e := it.e
		events, err := l.t.Apply(e)
		if err != nil {
			// Checked against this tree under appendMu: cannot happen.
			// The entry is stored; replay at the next start folds it.
			s.cfg.Logger.Error("dirlog: stored entry does not apply to its tree", "user", string(l.user), "err", err)
			return out, spindle.E(op, spindle.Internal, it.p.Path(), e.Writer, err)
		}
		l.push(e.Seq, events, s.maxRecent)
		switch e.Op {
		case dirlog.OpDelete:
			out = append(out, dirlog.CloneEntry(events[0].Event.Entry))
		case dirlog.OpRename:
			q, _ := spindle.Parse(e.NewName)
			n, _ := l.t.Find(q)
			out = append(out, dirlog.CloneEntry(&n.Entry))
		default:
			n, _ := l.t.Find(it.p)
			out = append(out, dirlog.CloneEntry(&n.Entry))
		}
	}
	return out, stop
}

// moved returns the error for an entry not signed for the place after the
// head, at seq: Transient, so that the writer reads the head and signs
// again. A writer who may not learn the log's position (see knowsLog) gets
// what a writer without rights gets, Private, so that trying sequence
// numbers cannot find it.
func (s *Server) moved(op spindle.Op, l *hosted, it batchItem, seq int64) error {
	e := it.e
	v := s.view()
	ok := v.knowsLog(e.Writer, l.user)
	v.release()
	if !ok {
		return spindle.E(op, spindle.Private, it.p.Path(), e.Writer)
	}
	return spindle.E(op, spindle.Transient, it.p.Path(), e.Writer, fmt.Sprintf("log head moved: entry is for sequence %d, head is at %d; read the head and sign again", e.Seq, seq))
}

// verifyAll verifies the signatures of items (see verify), on as many
// cores as there are: each file put costs two signature checks (the log
// entry's and the packing's), the larger part of a small file's cost to
// its host, and a batch holds many. It returns each item's key and error.
func (s *Server) verifyAll(ctx context.Context, op spindle.Op, items []batchItem) ([]spindle.PublicKey, []error) {
	keys := make([]spindle.PublicKey, len(items))
	errs := make([]error, len(items))
	workers := min(len(items), runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i, it := range items {
			if keys[i], errs[i] = s.verify(ctx, op, it); errs[i] != nil {
				// The rest are not appended; their errors are not reported.
				break
			}
		}
		return keys, errs
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(items); i = int(next.Add(1) - 1) {
				keys[i], errs[i] = s.verify(ctx, op, items[i])
			}
		}()
	}
	wg.Wait()
	return keys, errs
}

// verify checks the signature of a batch's entry and returns the key that
// verified it.
func (s *Server) verify(ctx context.Context, op spindle.Op, it batchItem) (spindle.PublicKey, error) {
	e := it.e
	key, err := s.cfg.Keys(ctx, e.Writer)
	if err != nil && spindle.KindOf(err) != spindle.NotExist && spindle.KindOf(err) != spindle.Invalid {
		return "", spindle.E(op, it.p.Path(), e.Writer, err)
	}
	invalid, fatal := dirlog.VerifySignature(ctx, func(context.Context, spindle.UserName) (spindle.PublicKey, error) { return key, err }, nil, e, "")
	if fatal != nil {
		return "", spindle.E(op, fatal)
	}
	if invalid != nil {
		return "", spindle.E(op, invalid)
	}
	if e.Op == dirlog.OpPut && dirlog.Class(e.Entry.Name) == dirlog.Ordinary && s.cfg.CheckPut != nil {
		if err := s.cfg.CheckPut(ctx, &e.Entry, key); err != nil {
			return "", spindle.E(op, spindle.Integrity, it.p.Path(), e.Writer, err)
		}
	}
	return key, nil
}

var errExistingLog = fmt.Errorf("a log for a user this server did not know already holds entries")
