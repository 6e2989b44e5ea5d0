package host

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
		if only != nil && !slices.Contains(only, u) {
			continue
		}
		if m, ok := marks[u]; !ok || m.Seq < l.t.Seq {
			s.markLocked(ctx, mk, u, l) // Kept by a host without marks, or one that failed to write them.
		}
	}
	for u, m := range marks {
		if d := s.damaged[u]; d != nil {
			d.Stored = m.Seq
			continue // Reported already.
		}
		if s.waiting[u] != nil {
			continue // To be decided.
		}
		var reason error
		var seq int64
		l := s.logs[u]
		switch {
		case l == nil && slices.Contains(users, u):
			continue // An empty log: decided by the entries it lacks below.
		case l == nil:
			reason = fmt.Errorf("the log file is missing, though this host stored entries 1 to %d of it", m.Seq)
		case l.t.Seq < m.Seq:
			seq = l.t.Seq
			reason = fmt.Errorf("the log ends at entry %d, though this host stored entries up to %d", l.t.Seq, m.Seq)
		case l.t.Seq == m.Seq && l.t.Head != m.Hash:
			seq = l.t.Seq
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
		delete(s.logs, u)
		d := &Damage{User: u, Entry: seq + 1, File: file, Reason: reason, Stored: m.Seq, keep: -1}
		s.damaged[u] = d
		s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
		s.cfg.Logger.Error("dirlog: directory log lost entries this host stored; not served until refilled from another dir host or repaired", "user", string(u), "err", d)
	}
	return nil
}

// markLocked marks l as stored to its end.
func (s *Server) markLocked(ctx context.Context, mk Marker, u spindle.UserName, l *userLog) {
	if l.t.Seq > 0 {
		if err := mk.Mark(ctx, u, Mark{Seq: l.t.Seq, Hash: l.t.Head}); err != nil {
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
	users := slices.Collect(maps.Keys(s.waiting))
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
		if s.waiting[u] == nil {
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
	out := slices.Collect(maps.Values(s.damaged))
	slices.SortFunc(out, func(a, b *Damage) int { return strings.Compare(string(a.User), string(b.User)) })
	return out
}

// Waiting returns the users whose logs wait for the key state, and why
// (see [Server.Resume]).
func (s *Server) Waiting() map[spindle.UserName]error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.waiting)
}

// open reads users' logs, re-checks every entry as [Audit] does, and
// folds them into trees, which it then serves; the logs of other users
// already served are consulted, as they stood, for the groups that
// decisions used. A log whose entries need a key that cannot be learnt
// yet waits in s.waiting. It fails, changing nothing, only if it cannot
// read a log.
func (s *Server) open(ctx context.Context, op spindle.Op, users []spindle.UserName) error {
	cfg := s.cfg
	opened := make(map[spindle.UserName]Log)
	closeAll := func() {
		for _, l := range opened {
			l.Close()
		}
	}
	recs := make(map[spindle.UserName][]dirlog.Pending)
	scans := make(map[spindle.UserName]*dirlog.LogScan)
	tails := make(map[spindle.UserName]error)
	repair := make(map[spindle.UserName]bool)
	for _, u := range cfg.Repair {
		repair[u] = true
	}
	fix := make(map[spindle.UserName]bool)
	for _, u := range cfg.Fix {
		fix[u] = true
	}
	fixed := make(map[spindle.UserName]string)
	for _, u := range users {
		l, err := s.store.Open(ctx, u)
		if err != nil {
			closeAll()
			return spindle.E(op, err)
		}
		opened[u] = l
		if repair[u] || fix[u] {
			// Undo a flipped byte first, if the chain pins it.
			if fixed[u], err = fixLog(ctx, l); err != nil {
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
			tails[u] = err
		}
		scans[u] = ls
		recs[u] = ls.Pending
	}
	scanned := make(map[spindle.UserName]int)
	for u, ps := range recs {
		scanned[u] = scans[u].NChunks + len(ps)
	}
	r := dirlog.NewReplayer(cfg.Keys, cfg.KeyHistory, recs)
	r.WaitOnKeys, r.RLock = true, s.mu.RLocker()
	s.mu.RLock()
	for u, l := range s.logs {
		if _, ok := recs[u]; !ok {
			r.Trees[u] = l.t // Served: consulted, never replayed.
		}
	}
	s.mu.RUnlock()
	cps := make(map[spindle.UserName]*dirlog.Checkpoint)
	for u, ls := range scans {
		t, cp, invalid, fatal := ls.Start(ctx, u, r.Lookup, r.LookupHistory())
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
			scans[u].NChunks = 0 // Nothing is kept of a log whose checkpoint is bad.
		}
		r.Trees[u], cps[u] = t, cp
	}
	if err := r.Run(ctx); err != nil {
		closeAll()
		return spindle.E(op, err)
	}
	newLog := func(u spindle.UserName) *userLog {
		l := &userLog{user: u, log: opened[u], t: r.Trees[u], changed: make(chan struct{}), cp: cps[u]}
		l.cpRecs = scans[u].NChunks
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range users {
		if w := r.Waiting[u]; w != nil && r.Bad[u] == nil {
			if s.waiting[u] == nil {
				cfg.Logger.Warn("dirlog: directory log waits for the key cluster before it is served", "user", string(u), "file", opened[u].Name(), "err", w)
			}
			opened[u].Close()
			delete(opened, u)
			s.waiting[u] = w
			continue
		}
		delete(s.waiting, u)
		if fixed[u] != "" {
			dmg := spindle.E(op, spindle.Damaged, u, fmt.Errorf("directory log %s repaired: %s", opened[u].Name(), fixed[u]))
			s.damage = append(s.damage, dmg)
			cfg.Logger.Warn("dirlog: damaged directory log repaired", "user", string(u), "err", dmg)
		}
		keep := scans[u].NChunks + len(r.Recs[u]) // Records that verify.
		reason := r.Bad[u]
		if reason == nil {
			reason = tails[u]
		}
		if reason == nil {
			s.logs[u] = newLog(u)
			continue
		}
		d := &Damage{User: u, Entry: r.Trees[u].Seq + 1, Readable: scanned[u], File: opened[u].Name(), Reason: reason, keep: keep}
		var te *dirlog.TailError
		if r.Bad[u] == nil && errors.As(reason, &te) && te.Torn {
			// A crash during an append: the record was never
			// acknowledged. Cut it, keeping its bytes aside.
			kept, err := opened[u].Truncate(ctx, keep)
			if err != nil {
				closeAll()
				return spindle.E(op, err)
			}
			dmg := spindle.E(op, spindle.Integrity, u, fmt.Errorf("torn last record cut after entry %d, kept in %s: %w", r.Trees[u].Seq, kept, reason))
			s.damage = append(s.damage, dmg)
			cfg.Logger.Warn("dirlog: torn last record of a directory log cut", "user", string(u), "kept", r.Trees[u].Seq, "err", dmg)
			s.logs[u] = newLog(u)
			continue
		}
		if !repair[u] {
			opened[u].Close()
			delete(opened, u)
			s.damaged[u] = d
			s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
			cfg.Logger.Error("dirlog: directory log damaged; not served until refilled from another dir host or repaired", "user", string(u), "entry", d.Entry, "err", d)
			continue
		}
		kept, err := opened[u].Truncate(ctx, keep)
		if err != nil {
			closeAll()
			return spindle.E(op, err)
		}
		d.Repaired, d.Kept = true, kept
		s.damage = append(s.damage, spindle.E(op, spindle.Damaged, u, d))
		cfg.Logger.Warn("dirlog: damaged directory log repaired", "user", string(u), "kept", r.Trees[u].Seq, "aside", kept, "err", d)
		s.logs[u] = newLog(u)
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
	if s.refilling[owner] != nil {
		return spindle.E(spindle.Transient, owner, "its directory log is being refilled from another of its dir hosts after damage; try again shortly, or read from another of its dir hosts")
	}
	if w := s.waiting[owner]; w != nil {
		const what = "its directory log is not served yet: this host waits for the key cluster to tell the keys that signed it; try again shortly, or read from another of its dir hosts"
		if spindle.BaseUser(user) == spindle.BaseUser(owner) {
			return spindle.E(spindle.Transient, owner, fmt.Errorf("%s (%w)", what, w))
		}
		return spindle.E(spindle.Transient, owner, what)
	}
	d := s.damaged[owner]
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
	if s.refilling[owner] != nil && refillOf(ctx) == owner {
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

// Damage returns the damage found and cut when the server opened, one
// error of kind Integrity per damaged log.
func (s *Server) Damage() []error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]error(nil), s.damage...)
}
