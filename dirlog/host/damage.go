package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// checkMarks compares the logs opened with how far the host marked them
// stored (see [Marker]): a log that is missing, shorter, or holds another
// entry at the marked place lost what the host acknowledged, and is
// damaged, not served as an older state or a new tree. Repair accepts
// such a log as it is, saying what was lost, and marks it anew.
func (s *Server) checkMarks(ctx context.Context, op spindle.Op, users []spindle.UserName, only []spindle.UserName) error {
	mk, ok := s.store.(Marker)
	if !ok {
		return nil
	}
	marks, err := mk.Marks(ctx)
	if errors.Is(err, spindle.Integrity) {
		// Logs past what the marks read say are not checked this once.
		s.damage = append(s.damage, spindle.E(op, err))
		s.cfg.Logger.Warn("dirlog: the marks of how far each log was stored are damaged; the logs are checked against those before the damage", "err", err)
	} else if err != nil {
		return spindle.E(op, err)
	}
	repair := make(map[spindle.UserName]bool)
	for _, u := range s.cfg.Repair {
		repair[u] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if only != nil {
		// Resumed logs: check those alone.
		for u := range marks {
			if !slices.Contains(only, u) {
				delete(marks, u)
			}
		}
	}
	for u, l := range s.logs {
		if l.t == nil || only != nil && !slices.Contains(only, u) {
			continue
		}
		if m, ok := marks[u]; !ok || m.Seq < l.pos().seq {
			s.markLocked(ctx, mk, u, l) // Kept by a host without marks, or one that failed to write them.
		}
	}
	for u, m := range marks {
		if d := s.state(u).damaged; d != nil {
			d.Stored = m.Seq
			continue // Reported already.
		}
		if s.state(u).waiting != nil {
			continue // To be decided.
		}
		var reason error
		var seq int64
		l := s.served(u)
		var at position
		if l != nil {
			at = l.pos()
		}
		switch {
		case l == nil && slices.Contains(users, u):
			continue // An empty log: decided by the entries it lacks below.
		case l == nil:
			reason = fmt.Errorf("the log file is missing, though this host stored entries 1 to %d of it", m.Seq)
		case at.seq < m.Seq:
			seq = at.seq
			reason = fmt.Errorf("the log ends at entry %d, though this host stored entries up to %d", at.seq, m.Seq)
		case at.seq == m.Seq && at.head != m.Hash:
			seq = at.seq
			reason = fmt.Errorf("entry %d of the log is not the one this host stored", m.Seq)
		default:
			continue
		}
		if repair[u] {
			if err := mk.Unmark(ctx, u); err != nil {
				return spindle.E(op, err)
			}
			if l != nil {
				s.markLocked(ctx, mk, u, l)
			}
			dmg := spindle.E(op, spindle.Damaged, u, fmt.Errorf("%w; repaired by accepting the log as it is, at entry %d: clients that saw a later head will report a rollback until its owner writes again", reason, seq))
			s.damage = append(s.damage, dmg)
			s.cfg.Logger.Warn("dirlog: directory log that lost entries accepted as it is", "user", string(u), "err", dmg)
			continue
		}
		file := "of " + string(u) + " (missing)"
		if l != nil && l.log != nil {
			file = l.log.Name()
			l.log.Close()
		}
		d := &Damage{User: u, Entry: seq + 1, File: file, Reason: reason, Stored: m.Seq, keep: -1}
		s.unserve(u, d, nil)
		s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
		s.cfg.Logger.Error("dirlog: directory log lost entries this host stored; not served until refilled from another dir host or repaired", "user", string(u), "err", d)
	}
	return nil
}

// markLocked marks l as stored to its end.
func (s *Server) markLocked(ctx context.Context, mk Marker, u spindle.UserName, l *hosted) {
	if at := l.pos(); at.seq > 0 {
		if err := mk.Mark(ctx, u, Mark{Seq: at.seq, Hash: at.head}); err != nil {
			s.cfg.Logger.Error("dirlog: cannot record how far a directory log is stored", "user", string(u), "err", err)
		}
	}
}

// Resume replays again the logs that wait because the keys their entries
// were signed with could not be learnt when the server opened them (see
// [Server.Waiting]), and serves those that now verify. A log that still
// cannot be decided goes on waiting; one that turns out damaged is
// treated as New treats it. Resume returns the users whose logs it
// settled, served or damaged. A node calls it until nothing waits.
func (s *Server) Resume(ctx context.Context) ([]spindle.UserName, error) {
	const op spindle.Op = "dirlog.Resume"
	s.resumeMu.Lock()
	defer s.resumeMu.Unlock()
	s.mu.RLock()
	var users []spindle.UserName
	for u, l := range s.logs {
		if l.waiting != nil {
			users = append(users, u)
		}
	}
	closed := s.closed
	s.mu.RUnlock()
	if closed {
		return nil, spindle.E(op, spindle.Invalid, "server is closed")
	}
	if len(users) == 0 {
		return nil, nil
	}
	if err := s.open(ctx, op, users); err != nil {
		return nil, err
	}
	if err := s.checkMarks(ctx, op, users, users); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var settled []spindle.UserName
	for _, u := range users {
		if s.state(u).waiting == nil {
			settled = append(settled, u)
		}
	}
	return settled, nil
}

// Damaged returns the logs not served because they are damaged, sorted
// by user.
func (s *Server) Damaged() []*Damage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Damage
	for _, l := range s.logs {
		if l.damaged != nil {
			out = append(out, l.damaged)
		}
	}
	slices.SortFunc(out, func(a, b *Damage) int { return strings.Compare(string(a.User), string(b.User)) })
	return out
}

// Waiting returns the users whose logs wait for the key state, and why
// (see [Server.Resume]).
func (s *Server) Waiting() map[spindle.UserName]error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[spindle.UserName]error)
	for u, l := range s.logs {
		if l.waiting != nil {
			out[u] = l.waiting
		}
	}
	return out
}

// An opening is a log that open reads, and what reading it found.
type opening struct {
	log     Log                // Nil once closed.
	scan    *dirlog.LogScan    // Its records.
	tail    error              // Why the scan stopped short of the end, if it did.
	fixed   string             // What fixLog mended, if anything.
	scanned int                // Records read.
	cp      *dirlog.Checkpoint // The checkpoint the log starts with, if any.
}

// open reads users' logs, re-checks every entry as [dirlog.Audit] does, and
// folds them into trees, which it then serves; the logs of other users
// already served are consulted, as they stood, for the groups that
// decisions used. A log whose entries need a key that cannot be learnt
// yet waits (hosted.waiting). It fails, changing nothing, only if it cannot
// read a log.
func (s *Server) open(ctx context.Context, op spindle.Op, users []spindle.UserName) error {
	cfg := s.cfg
	logs := make(map[spindle.UserName]*opening)
	closeAll := func() {
		for _, o := range logs {
			if o.log != nil {
				o.log.Close()
			}
		}
	}
	recs := make(map[spindle.UserName][]dirlog.Pending) // The replayer's input.
	repair := make(map[spindle.UserName]bool)
	for _, u := range cfg.Repair {
		repair[u] = true
	}
	fix := make(map[spindle.UserName]bool)
	for _, u := range cfg.Fix {
		fix[u] = true
	}
	for _, u := range users {
		l, err := s.store.Open(ctx, u)
		if err != nil {
			closeAll()
			return spindle.E(op, err)
		}
		o := &opening{log: l}
		logs[u] = o
		if repair[u] || fix[u] {
			// Undo a flipped byte first, if the chain pins it.
			if o.fixed, err = fixLog(ctx, l); err != nil {
				closeAll()
				return spindle.E(op, err)
			}
		}
		ls := &dirlog.LogScan{}
		err = l.Scan(ctx, func(b []byte) error {
			ls.Add(b)
			return nil
		})
		if err != nil {
			if spindle.KindOf(err) != spindle.Integrity {
				closeAll()
				return spindle.E(op, err)
			}
			o.tail = err
		}
		o.scan, o.scanned = ls, ls.NChunks+len(ls.Pending)
		recs[u] = ls.Pending
	}
	r := dirlog.NewReplayer(cfg.Keys, cfg.KeyHistory, recs)
	var consulted logsLocker
	s.mu.RLock()
	for u, l := range s.logs {
		if _, ok := recs[u]; !ok && l.t != nil {
			r.Trees[u] = l.t // Served: consulted, never replayed.
			consulted = append(consulted, l)
		}
	}
	s.mu.RUnlock()
	r.WaitOnKeys, r.RLock = true, consulted
	for u, o := range logs {
		t, cp, invalid, fatal := o.scan.Start(ctx, u, r.Lookup, r.LookupHistory())
		if w := dirlog.WaitOf(fatal); w != nil {
			r.Waiting[u], r.Recs[u] = fatal, nil
			r.Trees[u] = dirlog.NewTree(u)
			continue
		}
		if fatal != nil {
			closeAll()
			return spindle.E(op, fatal)
		}
		if invalid != nil {
			r.Bad[u], r.Recs[u] = invalid, nil
			o.scan.NChunks = 0 // Nothing is kept of a log whose checkpoint is bad.
		}
		r.Trees[u], o.cp = t, cp
	}
	if err := r.Run(ctx); err != nil {
		closeAll()
		return spindle.E(op, err)
	}
	newLog := func(u spindle.UserName) *hosted {
		o := logs[u]
		return &hosted{user: u, log: o.log, t: r.Trees[u], changed: make(chan struct{}), cp: o.cp, cpRecs: o.scan.NChunks}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range users {
		o := logs[u]
		if w := r.Waiting[u]; w != nil && r.Bad[u] == nil {
			if s.state(u).waiting == nil {
				cfg.Logger.Warn("dirlog: directory log waits for the key cluster before it is served", "user", string(u), "file", o.log.Name(), "err", w)
			}
			o.log.Close()
			o.log = nil
			s.unserve(u, nil, w)
			continue
		}
		if o.fixed != "" {
			dmg := spindle.E(op, spindle.Damaged, u, fmt.Errorf("directory log %s repaired: %s", o.log.Name(), o.fixed))
			s.damage = append(s.damage, dmg)
			cfg.Logger.Warn("dirlog: damaged directory log repaired", "user", string(u), "err", dmg)
		}
		keep := o.scan.NChunks + len(r.Recs[u]) // Records that verify.
		reason := r.Bad[u]
		if reason == nil {
			reason = o.tail
		}
		if reason == nil {
			s.serve(newLog(u))
			continue
		}
		d := &Damage{User: u, Entry: r.Trees[u].Seq + 1, Readable: o.scanned, File: o.log.Name(), Reason: reason, keep: keep}
		var te *dirlog.TailError
		if r.Bad[u] == nil && errors.As(reason, &te) && te.Torn {
			// A crash during an append: the record was never
			// acknowledged. Cut it, keeping its bytes aside.
			kept, err := o.log.Truncate(ctx, keep)
			if err != nil {
				closeAll()
				return spindle.E(op, err)
			}
			dmg := spindle.E(op, spindle.Integrity, u, fmt.Errorf("torn last record cut after entry %d, kept in %s: %w", r.Trees[u].Seq, kept, reason))
			s.damage = append(s.damage, dmg)
			cfg.Logger.Warn("dirlog: torn last record of a directory log cut", "user", string(u), "kept", r.Trees[u].Seq, "err", dmg)
			s.serve(newLog(u))
			continue
		}
		if !repair[u] {
			o.log.Close()
			o.log = nil
			s.unserve(u, d, nil)
			s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
			cfg.Logger.Error("dirlog: directory log damaged; not served until refilled from another dir host or repaired", "user", string(u), "entry", d.Entry, "err", d)
			continue
		}
		kept, err := o.log.Truncate(ctx, keep)
		if err != nil {
			closeAll()
			return spindle.E(op, err)
		}
		d.Repaired, d.Kept = true, kept
		s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
		cfg.Logger.Warn("dirlog: damaged directory log repaired", "user", string(u), "kept", r.Trees[u].Seq, "aside", kept, "err", d)
		s.serve(newLog(u))
		if mk, ok := s.store.(Marker); ok {
			// The operator accepted the cut: check from here on.
			if err := mk.Unmark(ctx, u); err != nil {
				return spindle.E(op, err)
			}
			s.markLocked(ctx, mk, u, s.logs[u])
		}
	}
	return nil
}

// A Damage describes a log that did not verify to its end when the
// server opened, and what was done about it.
type Damage struct {
	User     spindle.UserName
	Entry    int64  // The first entry that does not verify; those before it do.
	Readable int    // Records that could be read from the log at all.
	File     string // Where the log is kept.
	Reason   error  // Why entry Entry does not verify.
	Repaired bool   // The log was cut to its Entry-1 entries that verify.
	Kept     string // Where a repair moved the bytes from entry Entry on.
	Stored   int64  // How far the host had stored the log (its mark), if it knows; else 0.
	keep     int    // Records of the log that verify, or -1 for all of them.
}

func (d *Damage) Error() string {
	if d.Repaired {
		aside := "nothing followed them"
		if d.Kept != "" {
			aside = "entry " + strconv.FormatInt(d.Entry, 10) + " on moved to " + d.Kept
		}
		return fmt.Sprintf("directory log %s repaired: kept entries 1 to %d, which verify; %s (%v)", d.File, d.Entry-1, aside, d.Reason)
	}
	return fmt.Sprintf("directory log %s is damaged at entry %d (%d records readable): %v; entries 1 to %d verify; the tree is not served until it is refilled from another of its dir hosts, or the operator runs: spin node -repair %s", d.File, d.Entry, d.Readable, d.Reason, d.Entry-1, d.User)
}

// damageFor returns the error for a read or an append of owner's tree by
// user if owner's log is damaged, or nil. Only the owner learns where and
// how. s.mu is held.
func (s *Server) damageFor(owner, user spindle.UserName) error {
	st := s.state(owner)
	if st.refilling != nil {
		return spindle.E(spindle.Transient, owner, "its directory log is being refilled from another of its dir hosts after damage")
	}
	if w := st.waiting; w != nil {
		const what = "its directory log is not served yet: this host waits for the key cluster to tell the keys that signed it"
		if spindle.BaseUser(user) == spindle.BaseUser(owner) {
			return spindle.E(spindle.Transient, owner, fmt.Errorf("%s (%w)", what, w))
		}
		return spindle.E(spindle.Transient, owner, what)
	}
	d := st.damaged
	if d == nil {
		return nil
	}
	if spindle.BaseUser(user) == spindle.BaseUser(owner) {
		return spindle.E(spindle.Damaged, owner, d)
	}
	// Heads, and so sequence numbers, are public: the entry may be told.
	return spindle.E(spindle.Damaged, owner, fmt.Sprintf("its directory log is damaged at entry %d and not served until the node's operator repairs it", d.Entry))
}

// gate is damageFor, but lets the refill of owner's log through (see
// [RefillContext]). s.mu is held.
func (s *Server) gate(ctx context.Context, owner, user spindle.UserName) error {
	if s.state(owner).refilling != nil && refillOf(ctx) == owner {
		return nil
	}
	return s.damageFor(owner, user)
}

// mark records, if the store keeps marks, that user's log is stored up
// to m. The log is durable already: a mark that cannot be written only
// weakens the check of the next start, so it is reported, not failed.
func (s *Server) mark(ctx context.Context, user spindle.UserName, m Mark) {
	if mk, ok := s.store.(Marker); ok {
		if err := mk.Mark(ctx, user, m); err != nil {
			s.cfg.Logger.Error("dirlog: cannot record how far a directory log is stored; a later loss of its end may go unnoticed", "user", string(user), "seq", m.Seq, "err", err)
		}
	}
}

// Damage returns the damage found when the server opened, one error of
// kind Integrity per damaged log: such a log is left as it is and not
// served until it is refilled from another dir host or repaired
// (Config.Repair). Only a torn last record is cut, and is no damage.
func (s *Server) Damage() []error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]error(nil), s.damage...)
}
