package keyraft

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
)

// ErrNotLeader is the cause of the Transient error that Put returns on a
// member that is not the leader: errors.Is(err, ErrNotLeader) tells the
// caller to forward the request to [Cluster.Leader].
var ErrNotLeader = errors.New("this member is not the key cluster's leader")

// Defaults for the fields of Config.
const (
	DefaultApplyTimeout = 10 * time.Second
	DefaultOpenTimeout  = 30 * time.Second
)

// Config configures a member of a key cluster. Dir, ID, Listener and Dial
// are required; the zero value of every other field works.
type Config struct {
	// Dir is the member's home. The Raft log, stable store and snapshots
	// live in Dir/raft/ and the member's note signing key in
	// Dir/raft/notekey. An empty Dir keeps everything in memory, for tests:
	// nothing survives Close.
	Dir string

	// ID names the member: its Raft server ID and address, which for a
	// Spindle node is its libp2p peer ID. It may not contain spaces or '+'.
	ID string

	// Listener accepts the connections of other members; Dial connects to
	// the member with the given ID. Node passes a listener and a dialer of
	// libp2p streams. The cluster owns Listener and closes it on Close.
	Listener net.Listener
	Dial     func(ctx context.Context, id string) (net.Conn, error)

	// Bootstrap makes a fresh member (one whose Dir holds no Raft state)
	// the sole voter of a new cluster. It is ignored when Dir holds state.
	Bootstrap bool

	// Logger receives the member's log and Raft's; nil means slog.Default().
	Logger *slog.Logger

	// ApplyTimeout bounds how long Put waits for the cluster to commit a
	// change; zero means DefaultApplyTimeout.
	ApplyTimeout time.Duration

	// HeartbeatTimeout is how long a member waits without hearing from a
	// leader before it stands for election, and so also how long a
	// restarted one-member cluster takes to elect itself. Zero means
	// raft's default, 1s, suited to members that talk across the
	// internet; on one machine or in tests 100ms does.
	HeartbeatTimeout time.Duration

	// NoteKey, if set, is the note signer key (as made by note.GenerateKey
	// with the name "spindle-keyraft/"+ID) that signs tree heads; if empty
	// the key is read from Dir/raft/notekey, made there on first use.
	NoteKey string

	// Cosign asks the member with the given ID to sign the text of a tree
	// head (see [Cluster.SignHead]) and returns the signed note. Node
	// passes a call over libp2p. Tree heads need the signatures of a
	// majority of the recorded members; with Cosign nil they carry this
	// member's alone, which is enough only for a member that is the whole
	// cluster (and for tests).
	Cosign func(ctx context.Context, id string, text []byte) ([]byte, error)
	// Witness asks the witness with the given ID to cosign a head (see
	// witnesses.go and package keyraft/witness) and returns its
	// cosignature line, or a *witness.StaleError saying what it has.
	// Node passes a call over libp2p. Without it a member cannot gather
	// the cosignatures a configuration with witnesses needs.
	Witness func(ctx context.Context, id string, req *witness.Request) ([]byte, error)

	// For tests in this package: a transport to use instead of Listener
	// and Dial (raft's in-memory one), a hook to tune Raft's timing, and
	// one that sees each batch.
	transport raft.Transport
	tune      func(*raft.Config)
	// proposeHook, if set, is called by the batcher with the size of
	// each batch before proposing it.
	proposeHook func(n int)
}

// A Cluster is one member of a key cluster: a Raft replica of the user
// records and their transparency log. Any member serves lookups and proofs
// from its own replica (which may lag the leader); only the leader accepts
// Put. A Cluster is safe for concurrent use.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *fsm
	trans  raft.Transport
	snaps  raft.SnapshotStore // Nil for a cluster in memory.
	stores []io.Closer
	signer note.Signer
	vkey   string

	cosMu      sync.Mutex
	cosInfo    keylog.HeadInfo // What the newest cosigned head states.
	cosHead    []byte          // The newest cosigned head, or nil.
	cosNext    *cosignRound    // The round that starts next, if any caller waits for one.
	cosRunning bool            // A goroutine runs rounds.
	cosAt      time.Time       // When the last round made a head.

	witMu    sync.Mutex
	witViews map[string]witnessView // What each witness cosigned, as last learnt.
	witSeen  map[string]WitnessSeen // What each witness last answered, for Status.

	putq        chan *putReq   // Checked records waiting for the batcher.
	quit        chan struct{}  // Closed by Close: the batcher stops.
	batcherDone chan struct{}  // Closed when the batcher has stopped.
	proposals   sync.WaitGroup // Batches proposed and not yet answered.
	inflight    chan struct{}  // Holds a token for each batch proposed and not yet applied.

	// caughtUp is the Raft term in which this member, leading, has
	// applied every change committed before its election; catchUpMu
	// makes the requests that arrive first in a term wait for one
	// barrier together.
	catchUpMu sync.Mutex
	caughtUp  atomic.Uint64

	// openedAt is the index of the last entry of the Raft log this
	// member had on disk when it opened (see Restored).
	openedAt uint64

	closeOnce sync.Once
	closeErr  error
}

var _ spindle.KeyServer = (*Cluster)(nil)

// Open starts a member. When the cluster's configuration names this member
// alone (always so for a bootstrapped one-member cluster), Open waits,
// bounded by ctx and DefaultOpenTimeout, until the member leads and has
// applied its whole log, so that lookups see every committed record.
// Otherwise it returns at once and the member catches up in the background.
func Open(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	const op spindle.Op = "keyraft.Open"
	if cfg.ID == "" || strings.ContainsFunc(cfg.ID, func(r rune) bool { return r == '+' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad member ID %q", cfg.ID))
	}
	if cfg.transport == nil && (cfg.Listener == nil || cfg.Dial == nil) {
		return nil, spindle.E(op, spindle.Invalid, "config needs a Listener and a Dial function")
	}
	if cfg.HeartbeatTimeout < 0 || (cfg.HeartbeatTimeout > 0 && cfg.HeartbeatTimeout < 10*time.Millisecond) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("heartbeat timeout %v is below 10ms", cfg.HeartbeatTimeout))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = DefaultApplyTimeout
	}
	c := &Cluster{
		cfg: cfg, log: cfg.Logger.With("member", cfg.ID), fsm: newFSM(),
		putq: make(chan *putReq, putQueueLen), quit: make(chan struct{}), batcherDone: make(chan struct{}),
		inflight: make(chan struct{}, maxInFlight), witViews: map[string]witnessView{}, witSeen: map[string]WitnessSeen{},
	}
	hl := newHCLogger(c.log, "raft")
	defer func() {
		if err != nil {
			c.closeAll()
		}
	}()

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.Dir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(cfg.Dir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, spindle.E(op, spindle.IO, err)
		}
		l, st, closer, err := openStore(dir)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		c.stores = append(c.stores, closer)
		logs, stable = l, st
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hl.Named("snapshots"))
		if err != nil {
			return nil, spindle.E(op, spindle.IO, fmt.Errorf("open snapshot store: %w", err))
		}
		if err := checkSnapshots(dir, fss); err != nil {
			return nil, spindle.E(op, err)
		}
		snaps = fss
		c.snaps = fss
	}
	if err := c.loadNoteKey(); err != nil {
		return nil, spindle.E(op, err)
	}

	if cfg.transport != nil {
		c.trans = cfg.transport
	} else {
		c.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  &streamLayer{ln: cfg.Listener, id: cfg.ID, dial: cfg.Dial},
			MaxPool: 3,
			Timeout: 10 * time.Second,
			Logger:  hl.Named("transport"),
		})
	}

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hl
	if d := cfg.HeartbeatTimeout; d > 0 {
		rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = d, d, d/2
	}
	if cfg.tune != nil {
		cfg.tune(rc)
	}
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			return nil, spindle.E(op, spindle.IO, fmt.Errorf("read raft state: %w", err))
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: raft.ServerAddress(cfg.ID)}}}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, c.trans, conf); err != nil {
				return nil, spindle.E(op, spindle.IO, fmt.Errorf("bootstrap: %w", err))
			}
			c.log.Info("bootstrapped a new key cluster")
		}
	}
	r, err := newRaft(rc, c.fsm, logs, stable, snaps, c.trans)
	if errors.Is(err, errRaftPanicked) {
		return nil, spindle.E(op, damaged(filepath.Join(cfg.Dir, "raft", "raft.db"), err))
	}
	if err != nil {
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("start raft: %w", err))
	}
	c.raft = r
	c.openedAt = r.LastIndex()
	go c.batcher()

	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	if s := f.Configuration().Servers; len(s) == 1 && s[0].ID == rc.LocalID {
		ctx, cancel := context.WithTimeout(ctx, DefaultOpenTimeout)
		defer cancel()
		if _, err := c.WaitLeader(ctx); err != nil {
			return nil, spindle.E(op, err)
		}
		if err := c.wait(ctx, r.Barrier(cfg.ApplyTimeout)); err != nil {
			return nil, raftError(op, "", fmt.Errorf("apply the log: %w", err))
		}
	}
	return c, nil
}

// loadNoteKey sets up the note signer from the config or from Dir/raft/notekey.
func (c *Cluster) loadNoteKey() error {
	name := keylog.MemberKeyName(c.cfg.ID)
	skey := c.cfg.NoteKey
	if skey == "" {
		var path string
		if c.cfg.Dir != "" {
			path = filepath.Join(c.cfg.Dir, "raft", "notekey")
			b, err := os.ReadFile(path)
			if err == nil {
				skey = strings.TrimSpace(string(b))
			} else if !errors.Is(err, os.ErrNotExist) {
				return spindle.E(spindle.IO, fmt.Errorf("read note key: %w", err))
			}
		}
		if skey == "" {
			s, _, err := note.GenerateKey(rand.Reader, name)
			if err != nil {
				return spindle.E(spindle.Internal, err)
			}
			skey = s
			if path != "" {
				if err := spindle.ReplaceFile(path, []byte(skey+"\n"), 0o600, true); err != nil {
					return spindle.E(spindle.IO, fmt.Errorf("write note key: %w", err))
				}
			}
		}
	}
	where := "note key"
	if c.cfg.NoteKey == "" && c.cfg.Dir != "" {
		where = "note key " + filepath.Join(c.cfg.Dir, "raft", "notekey")
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		return damagedKey(where, err)
	}
	if s.Name() != name {
		return damagedKey(where, fmt.Errorf("it is named %q, want %q", s.Name(), name))
	}
	vkey, err := keylog.VerifierKeyOf(skey)
	if err != nil {
		return damagedKey(where, err)
	}
	c.signer, c.vkey = s, vkey
	return nil
}

// damagedKey is the error for a note key that cannot be used.
func damagedKey(where string, err error) error {
	return spindle.E(spindle.Invalid, fmt.Errorf("%s: %v; restore it from a backup of the node's home: tree heads signed with another key do not verify for clients that know this member", where, err))
}

// VerifierKey returns the note verifier key of this member's tree-head
// signing key, which clients give to [keylog.NewChecker] or [keylog.NewVerifiers].
func (c *Cluster) VerifierKey() string { return c.vkey }

// ID returns the member's ID.
func (c *Cluster) ID() string { return c.cfg.ID }

// Leader returns the ID of the member this member believes leads the
// cluster, or "" if it knows of none.
func (c *Cluster) Leader() string {
	_, id := c.raft.LeaderWithID()
	return string(id)
}

// IsLeader reports whether this member is the leader.
func (c *Cluster) IsLeader() bool { return c.raft.State() == raft.Leader }

// WaitLeader waits until the cluster has a leader and returns its ID. It
// fails with Transient when ctx ends first.
func (c *Cluster) WaitLeader(ctx context.Context) (string, error) {
	const op spindle.Op = "keyraft.WaitLeader"
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if id := c.Leader(); id != "" {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", spindle.E(op, spindle.Transient, fmt.Errorf("no leader elected: %w", ctx.Err()))
		case <-t.C:
		}
	}
}

// Restored waits until this member's replica holds every record it held
// before it last stopped: until it has applied its Raft log as far as it
// had it on disk. Raft applies no entry past the last snapshot until the
// member learns from a leader how far the log is committed, so a member
// restarted in a cluster of several answers lookups from an older state
// until then; whatever this member's node accepted before it stopped was
// judged against records that its own log held. An entry on disk that a
// new leader discards is never applied, so a caller bounds the wait.
func (c *Cluster) Restored(ctx context.Context) error {
	const op spindle.Op = "keyraft.Restored"
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for c.raft.AppliedIndex() < c.openedAt {
		select {
		case <-ctx.Done():
			return spindle.E(op, spindle.Transient, fmt.Errorf("the replica has applied the key log to index %d of the %d it held: %w", c.raft.AppliedIndex(), c.openedAt, ctx.Err()))
		case <-t.C:
		}
	}
	return nil
}

// Members returns the IDs of the cluster's voters, as this member knows them.
func (c *Cluster) Members(ctx context.Context) ([]string, error) {
	const op spindle.Op = "keyraft.Members"
	f := c.raft.GetConfiguration()
	if err := c.wait(ctx, f); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	var ids []string
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			ids = append(ids, string(s.ID))
		}
	}
	return ids, nil
}

// AddVoter adds the member with the given ID to the cluster as a voter. It
// must be called on the leader (else Transient wrapping ErrNotLeader).
// Adding a member that is already a voter is not an error.
func (c *Cluster) AddVoter(ctx context.Context, id string) error {
	const op spindle.Op = "keyraft.AddVoter"
	if id == "" {
		return spindle.E(op, spindle.Invalid, "empty member ID")
	}
	f := c.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(id), 0, c.cfg.ApplyTimeout)
	if err := c.wait(ctx, f); err != nil {
		return raftError(op, "", fmt.Errorf("add %s: %w", id, err))
	}
	return nil
}

// RemoveServer removes the member with the given ID from the cluster. It
// must be called on the leader.
func (c *Cluster) RemoveServer(ctx context.Context, id string) error {
	const op spindle.Op = "keyraft.RemoveServer"
	f := c.raft.RemoveServer(raft.ServerID(id), 0, c.cfg.ApplyTimeout)
	if err := c.wait(ctx, f); err != nil {
		return raftError(op, "", fmt.Errorf("remove %s: %w", id, err))
	}
	return nil
}

// Lookup implements [spindle.KeyServer]. It returns the current record of
// name from this member's replica. Error kinds: Invalid (bad name),
// NotExist.
func (c *Cluster) Lookup(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	const op spindle.Op = "keyraft.Lookup"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, name, err)
	}
	canon, err := spindle.CleanUser(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	e := c.fsm.st.current(canon)
	if e == nil {
		return nil, spindle.E(op, spindle.NotExist, canon)
	}
	return clone(e.rec), nil
}

// LookupLatest is Lookup for read-after-write: on the leader it first
// commits a Raft barrier, which proves that this member still leads and
// has applied every change committed before the call, so the answer
// reflects every Put that returned before LookupLatest was called. It
// costs a log write. On a member that is not the leader it fails with
// Transient wrapping [ErrNotLeader], as Put does; [Cluster.Lookup] on a
// follower instead answers at once from a replica that may lag the
// leader by the changes in flight (typically one heartbeat, and without
// bound while the member is cut off from the leader).
func (c *Cluster) LookupLatest(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	const op spindle.Op = "keyraft.LookupLatest"
	if c.raft.State() != raft.Leader {
		return nil, spindle.E(op, spindle.Transient, name, fmt.Errorf("%w (leader: %q)", ErrNotLeader, c.Leader()))
	}
	if err := c.wait(ctx, c.raft.Barrier(c.cfg.ApplyTimeout)); err != nil {
		return nil, raftError(op, name, err)
	}
	u, err := c.Lookup(ctx, name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return u, nil
}

// Version returns the version of name's current record, or 0 if name
// (which must be canonical) has none. It is Lookup without the copy, for
// a node that checks on every request that a session's record is unchanged.
func (c *Cluster) Version(name spindle.UserName) int64 {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	if e := c.fsm.st.current(name); e != nil {
		return e.rec.Version
	}
	return 0
}

// Domain returns, sorted, the registered users whose domain is domain. A
// writer's client uses it to wrap a file's key for the readers an Access
// file names with *@domain. It reveals nothing new: every record is in the
// public transparency log. Error kinds: Invalid (bad domain).
func (c *Cluster) Domain(ctx context.Context, domain string) ([]spindle.UserName, error) {
	const op spindle.Op = "keyraft.Domain"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	_, _, _, dom, err := spindle.ParseUser(spindle.UserName("x@" + domain))
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("bad domain %q", domain))
	}
	suffix := "@" + dom
	c.fsm.mu.RLock()
	var out []spindle.UserName
	for u := range c.fsm.st.users {
		if strings.HasSuffix(string(u), suffix) {
			out = append(out, u)
		}
	}
	c.fsm.mu.RUnlock()
	slices.Sort(out)
	return out, nil
}

// Put implements [spindle.KeyServer]. On the leader it checks the record
// against the policy (see the package documentation) and commits it
// through Raft, returning once it is applied on this member; every member
// checks the record again when applying it. Records put concurrently are
// proposed together, in one Raft log entry (see [MaxBatch]). Putting the
// current record again is not an error. A member that is not the leader
// checks only the record's form (see [keylog.CheckRecord]: a malformed record is
// Invalid), not against its replica, which may lag the leader's, and
// returns Transient wrapping [ErrNotLeader]; the caller forwards the
// request to [Cluster.Leader]. Error kinds: Invalid, Permission, Exist,
// NotExist (update of an unregistered user), Transient (not the leader, no
// leader, timeout, or ctx done: the change may or may not commit, and
// repeating the Put is safe).
func (c *Cluster) Put(ctx context.Context, u *spindle.User) error {
	return c.put(ctx, u, nil)
}

// PutGranted is Put for a new name under the domain policy ([keylog.PolicyDomain]):
// grant is the countersignature of the domain's admin key over
// [keylog.GrantDigest](u). Without a valid one such a registration fails with
// Permission. Under the open policy, and for updates, grant is ignored.
func (c *Cluster) PutGranted(ctx context.Context, u *spindle.User, grant spindle.Signature) error {
	return c.put(ctx, u, grant)
}

func (c *Cluster) put(ctx context.Context, u *spindle.User, grant spindle.Signature) error {
	const op spindle.Op = "keyraft.Put"
	if u == nil {
		return spindle.E(op, spindle.Invalid, "nil record")
	}
	if len(grant) > keylog.MaxSignatureLen {
		return spindle.E(op, spindle.Invalid, u.Name, fmt.Sprintf("countersignature of %d bytes, more than %d", len(grant), keylog.MaxSignatureLen))
	}
	rec := clone(u)
	if err := keylog.CheckRecord(rec); err != nil {
		return spindle.E(op, err)
	}
	if err := c.leading(ctx, rec.Name); err != nil {
		return spindle.E(op, err)
	}
	enc := keylog.EncodeRecord(rec)
	c.fsm.mu.RLock()
	dup, err := c.fsm.st.checkFormed(rec, enc, grant, true)
	c.fsm.mu.RUnlock()
	if err != nil {
		return spindle.E(op, err)
	}
	if dup {
		return nil
	}
	r := &putReq{name: rec.Name, enc: enc}
	if len(grant) != 0 {
		r.grant = bytes.Clone(grant)
	}
	if err := c.submit(ctx, r); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// leading returns nil when this member leads and its replica holds every
// change committed before it was elected, so that a request checked
// against the replica is judged on the newest state; otherwise Transient
// wrapping ErrNotLeader, for the caller to forward the request. A
// follower's replica lags the leader's (by the changes in flight, and
// without bound while it is cut off), so it judges nothing but the form
// of a request: a refusal by a lagging replica would turn away a request
// that the leader accepts. A new leader may also not have applied every
// entry committed in earlier terms yet; the first request of each term
// waits for a Raft barrier, which commits only once everything before it
// is applied here.
func (c *Cluster) leading(ctx context.Context, name spindle.UserName) error {
	if c.raft.State() != raft.Leader {
		return spindle.E(spindle.Transient, name, fmt.Errorf("%w (leader: %q)", ErrNotLeader, c.Leader()))
	}
	term := c.raft.CurrentTerm()
	if c.caughtUp.Load() == term {
		return nil
	}
	c.catchUpMu.Lock()
	defer c.catchUpMu.Unlock()
	if c.caughtUp.Load() == term {
		return nil
	}
	if err := c.wait(ctx, c.raft.Barrier(c.cfg.ApplyTimeout)); err != nil {
		return raftError("", name, err)
	}
	c.caughtUp.Store(term)
	return nil
}

// errOutcomeUnknown means that wait gave up before raft answered.
var errOutcomeUnknown = errors.New("outcome unknown")

// wait waits for a raft future, bounded by ctx and the apply timeout.
func (c *Cluster) wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	timer := time.NewTimer(c.cfg.ApplyTimeout + time.Second)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", errOutcomeUnknown, ctx.Err())
	case <-timer.C:
		return fmt.Errorf("%w: no answer from raft within %v", errOutcomeUnknown, c.cfg.ApplyTimeout)
	}
}

// raftError wraps an error from raft or from wait: a lost or missing
// leadership becomes Transient wrapping ErrNotLeader, other temporary
// failures Transient.
func raftError(op spindle.Op, name spindle.UserName, err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return spindle.E(op, spindle.Transient, name, fmt.Errorf("%w: %w", ErrNotLeader, err))
	case errors.Is(err, raft.ErrEnqueueTimeout), errors.Is(err, raft.ErrRaftShutdown),
		errors.Is(err, raft.ErrAbortedByRestore), errors.Is(err, errOutcomeUnknown):
		return spindle.E(op, spindle.Transient, name, err)
	}
	return spindle.E(op, name, err)
}

// Head returns a tree head of this member's current log, signed by a
// majority of the cluster's members (see [keylog.VerifyQuorum]). Error kinds:
// Transient (too few members signed in time).
func (c *Cluster) Head(ctx context.Context) ([]byte, error) {
	const op spindle.Op = "keyraft.Head"
	c.fsm.mu.RLock()
	n := c.fsm.st.size()
	c.fsm.mu.RUnlock()
	_, h, err := c.quorumHead(ctx, n)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return bytes.Clone(h), nil
}

// LookupProof returns name's current record with a proof of its inclusion
// in the transparency log, against this member's current signed tree head.
// Error kinds: Invalid, NotExist.
func (c *Cluster) LookupProof(ctx context.Context, name spindle.UserName) (*keylog.Proof, error) {
	const op spindle.Op = "keyraft.LookupProof"
	canon, err := spindle.CleanUser(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	ps, err := c.proofs(ctx, canon, true)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return ps[0], nil
}

// History returns every version of name's record, oldest first, each with
// its inclusion proof against one signed tree head, so that the owner can
// audit every change ever made to the record (see [keylog.VerifyHistory]). Error
// kinds: Invalid, NotExist.
func (c *Cluster) History(ctx context.Context, name spindle.UserName) ([]*keylog.Proof, error) {
	const op spindle.Op = "keyraft.History"
	canon, err := spindle.CleanUser(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	ps, err := c.proofs(ctx, canon, false)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return ps, nil
}

// proofs returns proofs for name's current version, or for all of them,
// against the newest cosigned head that holds them.
func (c *Cluster) proofs(ctx context.Context, name spindle.UserName, currentOnly bool) ([]*keylog.Proof, error) {
	c.fsm.mu.RLock()
	idx := c.fsm.st.users[name]
	c.fsm.mu.RUnlock()
	if len(idx) == 0 {
		return nil, spindle.E(spindle.NotExist, name)
	}
	if currentOnly {
		idx = idx[len(idx)-1:]
	}
	// The leaves of a user only grow, so the head covers idx even if
	// the user's record changes meanwhile; the proofs are of idx.
	hi, head, err := c.quorumHead(ctx, idx[len(idx)-1]+1)
	if err != nil {
		return nil, spindle.E(name, err)
	}
	c.fsm.mu.RLock()
	st := c.fsm.st
	var ps []*keylog.Proof
	for _, i := range idx {
		var rp tlog.RecordProof
		rp, err = tlog.ProveRecord(hi.N, i, st)
		if err != nil {
			break
		}
		ps = append(ps, &keylog.Proof{Record: bytes.Clone(st.entries[i].enc), Index: i, Inclusion: rp, Head: bytes.Clone(head)})
	}
	c.fsm.mu.RUnlock()
	if err != nil {
		return nil, spindle.E(spindle.Internal, name, fmt.Errorf("prove record: %w", err))
	}
	return ps, nil
}

// maxConfigProofs bounds the configuration changes in one answer of
// ConfigProofs; a client asks again for the rest.
const maxConfigProofs = 256

// ConfigProofs implements [keylog.ConfigProver] for a client following the
// cluster's members: the configuration changes after the first after
// ones, up to the configuration of the tree head (a head this member or
// another served), each proved against that tree. A head this member
// cannot prove (a tree it has not applied) is Transient; a malformed head
// or a negative after is Invalid.
func (c *Cluster) ConfigProofs(ctx context.Context, after int64, head []byte) ([]*keylog.Proof, error) {
	const op spindle.Op = "keyraft.ConfigProofs"
	hi, err := keylog.ParseHead(head)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if after < 0 {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("configuration changes after %d", after))
	}
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	st := c.fsm.st
	if hi.N > st.size() {
		return nil, spindle.E(op, spindle.Transient, fmt.Sprintf("this member has applied %d leaves, not the %d of the head", st.size(), hi.N))
	}
	end := min(st.seqAt(hi.N), after+maxConfigProofs)
	var ps []*keylog.Proof
	for seq := after + 1; seq <= end; seq++ {
		i := st.cfgIdx[seq-1]
		rp, err := tlog.ProveRecord(hi.N, i, st)
		if err != nil {
			return nil, spindle.E(op, spindle.Internal, fmt.Errorf("prove configuration change %d: %w", seq, err))
		}
		ps = append(ps, &keylog.Proof{Record: bytes.Clone(st.entries[i].enc), Index: i, Inclusion: rp, Head: bytes.Clone(head)})
	}
	return ps, nil
}

// ConsistencyProof implements [keylog.TreeProver]: it proves that this member's log
// of newSize records extends its log of oldSize records. It fails with
// Invalid unless 0 < oldSize <= newSize <= the log's size.
func (c *Cluster) ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	const op spindle.Op = "keyraft.ConsistencyProof"
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	if n := c.fsm.st.size(); oldSize < 1 || oldSize > newSize || newSize > n {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("no proof from %d to %d records in a log of %d", oldSize, newSize, n))
	}
	p, err := tlog.ProveTree(newSize, oldSize, c.fsm.st)
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	return p, nil
}

// PrefixHash returns the hash of the tree of the log's first n records,
// which a client keeps, with a consistency proof, as evidence when that
// tree is not the one a head it holds describes (see keylog.Fork).
func (c *Cluster) PrefixHash(ctx context.Context, n int64) (tlog.Hash, error) {
	const op spindle.Op = "keyraft.PrefixHash"
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	if size := c.fsm.st.size(); n < 1 || n > size {
		return tlog.Hash{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("no tree of %d records in a log of %d", n, size))
	}
	h, err := tlog.TreeHash(n, c.fsm.st)
	if err != nil {
		return tlog.Hash{}, spindle.E(op, spindle.Internal, err)
	}
	return h, nil
}

// Close shuts the member down: Raft stops, the transport and listener are
// closed, and the stores are closed, after which Close returns. Everything
// committed was made durable before Put returned. Close may be called more
// than once.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.closeAll() })
	return c.closeErr
}

func (c *Cluster) closeAll() error {
	var errs []error
	if c.raft != nil {
		close(c.quit)
		<-c.batcherDone
		if err := c.raft.Shutdown().Error(); err != nil {
			errs = append(errs, fmt.Errorf("shut down raft: %w", err))
		}
		c.proposals.Wait()
	}
	switch {
	case c.cfg.transport != nil:
		// The test that made the transport closes it.
	case c.trans != nil:
		if cl, ok := c.trans.(io.Closer); ok {
			if err := cl.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close transport: %w", err))
			}
		}
	case c.cfg.Listener != nil:
		c.cfg.Listener.Close()
	}
	for _, s := range c.stores {
		if err := s.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	if len(errs) > 0 {
		return spindle.E(spindle.Op("keyraft.Close"), spindle.IO, errors.Join(errs...))
	}
	return nil
}

// streamLayer is a raft.StreamLayer over a listener and a dial function.
// Its address is the member's ID.
type streamLayer struct {
	ln   net.Listener
	id   string
	dial func(ctx context.Context, id string) (net.Conn, error)
}

func (s *streamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }
func (s *streamLayer) Close() error              { return s.ln.Close() }
func (s *streamLayer) Addr() net.Addr            { return idAddr(s.id) }

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.dial(ctx, string(addr))
}

// idAddr is a net.Addr that is a member ID.
type idAddr string

func (a idAddr) Network() string { return "spindle-keyraft" }
func (a idAddr) String() string  { return string(a) }

var errRaftPanicked = errors.New("raft failed reading its stored state")

// newRaft is raft.NewRaft with its panics turned into errors: it panics
// when its log store fails to give it the last entry, which a damaged
// store can do even after the checks made before it starts.
func newRaft(rc *raft.Config, fsm raft.FSM, logs raft.LogStore, stable raft.StableStore, snaps raft.SnapshotStore, trans raft.Transport) (r *raft.Raft, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("%w: %v", errRaftPanicked, p)
		}
	}()
	return raft.NewRaft(rc, fsm, logs, stable, snaps, trans)
}

// clone returns a deep copy of u.
func clone(u *spindle.User) *spindle.User {
	c := *u
	c.DirHosts = append([]spindle.PeerAddr(nil), u.DirHosts...)
	c.Prev = bytes.Clone(u.Prev)
	c.Signature = bytes.Clone(u.Signature)
	return &c
}
