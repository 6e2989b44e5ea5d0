package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"spindle.dev/dirlog"

	"spindle.dev"
	"spindle.dev/access"
)

// Config configures a [Server].
type Config struct {
	// Keys returns writers' public keys; it is required. A node backs it
	// with the key cluster.
	Keys dirlog.KeyFunc
	// KeyHistory returns every key a user has held. It is needed only
	// to replay entries signed before a key rotation: without it, New
	// refuses to open a log holding such an entry rather than cut it.
	KeyHistory dirlog.KeyHistoryFunc
	// CheckPut, if set, checks the file a put entry makes beyond the log
	// entry's signature: a node checks the writer's signature in its
	// packdata (package pack), which readers verify against the name, so
	// that no file is stored that its readers would refuse. key is the
	// writer's key that verified the log entry. An error refuses the
	// entry as Integrity. It is not applied in replay.
	CheckPut func(ctx context.Context, d *spindle.DirEntry, key spindle.PublicKey) error
	// Host signs the heads the server hands out. If nil, heads are not
	// signed.
	Host dirlog.HeadSigner
	// Logger receives reports of damage found at start-up; nil means
	// slog.Default().
	Logger *slog.Logger
	// Repair names users whose logs New repairs if they are damaged: it
	// keeps the entries that verify and moves the bytes from the first
	// that does not to the end aside, beside the log (see [Damage]). The
	// logs of other damaged users are left as they are and not served.
	Repair []spindle.UserName
	// Fix names users whose logs New mends only where nothing is lost:
	// a flipped byte that the next entry's hash pins is restored (the
	// log as it was kept aside), and a log damaged otherwise stays
	// damaged, for its host to refill from another dir host (see
	// [Server.BeginRefill]).
	Fix []spindle.UserName
	// CompactAfter, if positive, compacts a log (see [Server.Compact])
	// once it holds more than CompactAfter entries after its checkpoint
	// (or its start).
	CompactAfter int
}

// A Server holds the logs of many users on one dir host: it checks and
// sequences their entries and answers reads under the Access rules. It is
// safe for concurrent use. Appends to one log are serialised; appends to
// different logs proceed in parallel.
type Server struct {
	store Store
	cfg   Config

	mu        sync.RWMutex // Guards logs, damaged, every userLog's tree, recent events and changed.
	logs      map[spindle.UserName]*userLog
	damaged   map[spindle.UserName]*Damage // Logs not served until repaired.
	waiting   map[spindle.UserName]error   // Logs not served until the key state can decide them (see Resume).
	refilling map[spindle.UserName]*Damage // Logs being refilled from another dir host (see BeginRefill).
	resumeMu  sync.Mutex                   // Held by Resume.
	damage    []error
	closed    bool
	done      chan struct{} // Closed by Close, to end watches.

	maxRecent int // Events kept in memory per log for watchers.
}

// A userLog is one user's log and its fold.
type userLog struct {
	user     spindle.UserName
	appendMu sync.Mutex // Serialises appends and history scans; taken before Server.mu.
	log      Log        // Nil until the log's first entry is stored.
	t        *dirlog.Tree
	recent   []seqEvents        // Events of the latest entries, oldest first.
	nrecent  int                // Total events in recent.
	changed  chan struct{}      // Closed and replaced on every append.
	head     *dirlog.Head       // Last signed head, if any.
	cp       *dirlog.Checkpoint // The checkpoint the log starts with, if any.
	cpRecs   int                // Records of the log holding it.
}

// seqEvents are the changes one entry made.
type seqEvents struct {
	seq    int64
	events []dirlog.Change
}

// maxRecentEvents bounds the events kept in memory for watchers; older
// ones are recomputed from the log.
const maxRecentEvents = 4096

func (l *userLog) push(seq int64, events []dirlog.Change, max int) {
	l.recent = append(l.recent, seqEvents{seq, events})
	l.nrecent += len(events)
	for len(l.recent) > 1 && l.nrecent > max {
		l.nrecent -= len(l.recent[0].events)
		l.recent[0] = seqEvents{}
		l.recent = l.recent[1:]
	}
	close(l.changed)
	l.changed = make(chan struct{})
}

// Open opens the server whose logs live in dir (see [DiskStore]).
func Open(ctx context.Context, dir string, cfg Config) (*Server, error) {
	st, err := DiskStore(dir)
	if err != nil {
		return nil, spindle.E(spindle.Op("dirlog.Open"), err)
	}
	return New(ctx, st, cfg)
}

// New opens a server on store. It reads every log, re-checks every entry
// as [Audit] does, and folds the logs into trees. A log that ends in a
// damaged record, or holds an entry that is not valid, is damaged: unless
// Config.Repair names its user, it is left exactly as it is and not served
// (every read and append of that tree fails with kind Damaged, so that a
// reader never sees an older state and nobody starts a new tree over it),
// until the operator repairs it. Every damaged or repaired log is logged
// and reported by [Server.Damage]. A log whose entries need a key that
// cannot be learnt yet is neither: it waits, unserved and unchanged,
// until [Server.Resume] can decide it. New fails, changing nothing, if it
// cannot read a log.
func New(ctx context.Context, store Store, cfg Config) (*Server, error) {
	const op spindle.Op = "dirlog.New"
	if cfg.Keys == nil {
		return nil, spindle.E(op, spindle.Invalid, "no key function in Config")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{store: store, cfg: cfg, logs: make(map[spindle.UserName]*userLog), damaged: make(map[spindle.UserName]*Damage), waiting: make(map[spindle.UserName]error), refilling: make(map[spindle.UserName]*Damage), done: make(chan struct{}), maxRecent: maxRecentEvents}
	users, err := store.Users(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if err := s.open(ctx, op, users); err != nil {
		return nil, err
	}
	if err := s.checkMarks(ctx, op, users, nil); err != nil {
		return nil, err
	}
	return s, nil
}

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

type refillKey struct{}

// RefillContext returns a context under which AppendBatch, StartFrom and
// Head act on owner's log while it is being refilled (see
// [Server.BeginRefill]), when they refuse everyone else.
func RefillContext(ctx context.Context, owner spindle.UserName) context.Context {
	return context.WithValue(ctx, refillKey{}, owner)
}

func refillOf(ctx context.Context) spindle.UserName {
	u, _ := ctx.Value(refillKey{}).(spindle.UserName)
	return u
}

// BeginRefill starts to refill user's damaged log from another dir host:
// it keeps the entries that verify (moving the rest aside, as a repair
// does) and serves them to nobody but the refill, which appends what
// the other host has under [RefillContext] until [Server.EndRefill]. It
// returns the head the refill continues from.
func (s *Server) BeginRefill(ctx context.Context, user spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.BeginRefill"
	s.resumeMu.Lock()
	defer s.resumeMu.Unlock()
	s.mu.Lock()
	d := s.damaged[user]
	if d == nil {
		s.mu.Unlock()
		return nil, spindle.E(op, spindle.Invalid, user, "the log is not damaged here")
	}
	delete(s.damaged, user)
	s.refilling[user] = d
	s.mu.Unlock()
	fail := func(err error) (*dirlog.Head, error) {
		s.mu.Lock()
		delete(s.refilling, user)
		if s.logs[user] == nil && s.damaged[user] == nil {
			s.damaged[user] = d
		}
		s.mu.Unlock()
		return nil, spindle.E(op, user, err)
	}
	if d.keep >= 0 {
		lg, err := s.store.Open(ctx, user)
		if err != nil {
			return fail(err)
		}
		lg.Scan(ctx, func([]byte) error { return nil }) // Truncate needs a Scan first; the damage is known.
		kept, err := lg.Truncate(ctx, d.keep)
		lg.Close()
		if err != nil {
			return fail(err)
		}
		if kept != "" {
			s.cfg.Logger.Warn("dirlog: damaged directory log cut to the entries that verify, to be refilled from another dir host", "user", string(user), "kept", d.Entry-1, "aside", kept)
		}
	}
	if mk, ok := s.store.(Marker); ok {
		if err := mk.Unmark(ctx, user); err != nil {
			return fail(err)
		}
	}
	if err := s.open(ctx, op, []spindle.UserName{user}); err != nil {
		return fail(err)
	}
	s.mu.Lock()
	l := s.logs[user]
	if l == nil {
		s.mu.Unlock()
		return fail(errors.New("what was kept of the log does not verify"))
	}
	if mk, ok := s.store.(Marker); ok {
		s.markLocked(ctx, mk, user, l)
	}
	s.mu.Unlock()
	return s.Head(RefillContext(ctx, user), user)
}

// EndRefill serves user's log again, as far as the refill brought it.
func (s *Server) EndRefill(user spindle.UserName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refilling, user)
}

// Refilling returns the users whose logs are being refilled, each with
// the damage that started it.
func (s *Server) Refilling() map[spindle.UserName]*Damage {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.refilling)
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

// Close closes every log. The server must not be used afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	logs := make([]*userLog, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	s.mu.Unlock()
	var first error
	for _, l := range logs {
		// Appends in progress finish first; later ones fail in lockLog.
		l.appendMu.Lock()
		if l.log != nil {
			if err := l.log.Close(); err != nil && first == nil {
				first = err
			}
			l.log = nil
		}
		l.appendMu.Unlock()
	}
	if c, ok := s.store.(interface{ closeMarks() }); ok {
		c.closeMarks()
	}
	return first
}

// lockLog returns user's log with its appendMu held, making an empty one if
// needed.
func (s *Server) lockLog(ctx context.Context, user spindle.UserName) (*userLog, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, spindle.E(spindle.Invalid, "server is closed")
		}
		if err := s.gate(ctx, user, user); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		l := s.logs[user]
		if l == nil {
			l = &userLog{user: user, t: dirlog.NewTree(user), changed: make(chan struct{})}
			s.logs[user] = l
		}
		s.mu.Unlock()
		l.appendMu.Lock()
		s.mu.RLock()
		cur, closed := s.logs[user], s.closed
		s.mu.RUnlock()
		if closed {
			l.appendMu.Unlock()
			return nil, spindle.E(spindle.Invalid, "server is closed")
		}
		if cur == l {
			return l, nil
		}
		l.appendMu.Unlock()
	}
}

// unlockLog releases l, forgetting it if it never received an entry.
func (s *Server) unlockLog(l *userLog) {
	if l.log == nil {
		s.mu.Lock()
		if s.logs[l.user] == l && l.t.Seq == 0 {
			delete(s.logs, l.user)
		}
		s.mu.Unlock()
	}
	l.appendMu.Unlock()
}

// Append checks a signed entry and, if it is valid, stores it durably and
// applies it to its tree, returning the entry as it now stands (for a
// delete, its last state). The server assigns nothing: the entry must be
// for the next sequence number and name the current head as Prev, or
// Append fails with kind Transient and the writer must read the head and
// sign again (see [Client]); a writer with no right anywhere in the tree
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
func (s *Server) Append(ctx context.Context, e *dirlog.Entry) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Append"
	out, err := s.appendBatch(ctx, op, []*dirlog.Entry{e})
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
	return s.appendBatch(ctx, "dirlog.AppendBatch", es)
}

// batchItem is an entry of a batch, decoded from its canonical encoding.
type batchItem struct {
	e       *dirlog.Entry
	encoded []byte
	p       spindle.Parsed
}

func (s *Server) appendBatch(ctx context.Context, op spindle.Op, es []*dirlog.Entry) ([]*spindle.DirEntry, error) {
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
			stop = spindle.E(op, spindle.Invalid, p.Path(), e.Writer, "the entry sets a signed name ("+string(d.Entry.SignedName)+"); only a rename moves an entry from the name its writer signed: sign it at its own name")
			break
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
	defer s.maybeCompact(ctx, l)

	var out []*spindle.DirEntry
	for len(items) > 0 {
		n := independent(items)
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
func (s *Server) commit(ctx context.Context, op spindle.Op, l *userLog, items []batchItem) ([]*spindle.DirEntry, error) {
	// Refuse entries that are not for the next places in the log early,
	// before the cost of a signature check.
	s.mu.RLock()
	seq, head := l.t.Seq, l.t.Head
	s.mu.RUnlock()
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
	s.mu.RLock()
	for i, it := range items {
		deps := make(map[spindle.UserName]int64)
		err := l.t.CheckOp(it.e, s.groupsFor(it.e.Writer, dirlog.GroupLoader(l.t, func(u spindle.UserName) (*dirlog.Tree, int64, error) {
			other := s.logs[u]
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
	s.mu.RUnlock()
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

	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*spindle.DirEntry, 0, len(items))
	for _, it := range items {
		e := it.e
		events := l.t.Apply(e)
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
func (s *Server) moved(op spindle.Op, l *userLog, it batchItem, seq int64) error {
	e := it.e
	s.mu.RLock()
	ok := s.knowsLog(e.Writer, l.user)
	s.mu.RUnlock()
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

// reader holds what a read needs, under Server.mu held for reading.
type reader struct {
	s    *Server
	t    *dirlog.Tree
	user spindle.UserName
	load access.GroupLoader
	can  dirlog.RightsFunc
}

// readerFor returns a reader of owner's tree for user. It must be called
// with s.mu held for reading.
func (s *Server) readerFor(owner, user spindle.UserName) *reader {
	t := dirlog.NewTree(owner)
	if l := s.logs[owner]; l != nil {
		t = l.t
	}
	load := s.groupsFor(user, s.currentGroups(t))
	return &reader{s: s, t: t, user: user, load: load, can: t.Rights(load)}
}

// currentGroups loads groups as they stand now, t's own and other users'.
// It must be called with s.mu held for reading.
func (s *Server) currentGroups(t *dirlog.Tree) access.GroupLoader {
	return dirlog.GroupLoader(t, func(u spindle.UserName) (*dirlog.Tree, int64, error) {
		if l := s.logs[u]; l != nil {
			return l.t, l.t.Seq, nil
		}
		return nil, 0, s.damageFor(u, "")
	})
}

// groupsFor wraps load so that a group that cannot be loaded tells user no
// more than user may know. As for any name, whether a group exists is told
// only to a user with some right on its Group file (its owner has every
// right); to anyone else the group is Private, and a rights decision that
// needed it is then reported as a plain denial (see undecided). It must be
// called, and its result used, with s.mu held for reading.
func (s *Server) groupsFor(user spindle.UserName, load access.GroupLoader) access.GroupLoader {
	return func(name spindle.PathName) (*access.Group, error) {
		g, err := load(name)
		if err == nil || s.mayKnow(user, name) {
			return g, err
		}
		return nil, spindle.E(spindle.Private, name, "group cannot be consulted")
	}
}

// mayKnow reports whether user has some right on name, judged by the
// Access and Group files as they stand now in its owner's tree. A right
// that cannot be decided is not held. s.mu must be held for reading.
func (s *Server) mayKnow(user spindle.UserName, name spindle.PathName) bool {
	p, err := spindle.Parse(name)
	if err != nil {
		return false
	}
	if p.User() == user {
		return true
	}
	l := s.logs[p.User()]
	if l == nil {
		return false
	}
	ok, err := access.Can(user, access.AnyRight, p.Path(), l.t.LoadAccess, s.currentGroups(l.t))
	return err == nil && ok
}

// knowsLog reports whether user may learn the position of owner's log: the
// owner, and every user some Access file in the tree grants a right, may.
// Anyone else gets no head and no sequence number of the log, in answers
// or in errors. s.mu must be held for reading.
func (s *Server) knowsLog(user, owner spindle.UserName) bool {
	if user == owner {
		return true
	}
	l := s.logs[owner]
	if l == nil {
		return false
	}
	load := s.currentGroups(l.t)
	for name, a := range l.t.Access {
		p, err := spindle.Parse(name)
		if err != nil {
			continue
		}
		if ok, err := a.Can(user, access.AnyRight, p.Dir().Path(), load); err == nil && ok {
			return true
		}
	}
	return false
}

// show returns what user may see of d with right need (AnyRight, or List
// for listings): the whole entry if the user may read it, the entry without
// blocks and packdata, marked AttrIncomplete, if the user holds need but
// not read, or nil.
func (r *reader) show(d *spindle.DirEntry, need access.Right) (*spindle.DirEntry, error) {
	return r.showWith(r.can, d, need)
}

// showWith is show with rights decided by can.
func (r *reader) showWith(can dirlog.RightsFunc, d *spindle.DirEntry, need access.Right) (*spindle.DirEntry, error) {
	read, err := can(r.user, access.Read, d.Name)
	if err != nil {
		return nil, r.undecided(can, d.Name, err)
	}
	if read {
		return dirlog.CloneEntry(d), nil
	}
	ok, err := can(r.user, need, d.Name)
	if err != nil {
		return nil, r.undecided(can, d.Name, err)
	}
	if !ok {
		return nil, nil
	}
	return incomplete(d), nil
}

// undecided is the package's undecided for a name in r's tree.
func (r *reader) undecided(can dirlog.RightsFunc, name spindle.PathName, err error) error {
	p, perr := spindle.Parse(name)
	if perr != nil {
		return spindle.E(spindle.Internal, name, perr)
	}
	return dirlog.Undecided(can, r.user, p, err)
}

// incomplete returns a copy of d for a user who may know of it but not
// read it: without blocks and packdata, marked AttrIncomplete. As in
// Upspin, Access and Group files are shown whole to anyone with a right:
// they hold the rules.
func incomplete(d *spindle.DirEntry) *spindle.DirEntry {
	c := dirlog.CloneEntry(d)
	if access.IsAccessFile(c.Name) || access.IsGroupFile(c.Name) {
		return c
	}
	c.Blocks, c.Packdata = nil, nil
	c.Attr |= spindle.AttrIncomplete
	return c
}

// lookup implements Lookup for a parsed name.
func (r *reader) lookup(p spindle.Parsed) (*spindle.DirEntry, error) {
	n, blocker := r.t.Find(p)
	if n == nil {
		if blocker != nil && blocker.Entry.Attr.IsLink() {
			// As Upspin's errLink: a user with a right on the link may
			// follow it; to anyone else the name is Private.
			if d, err := r.show(&blocker.Entry, access.AnyRight); err != nil {
				return nil, err
			} else if d != nil {
				return d, dirlog.BlockedBy(blocker, p, r.user)
			}
		}
		if err := dirlog.Need(r.can, r.user, access.AnyRight, p); err != nil {
			return nil, err
		}
		if blocker != nil {
			return nil, dirlog.BlockedBy(blocker, p, r.user)
		}
		return nil, spindle.E(spindle.NotExist, p.Path(), r.user)
	}
	d, err := r.show(&n.Entry, access.AnyRight)
	if err != nil {
		return nil, err
	}
	if d == nil {
		return nil, dirlog.Denied(r.can, r.user, p)
	}
	return d, nil
}

// list returns the items of directory dir for a listing, and whether the
// user may read them, as Upspin's listDir decides: a user who may not list
// dir gets Private, whether or not it exists; one who may list it but not
// read it gets incomplete entries. A path through a link is refused with
// NotDir only to a user with a right on the link (links are not followed).
func (r *reader) list(dir spindle.Parsed) (map[string]*dirlog.Node, bool, error) {
	n, blocker := r.t.Find(dir)
	if n != nil && n.Entry.Attr.IsLink() {
		blocker = n // Listing a link would list its target.
	}
	if blocker != nil && blocker.Entry.Attr.IsLink() {
		if d, err := r.show(&blocker.Entry, access.AnyRight); err != nil {
			return nil, false, err
		} else if d != nil {
			return nil, false, dirlog.BlockedBy(blocker, dir, r.user)
		}
	}
	ok, err := r.can(r.user, access.List, dir.Path())
	if err != nil {
		return nil, false, dirlog.Undecided(r.can, r.user, dir, err)
	}
	if !ok {
		return nil, false, spindle.E(spindle.Private, dir.Path(), r.user)
	}
	switch {
	case blocker != nil:
		return nil, false, dirlog.BlockedBy(blocker, dir, r.user)
	case n == nil:
		return nil, false, spindle.E(spindle.NotExist, dir.Path(), r.user)
	case !n.Entry.Attr.IsDir():
		return nil, false, spindle.E(spindle.NotDir, dir.Path(), r.user)
	}
	// As Upspin: a read right that cannot be decided is not held.
	read, err := r.can(r.user, access.Read, dir.Path())
	return n.Kids, read && err == nil, nil
}

// glob returns the entries below dir that match elems, a pattern's
// elements after dir's, as Upspin's serverutil.Glob finds them: the
// elements up to the first with a metacharacter are a path, and the
// directory they name is listed (see list); a match is emitted if it is
// the pattern's last element, or searched further if it is a directory.
// A directory below that the user may not list, or that the rest of the
// pattern does not reach, adds nothing. Elements without metacharacters
// after the last listing are looked up, not listed (see lookup), as in
// Upspin: a name one knows may be asked for with any right on it.
func (r *reader) glob(dir spindle.Parsed, elems []string) ([]*spindle.DirEntry, error) {
	meta := slices.IndexFunc(elems, hasMeta)
	if meta < 0 {
		p, err := under(dir, elems)
		if err != nil {
			return nil, err
		}
		d, err := r.lookup(p)
		if err != nil {
			return nil, err
		}
		return []*spindle.DirEntry{d}, nil
	}
	base, err := under(dir, elems[:meta])
	if err != nil {
		return nil, err
	}
	kids, read, err := r.list(base)
	if err != nil {
		return nil, err
	}
	var out []*spindle.DirEntry
	for name, k := range kids {
		if ok, _ := path.Match(elems[meta], name); !ok {
			continue
		}
		if meta == len(elems)-1 {
			if read {
				out = append(out, dirlog.CloneEntry(&k.Entry))
			} else {
				out = append(out, incomplete(&k.Entry))
			}
			continue
		}
		if !k.Entry.Attr.IsDir() {
			continue // Links are not followed; a file ends the match.
		}
		kp, err := spindle.Parse(k.Entry.Name)
		if err != nil {
			return nil, spindle.E(spindle.Internal, k.Entry.Name, err)
		}
		more, err := r.glob(kp, elems[meta+1:])
		switch spindle.KindOf(err) {
		case spindle.Other:
		case spindle.Private, spindle.Permission, spindle.NotExist, spindle.NotDir:
			continue // As in Upspin: what the user may not see adds nothing.
		default:
			return nil, err
		}
		out = append(out, more...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// hasMeta reports whether a pattern element holds a metacharacter of
// path.Match.
func hasMeta(el string) bool { return strings.ContainsAny(el, `*?[\`) }

// under returns the path of elems below dir. The elements come from a
// pattern that parsed, so only a pattern too long can fail.
func under(dir spindle.Parsed, elems []string) (spindle.Parsed, error) {
	if len(elems) == 0 {
		return dir, nil
	}
	s := string(dir.Path())
	if !dir.IsRoot() {
		s += "/"
	}
	return spindle.Parse(spindle.PathName(s + strings.Join(elems, "/")))
}

// Lookup returns the entry for name as user may see it. A user with some
// right on name but not read gets the entry marked AttrIncomplete, without
// blocks and packdata. A user with no right on name gets Private, whether
// or not it exists and whatever the user's rights on its parent, as in
// Upspin; NotExist only goes to users with some right on name. If name
// lies beneath a link, Lookup returns the link's entry together with an
// error of kind NotDir to a user with some right on the link, and the
// caller follows the link; anyone else gets Private. A right that depends
// on a group that cannot be loaded is reported as a denial (see
// [Server.Append] for what the error says about the group).
func (s *Server) Lookup(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Lookup"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	d, err := s.readerFor(p.User(), user).lookup(p)
	if err != nil {
		return d, spindle.E(op, p.Path(), user, err)
	}
	return d, nil
}

// Glob returns, sorted by name, the entries matching pattern as user may
// see them. Each element after the user name may use path.Match syntax;
// the user name may not. A pattern without metacharacters behaves as
// Lookup. As in Upspin, a pattern looks only inside directories the user
// may list: the directory before the first element with a metacharacter
// must be listable (otherwise Glob fails with Private, whether or not it
// exists), and directories further down that are not add nothing. Entries
// of a directory the user may list but not read are incomplete (see
// [Server.Lookup]). Links are not followed.
func (s *Server) Glob(ctx context.Context, user spindle.UserName, pattern string) ([]*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.Glob"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, spindle.PathName(pattern), err)
	}
	p, err := parsePattern(pattern)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	out, _, _, err := s.globAt(user, p, false)
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	return out, nil
}

// parsePattern parses a Glob pattern.
func parsePattern(pattern string) (spindle.Parsed, error) {
	p, err := spindle.Parse(spindle.PathName(pattern))
	if err != nil {
		return p, err
	}
	for _, el := range p.Elems() {
		if _, err := path.Match(el, ""); err != nil {
			return p, spindle.E(spindle.Invalid, p.Path(), fmt.Errorf("bad pattern element %q: %v", el, err))
		}
	}
	return p, nil
}

// globAt answers a Glob from one state of the tree, whose sequence number
// it returns, with a proof of each entry if prove is set (see
// [Server.GlobProved]).
func (s *Server) globAt(user spindle.UserName, p spindle.Parsed, prove bool) ([]*spindle.DirEntry, []*dirlog.Proved, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, nil, 0, err
	}
	r := s.readerFor(p.User(), user)
	out, err := r.glob(p.First(0), p.Elems())
	if err != nil || !prove || r.t.Map == nil {
		return out, nil, r.t.Seq, err
	}
	prs := make([]*dirlog.Proved, len(out))
	for i, d := range out {
		n := r.t.Lookup(d.Name)
		if n == nil {
			return nil, nil, 0, spindle.E(spindle.Internal, d.Name, "globbed entry not in the tree")
		}
		prs[i] = r.t.ProveItem(n, d.Attr&spindle.AttrIncomplete == 0)
	}
	return out, prs, r.t.Seq, nil
}

// WhichAccess returns the entry of the Access file that governs name, or
// nil if none does (the owner alone has every right). The user needs some
// right on name; otherwise the errors are Lookup's.
func (s *Server) WhichAccess(ctx context.Context, user spindle.UserName, name spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "dirlog.WhichAccess"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.damageFor(p.User(), user); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	r := s.readerFor(p.User(), user)
	if err := dirlog.Need(r.can, user, access.AnyRight, p); err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	a, err := access.WhichAccess(p.Path(), r.t.LoadAccess)
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	n := r.t.Lookup(a.Path())
	if n == nil || n.Access == nil {
		return nil, nil
	}
	return dirlog.CloneEntry(&n.Entry), nil
}

// HeadFor returns the head of owner's log, as Head does, to user, who must
// hold some right in owner's tree (the owner does, and every user an Access
// file there names): the head is the log's position, and a user without
// rights learns nothing of a tree. Anyone else gets Private, as for a tree
// that does not exist.
func (s *Server) HeadFor(ctx context.Context, user, owner spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.Head"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, err)
	}
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	s.mu.RLock()
	ok := s.knowsLog(user, owner)
	s.mu.RUnlock()
	if !ok {
		return nil, spindle.E(op, spindle.Private, spindle.PathName(owner+"/"), user)
	}
	return s.Head(ctx, owner)
}

// Head returns the head of owner's log, signed by the host if the server
// has a Host signer: its sequence number, the hash of its last entry, the
// root of its tree map (see [MapRoot]) and the time it was signed. A log
// with no entries has sequence 0, the zero hash and the empty map's root.
// It checks no rights: a node answering users calls [Server.HeadFor].
func (s *Server) Head(ctx context.Context, owner spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "dirlog.Head"
	if err := dirlog.CheckUser(owner); err != nil {
		return nil, spindle.E(op, err)
	}
	s.mu.RLock()
	if err := s.gate(ctx, owner, ""); err != nil {
		s.mu.RUnlock()
		return nil, spindle.E(op, err)
	}
	l := s.logs[owner]
	h := &dirlog.Head{User: owner}
	if l != nil {
		if l.head != nil && l.head.Seq == l.t.Seq {
			c := *l.head
			s.mu.RUnlock()
			return &c, nil
		}
		h.Seq, h.Hash, h.Root = l.t.Seq, l.t.Head, l.t.MapRoot()
	} else {
		h.Root = dirlog.NewTree("").MapRoot()
	}
	h.Time = spindle.Now()
	s.mu.RUnlock()
	if s.cfg.Host != nil {
		if err := h.Sign(s.cfg.Host); err != nil {
			return nil, spindle.E(op, owner, err)
		}
	}
	if l != nil {
		s.mu.Lock()
		if l.t.Seq == h.Seq {
			c := *h
			l.head = &c
		}
		s.mu.Unlock()
	}
	return h, nil
}

// Watch streams the changes to name and everything below it that user may
// see, as Lookup would show them, until ctx is cancelled, then closes the
// channel. With fromSeq 0 it first sends the current state (one event per
// item); with -1 only changes from now on; with a positive fromSeq every
// change from that sequence number on, then new ones. A delete event holds
// the item's last state with the sequence number of the delete; a rename
// is a delete of every moved item followed by its put at the new name.
// Whether the user may see a change is judged by the Access file that
// governed the item when the change was made (and the groups as they are
// when the event is sent). The channel is also closed when the server is. If the watch fails, the
// last event carries the error. The user needs some right on name.
//
// A watch shows no more than Lookup and Glob would: name itself as Lookup
// shows it, and an item below it only if the user may list the directory
// holding it and every directory between that and name, as a pattern
// name/*/.../* would find it (see [Server.Glob]). A user who may read but
// not list a directory learns, by watching it, of the directory alone.
func (s *Server) Watch(ctx context.Context, user spindle.UserName, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	const op spindle.Op = "dirlog.Watch"
	if err := dirlog.CheckUser(user); err != nil {
		return nil, spindle.E(op, name, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, user, err)
	}
	if fromSeq < -1 {
		return nil, spindle.E(op, spindle.Invalid, p.Path(), user, fmt.Sprintf("bad sequence %d", fromSeq))
	}
	s.mu.RLock()
	if err := s.damageFor(p.User(), user); err != nil {
		s.mu.RUnlock()
		return nil, spindle.E(op, p.Path(), user, err)
	}
	r := s.readerFor(p.User(), user)
	err = dirlog.Need(r.can, user, access.AnyRight, p)
	l := s.logs[p.User()]
	if err == nil && (l == nil || l.t.Seq == 0) {
		err = spindle.E(spindle.NotExist, p.Path(), user, "the tree does not exist")
	}
	var first []spindle.Event
	next := fromSeq
	if err == nil {
		switch fromSeq {
		case 0:
			if n, _ := r.t.Find(p); n != nil {
				first, err = r.current(n)
			}
			next = r.t.Seq + 1
		case -1:
			next = r.t.Seq + 1
		}
	}
	s.mu.RUnlock()
	if err != nil {
		return nil, spindle.E(op, p.Path(), user, err)
	}
	ch := make(chan spindle.Event, 64)
	go s.watch(ctx, l, user, p, next, first, ch)
	return ch, nil
}

// seen returns d, an item at or below the watched name p, as the watcher
// may see it, or nil. The watched item itself is shown as Lookup shows it.
// An item below it is shown only to a user who may list its directory and
// every directory between it and p, as a pattern p/*/.../* would find it
// (whole only to one who may also read the item): a watch reveals no name
// a listing would not. can decides rights on the item and dirCan on its
// directory, as they were at the change; the directories between are
// judged as they are now. A right that cannot be decided (a group cannot
// be loaded) is not held: the item is left out and the watch goes on,
// telling the watcher nothing of the group (Lookup reports it to whoever
// may know).
func (r *reader) seen(p spindle.Parsed, d *spindle.DirEntry, can, dirCan dirlog.RightsFunc) (*spindle.DirEntry, error) {
	if d.Name == p.Path() {
		return r.showWith(can, d, access.AnyRight)
	}
	q, err := spindle.Parse(d.Name)
	if err != nil {
		return nil, spindle.E(spindle.Internal, d.Name, err)
	}
	dir := q.Dir()
	if ok, err := dirCan(r.user, access.List, dir.Path()); err != nil || !ok {
		return nil, nil
	}
	for a := dir; a.NElem() > p.NElem(); {
		a = a.Dir()
		if ok, err := r.can(r.user, access.List, a.Path()); err != nil || !ok {
			return nil, nil
		}
	}
	return r.listed(can, d), nil
}

// listed returns d, which the user may list, as the user sees it: whole
// with read on it, incomplete otherwise. As in Upspin's listDir, a read
// right that cannot be decided is not held.
func (r *reader) listed(can dirlog.RightsFunc, d *spindle.DirEntry) *spindle.DirEntry {
	if read, err := can(r.user, access.Read, d.Name); err == nil && read {
		return dirlog.CloneEntry(d)
	}
	return incomplete(d)
}

// current returns the events that show the watched item n and everything
// below it as the watcher may see them now (see seen), parents before
// children, children in name order. A directory the user may not list
// hides everything below it.
func (r *reader) current(n *dirlog.Node) ([]spindle.Event, error) {
	d, err := r.show(&n.Entry, access.AnyRight)
	if err != nil {
		return nil, err
	}
	var out []spindle.Event
	if d != nil {
		out = append(out, spindle.Event{Entry: d})
	}
	var visit func(dir *dirlog.Node)
	visit = func(dir *dirlog.Node) {
		if len(dir.Kids) == 0 {
			return
		}
		if ok, err := r.can(r.user, access.List, dir.Entry.Name); err != nil || !ok {
			return
		}
		names := make([]string, 0, len(dir.Kids))
		for k := range dir.Kids {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			kid := dir.Kids[k]
			out = append(out, spindle.Event{Entry: r.listed(r.can, &kid.Entry)})
			visit(kid)
		}
	}
	visit(n)
	return out, nil
}

func (s *Server) watch(ctx context.Context, l *userLog, user spindle.UserName, p spindle.Parsed, next int64, batch []spindle.Event, ch chan<- spindle.Event) {
	const op spindle.Op = "dirlog.Watch"
	defer close(ch)
	for {
		for _, ev := range batch {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
		batch = nil
		s.mu.RLock()
		wait := l.changed
		head := l.t.Seq
		var raw []seqEvents
		history := false
		if next <= head {
			if len(l.recent) > 0 && l.recent[0].seq <= next {
				i := sort.Search(len(l.recent), func(i int) bool { return l.recent[i].seq >= next })
				raw = append(raw, l.recent[i:]...)
			} else {
				history = true
			}
		}
		s.mu.RUnlock()
		if history {
			var err error
			raw, err = s.history(ctx, l, next)
			if err != nil {
				if ctx.Err() == nil {
					select {
					case ch <- spindle.Event{Err: spindle.E(op, p.Path(), user, err)}:
					case <-ctx.Done():
					}
				}
				return
			}
		}
		if len(raw) > 0 {
			s.mu.RLock()
			r := s.readerFor(p.User(), user)
			var err error
			for _, se := range raw {
				for _, c := range se.events {
					q, _ := spindle.Parse(c.Event.Entry.Name)
					if !q.HasPrefix(p) {
						continue
					}
					// Judge by the Access files in force at the change, so
					// that a rename cannot reveal what was hidden.
					can := func(u spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
						return c.Access.Can(u, right, name, r.load)
					}
					dirCan := func(u spindle.UserName, right access.Right, name spindle.PathName) (bool, error) {
						return c.DirAccess.Can(u, right, name, r.load)
					}
					var d *spindle.DirEntry
					if d, err = r.seen(p, c.Event.Entry, can, dirCan); err != nil {
						break
					}
					if d != nil {
						batch = append(batch, spindle.Event{Entry: d, Delete: c.Event.Delete})
					}
				}
				next = se.seq + 1
			}
			s.mu.RUnlock()
			if err != nil {
				batch = append(batch, spindle.Event{Err: spindle.E(op, p.Path(), user, err)})
				for _, ev := range batch {
					select {
					case ch <- ev:
					case <-ctx.Done():
						return
					}
				}
				return
			}
			continue
		}
		select {
		case <-wait:
		case <-s.done:
			return
		case <-ctx.Done():
			return
		}
	}
}

// history recomputes the events of l's entries from sequence from on by
// folding the stored log again.
func (s *Server) history(ctx context.Context, l *userLog, from int64) ([]seqEvents, error) {
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	if l.log == nil {
		return nil, nil
	}
	t := dirlog.NewTree(l.user)
	skip := l.cpRecs
	if l.cp != nil {
		if from <= l.cp.Seq {
			return nil, spindle.E(spindle.NotExist, l.user, fmt.Sprintf("the changes of entries 1 to %d were compacted into a checkpoint; watch from %d or from the current state", l.cp.Seq, l.cp.Seq+1))
		}
		var err error
		if t, err = l.cp.Fold(); err != nil {
			return nil, spindle.E(spindle.Integrity, l.user, err)
		}
	}
	t.Map = nil // Events need no map.
	var out []seqEvents
	err := l.log.Scan(ctx, func(b []byte) (err error) {
		if skip > 0 {
			skip--
			return nil
		}
		p := dirlog.DecodePending(b)
		if p.Err != nil {
			return p.Err
		}
		if p.Entry.Seq != t.Seq+1 || p.Entry.Prev != t.Head {
			return spindle.E(spindle.Integrity, l.user, fmt.Sprintf("stored log changed while in use: entry %d does not follow entry %d", p.Entry.Seq, t.Seq))
		}
		defer func() {
			if r := recover(); r != nil {
				err = spindle.E(spindle.Internal, l.user, fmt.Sprintf("stored log changed while in use: entry %d does not apply: %v", p.Entry.Seq, r))
			}
		}()
		events := t.Apply(p.Entry)
		if p.Entry.Seq >= from {
			out = append(out, seqEvents{p.Entry.Seq, events})
		}
		return nil
	})
	return out, err
}
