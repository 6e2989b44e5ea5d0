package host

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
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
	// KeyLogSize, if set, returns the newest size of the key cluster's
	// transparency log the host knows of: a new entry anchored further
	// behind it than dirlog.KeyAtSlack is refused (see [Server.Append]).
	KeyLogSize func() int64
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
	// (or its start). The compaction runs in the background, in a
	// goroutine the server owns until Close: the append that crosses the
	// threshold does not wait for it, though later appends to that log
	// wait while it replaces the log.
	CompactAfter int
	// Retain, if set, returns what of user's past is kept, in one call
	// (a node reads both from the user's key record, where a lookup may
	// cost a round trip): keep, how long every earlier state of the tree
	// is kept readable (spindle.User.Keep, or the node's own default),
	// compaction keeping the entries of that window and Refs the blocks
	// its files reach, 0 or less keeping only the current state, as a nil
	// Retain does; and pins, the sequences of user's named snapshots
	// (spindle.User.Pins), states kept like those inside the window for
	// as long as they are named.
	Retain func(ctx context.Context, user spindle.UserName) (keep time.Duration, pins []int64)
	// Now, if set, is the clock retention is measured by; tests set it.
	Now func() time.Time
	// MoreRefs, if set, returns the blocks an entry reaches besides those
	// of its block list, which [Server.Refs] reports too: a node names
	// the shards of a file whose blocks are erasure-coded, which only
	// its packdata records (package pack). It must not keep e.
	MoreRefs func(e *spindle.DirEntry) []spindle.Ref
}

// A Server holds the logs of many users on one dir host: it checks and
// sequences their entries and answers reads under the Access rules. It is
// safe for concurrent use. Appends to one log are serialised; appends to
// different logs proceed in parallel. Each log's tree has its own lock
// (see rwLock and view): a read or an append of one log waits for an
// append to another only while that append changes a tree it consults.
type Server struct {
	store Store
	cfg   Config

	mu       sync.RWMutex // Guards logs and each hosted's state; each log's own mu guards its tree.
	logs     map[spindle.UserName]*hosted
	resumeMu sync.Mutex // Held by Resume.
	damage   []error
	closed   bool
	done     chan struct{} // Closed by Close, to end watches.

	maxRecent int // Events kept in memory per log for watchers.

	// The compactor (see compact.go): a goroutine New starts if
	// Config.CompactAfter is positive, ended by Close.
	compactMu   sync.Mutex
	past        pastTrees                 // States of trees folded for reads of the past.
	compactDue  map[spindle.UserName]bool // Logs to compact, once each.
	compactWake chan struct{}             // Signalled when compactDue grows.
	compactWG   sync.WaitGroup            // One per log in compactDue, until it is compacted.
	stop        context.CancelFunc        // Ends the compactor.
	stopped     chan struct{}             // Closed when the compactor has ended.
}

// A hosted is one user's log on this host and all the server knows of
// it: the log and its fold while it is served, or why it is not.
type hosted struct {
	user     spindle.UserName
	appendMu sync.Mutex // Serialises appends and history scans; taken before Server.mu.
	log      Log        // Nil until the log's first entry is stored.
	t        *dirlog.Tree
	mu       rwLock             // Guards t, recent, nrecent, changed and head; all but head change with appendMu also held.
	recent   []seqEvents        // Events of the latest entries, oldest first.
	nrecent  int                // Total events in recent.
	changed  chan struct{}      // Closed and replaced on every append.
	head     *dirlog.Head       // Last signed head, if any.
	cp       *dirlog.Checkpoint // The checkpoint the log starts with, if any.
	cpRecs   int                // Records of the log holding it.
	replaced atomic.Int64       // Times the log was replaced (compacted, started anew); changed with appendMu held.
	// holdUntil is when compacting within the retention window would
	// next drop an entry; zero if unknown. Guarded by appendMu.
	holdUntil time.Time

	// Why the log is not served, if it is not (t is nil).
	damaged   *Damage // Not served until repaired or refilled.
	waiting   error   // Not served until the key state can decide it (see Resume).
	refilling *Damage // Being refilled from another dir host (see BeginRefill); t may be set.
}

// A position is where a log's tree is: the sequence number and hash of
// its last entry, and, where it is known, the root of its map.
type position struct {
	seq  int64
	head dirlog.Hash
	root dirlog.Hash
}

// pos returns where l's tree is, which must be served.
func (l *hosted) pos() position {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return position{seq: l.t.Seq, head: l.t.Head}
}

// logRootAt returns the root of the Merkle tree of l's log up to seq, or
// the zero hash if l's tree does not hold it (folded from a checkpoint
// that carries no log tree). l.mu is held.
func (l *hosted) logRootAt(seq int64) dirlog.Hash {
	if l.t == nil || l.t.Log == nil || seq > l.t.Log.Len() {
		return dirlog.Hash{}
	}
	r, err := l.t.Log.Root(seq)
	if err != nil {
		return dirlog.Hash{}
	}
	return r
}

// served returns u's log if the server serves its tree, else nil. s.mu
// is held.
func (s *Server) served(u spindle.UserName) *hosted {
	if h := s.logs[u]; h != nil && h.t != nil {
		return h
	}
	return nil
}

// state returns what the server knows of u's log, the zero hosted if
// nothing; it must not be changed. s.mu is held.
func (s *Server) state(u spindle.UserName) *hosted {
	if h := s.logs[u]; h != nil {
		return h
	}
	return &hosted{user: u}
}

// entry returns u's entry in s.logs, adding an empty one if there is
// none. s.mu is held for writing.
func (s *Server) entry(u spindle.UserName) *hosted {
	h := s.logs[u]
	if h == nil {
		h = &hosted{user: u}
		s.logs[u] = h
	}
	return h
}

// serve serves h, replacing what the server held of h.user's log; a
// refill in progress goes on. s.mu is held for writing.
func (s *Server) serve(h *hosted) {
	if old := s.logs[h.user]; old != nil {
		h.refilling = old.refilling
	}
	s.logs[h.user] = h
}

// unserve stops serving u's log, which is damaged (d) or waits (w). s.mu
// is held for writing.
func (s *Server) unserve(u spindle.UserName, d *Damage, w error) {
	s.serve(&hosted{user: u, damaged: d, waiting: w})
}

// prune forgets h if the server holds nothing of it. s.mu is held for
// writing.
func (s *Server) prune(h *hosted) {
	if s.logs[h.user] == h && h.t == nil && h.damaged == nil && h.waiting == nil && h.refilling == nil {
		delete(s.logs, h.user)
	}
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
// as [dirlog.Audit] does, and folds the logs into trees. A log that ends in a
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
	s := &Server{store: store, cfg: cfg, logs: make(map[spindle.UserName]*hosted), done: make(chan struct{}), maxRecent: maxRecentEvents}
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
	s.startCompactor()
	return s, nil
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
	logs := make([]*hosted, 0, len(s.logs))
	for _, l := range s.logs {
		logs = append(logs, l)
	}
	s.mu.Unlock()
	s.stopCompactor()
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
func (s *Server) lockLog(ctx context.Context, user spindle.UserName) (*hosted, error) {
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
		l := s.entry(user)
		if l.t == nil {
			l.t, l.changed = dirlog.NewTree(user), make(chan struct{})
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
func (s *Server) unlockLog(l *hosted) {
	if l.log == nil {
		s.mu.Lock()
		if s.logs[l.user] == l && l.t.Seq == 0 {
			// Readers may hold l: replace it rather than change it.
			delete(s.logs, l.user)
			if l.damaged != nil || l.waiting != nil || l.refilling != nil {
				s.logs[l.user] = &hosted{user: l.user, damaged: l.damaged, waiting: l.waiting, refilling: l.refilling}
			}
		}
		s.mu.Unlock()
	}
	l.appendMu.Unlock()
}

// Users returns, sorted, the users whose logs the server holds entries of.
func (s *Server) Users() []spindle.UserName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]spindle.UserName, 0, len(s.logs))
	for u, l := range s.logs {
		if l.t != nil && l.pos().seq > 0 {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// Hosted returns, sorted, every user whose log the server holds: with
// entries, without any (a log repaired or cut back to nothing), damaged,
// being refilled, or waiting for the key state. A node looks after each
// of them, as a mirror would, from its start.
func (s *Server) Hosted() []spindle.UserName {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := slices.Collect(maps.Keys(s.logs))
	slices.Sort(out)
	return out
}

// For returns a client of s acting for the signer's user.
func (s *Server) For(signer spindle.Signer) *dirlog.Client { return dirlog.NewClient(s, signer) }

var _ dirlog.Service = (*Server)(nil)
