package node

// Mirrors.
//
// A user's key record names the user's dir hosts in order. The first is
// the sequencer: it takes the writes (appendable refuses them on any
// other listed host, naming the sequencer). Every other listed host that
// admits the user (-writers) is a mirror: it pulls the log from the first
// listed host that answers (the sequencer, or failing that another dir
// host) with dir.mirror, which a node answers only to a peer the record
// names as a dir host, and appends each entry to its own copy through
// dirhost.Server.Mirror: the same checks the sequencer made, against
// the mirror's own fold of the log (the writer's signature, the place in
// the chain, the right under the Access and Group files in force at that
// point). An entry that fails is not taken; the mirror stops there and
// reports the error (MirrorStatus, and the node's log) naming the host
// that served it. An entry for the next place whose Prev is not the
// mirror's head, or a host whose log is shorter than the mirror's, is a
// fork or a rollback: Integrity, nothing taken.
//
// A mirror pulls at once when nudged (dir.nudge, after which it looks the
// record up afresh), and otherwise every mirrorInterval, give or take a
// fifth: the sequencer nudges the other dir hosts after each append, and
// the node that takes a key record nudges every dir host it names, so
// that a mirror added later starts copying the whole log at once. A node
// also pulls, from its start, each user's log it holds, with entries or
// without (a log repaired to nothing) or damaged: a restarted mirror, or
// a former sequencer that the owner moved down the list, catches up
// without waiting for a write. A pull that fails, or a record that
// cannot be looked up yet (a key cluster member whose replica has not
// caught up since its restart), is tried again after mirrorInterval,
// doubled after each failure up to mirrorMaxBackoff. Users a node
// sequences, or is no longer listed for, it looks at again every
// idleInterval, or when nudged.
//
// A mirror that missed every nudge and holds nothing of the log (it was
// down when it was listed, or lost its log) does not know the user. The
// sequencer notes which dir hosts ask for the log (dir.mirror), and
// nudges one that has not asked for mirrorSilent, less and less often
// (up to nudgeMaxBackoff) while it stays silent. MirrorStatus, and spin
// node status, tell each log's role, head, lag and last pull error.
//
// A mirror behind the checkpoint of a compacted log (see
// dirhost.Server.Compact) cannot have the entries before it: dir.mirror
// then answers with the checkpoint (Data) instead of entries. The mirror
// takes it only if it is of the user, past the mirror's head, signed by a
// dir host the key record names, and verifies (every entry's signature,
// the map root: dirlog.Checkpoint.Verify); dirhost.Server.StartFrom makes
// it the mirror's log, refusing it if the mirror's log is past it or forks
// from it, and the mirror pulls the entries after it.
//
// Mirrors sign the heads they serve, as the sequencer does: clients take
// heads signed by any listed dir host, and read from the listed hosts in
// order (see package client), so that reads go on while the sequencer is
// down.
//
// Taking over: when the owner lists a mirror first, it becomes the
// sequencer and takes writes from the log it holds. If it was not caught
// up, the entries it lacks are not in the new log: the old sequencer (and
// any mirror that had them) finds the new log behind its own, or forked
// from it, reports Integrity naming the host and both sequences, keeps its
// log as it is and takes nothing more of that user; a client that saw
// the later head refuses the new sequencer's older one (rollback). The
// owner should move a host first only once its head matches the
// sequencer's (MirrorStatus).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

const (
	// mirrorInterval is how often a mirror pulls without being nudged
	// (give or take a fifth, so that the mirrors of a log do not ask at
	// once).
	mirrorInterval = 2 * time.Second
	// mirrorMaxBackoff bounds the wait after failed pulls: mirrorInterval,
	// doubled after each failure in a row.
	mirrorMaxBackoff = 16 * time.Second
	// mirrorSilent is how long a sequencer waits for a dir host listed
	// after it to ask for the log before nudging it: a mirror asks every
	// mirrorInterval, so one silent this long missed the nudges (it was
	// down, or lost its log and with it the user) or is failing.
	mirrorSilent = 3 * mirrorInterval
	// nudgeMaxBackoff bounds the wait between nudges of a dir host that
	// stays silent (mirrorSilent, doubled after each).
	nudgeMaxBackoff = time.Minute
	// mirrorPage is the most entries one dir.mirror answer carries.
	mirrorPage = 1024
	// maxMirrored bounds the users a node tracks for mirroring.
	maxMirrored = 4096
	// mirrorForget is how long a user whose record does not name this
	// node stays tracked (a record just changed may reach this node's
	// replica of the key cluster a little later than the nudge).
	mirrorForget = time.Minute
	// nudgeTimeout bounds one nudge.
	nudgeTimeout = 10 * time.Second
	// idleInterval is how often the record of a user whose log this node
	// holds but does not mirror (it sequences it, or is not listed) is
	// looked at again without a nudge.
	idleInterval = 30 * time.Second
)

// mirrors is a node's mirroring of other users' logs.
type mirrors struct {
	n    *Node
	kick chan struct{}
	// pullMu is held by each pull, so that a pull to check a head for
	// cosigning (dirwitness.go) and the background one do not both
	// append the same entries.
	pullMu sync.Mutex

	mu      sync.Mutex
	users   map[spindle.UserName]*mirrorState
	nudging map[spindle.UserName]bool // Users whose dir hosts are being nudged; true if again after.
}

// A mirrorState is what a node knows of its mirror of one user's log.
type mirrorState struct {
	looked    bool            // The record was looked up: the role is known.
	hosts     []peer.AddrInfo // The dir hosts the record named when last looked up.
	sequencer bool            // This node is the first dir host.
	unlisted  time.Time       // Since when the record does not name this node, or zero.

	source    peer.ID   // The host the last pull came from.
	sourceSeq int64     // That host's head when it last answered.
	pulled    time.Time // When a pull last succeeded.
	err       error     // Why the last pull failed, or nil.
	fails     int       // Pulls failed in a row.
	next      time.Time // No pull before this, unless nudged.
	nudged    bool      // Look the record up afresh: it may just have changed.

	// At the sequencer: what each other dir host last asked for.
	peers map[peer.ID]*hostPos
}

// A hostPos is what a sequencer knows of another dir host of the log.
type hostPos struct {
	seq       int64     // The head it held when it last asked: one before the entry asked for.
	asked     time.Time // When it last asked; zero if not since it was listed or this node started.
	expected  time.Time // Since when it is expected to ask.
	nudges    int       // Nudges sent since it last asked.
	nextNudge time.Time // No nudge before this.
	nudging   bool      // A nudge is on its way.
}

// A MirrorStatus reports a node's mirror of one user's log.
type MirrorStatus struct {
	Role      string    // RoleSequencer, RoleMirror, RoleUnlisted or RoleUnknown.
	Sequencer bool      // This node is the user's first dir host.
	Source    peer.ID   // The dir host the log was last pulled from.
	Seq       int64     // The head held here; -1 if the log is damaged.
	SourceSeq int64     // The head of Source when it last answered.
	Lag       int64     // SourceSeq less Seq, for a mirror; never negative.
	Pulled    time.Time // When a pull last succeeded; zero if none has.
	Err       error     // Why the last pull failed, or nil; for a damaged log, the damage.
	// Hosts, at the sequencer, are the other dir hosts in the record's
	// order, with the head each held when it last asked for the log.
	Hosts []HostStatus
}

// A HostStatus is what a sequencer knows of another dir host of a log.
type HostStatus struct {
	Peer  peer.ID
	Seq   int64     // The head it held when it last asked.
	Asked time.Time // When it last asked; zero if not since this node started or listed it.
}

// The roles of a node for a log it holds.
const (
	RoleSequencer = "sequencer"  // The first dir host the owner's key record names.
	RoleMirror    = "mirror"     // Another dir host the record names.
	RoleUnlisted  = "not listed" // The record does not name this node.
	RoleUnknown   = "unknown"    // The record has not been looked up yet.
)

// startMirrors starts mirroring the users whose logs the node holds, and
// any it is nudged about.
func (n *Node) startMirrors() {
	m := &mirrors{n: n, kick: make(chan struct{}, 1), users: make(map[spindle.UserName]*mirrorState), nudging: make(map[spindle.UserName]bool)}
	// Every log held, empty or damaged too: a log repaired to nothing
	// is still this node's to fill.
	for _, u := range n.dir.Hosted() {
		m.users[u] = new(mirrorState)
	}
	n.mirrors = m
	n.bg.Go(func() { m.run(n.ctx) })
}

// MirrorStatus reports the node's mirror of owner's log; false if the node
// does not track it.
func (n *Node) MirrorStatus(ctx context.Context, owner spindle.UserName) (MirrorStatus, bool) {
	m := n.mirrors
	m.mu.Lock()
	st, ok := m.users[owner]
	out := MirrorStatus{Role: RoleUnknown}
	if ok {
		out = st.status()
	}
	m.mu.Unlock()
	if h, err := n.dir.Head(ctx, owner); err == nil {
		out.Seq = h.Seq
	} else {
		out.Seq = -1
		if spindle.KindOf(err) == spindle.Damaged {
			out.Err = err
		}
	}
	if out.Role == RoleMirror && out.SourceSeq > out.Seq && out.Seq >= 0 {
		out.Lag = out.SourceSeq - out.Seq
	}
	return out, ok
}

// status returns what st knows, but for the head held here. m.mu is held.
func (st *mirrorState) status() MirrorStatus {
	out := MirrorStatus{Role: RoleUnknown, Sequencer: st.sequencer, Source: st.source, SourceSeq: st.sourceSeq, Pulled: st.pulled, Err: st.err}
	switch {
	case !st.looked:
	case st.sequencer:
		out.Role = RoleSequencer
		for _, h := range st.hosts[1:] {
			hs := HostStatus{Peer: h.ID}
			if p := st.peers[h.ID]; p != nil {
				hs.Seq, hs.Asked = p.seq, p.asked
			}
			out.Hosts = append(out.Hosts, hs)
		}
	case !st.unlisted.IsZero():
		out.Role = RoleUnlisted
	default:
		out.Role = RoleMirror
	}
	return out
}

// MirrorStatuses reports the node's mirror of every log it holds or
// tracks, by user.
func (n *Node) MirrorStatuses(ctx context.Context) map[spindle.UserName]MirrorStatus {
	m := n.mirrors
	users := n.dir.Hosted()
	m.mu.Lock()
	for u := range m.users {
		users = append(users, u)
	}
	m.mu.Unlock()
	out := make(map[spindle.UserName]MirrorStatus, len(users))
	for _, u := range users {
		if _, ok := out[u]; !ok {
			out[u], _ = n.MirrorStatus(ctx, u)
		}
	}
	return out
}

// run pulls each tracked user's log when it is due, and has the
// sequencer's silent mirrors nudged, until ctx ends.
func (m *mirrors) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		m.mu.Lock()
		users := make([]spindle.UserName, 0, len(m.users))
		for u := range m.users {
			users = append(users, u)
		}
		m.mu.Unlock()
		for _, u := range users {
			if ctx.Err() != nil {
				return
			}
			m.mu.Lock()
			st := m.users[u]
			due := st != nil && !time.Now().Before(st.next)
			m.mu.Unlock()
			if due {
				m.sync(ctx, u)
			}
			m.nudgeSilent(u)
		}
		// Wake for the first pull due, and at least every mirrorInterval
		// to look for silent mirrors.
		wait := mirrorInterval
		now := time.Now()
		m.mu.Lock()
		for _, st := range m.users {
			wait = min(wait, st.next.Sub(now))
		}
		m.mu.Unlock()
		t.Reset(max(wait, 10*time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
			if !t.Stop() {
				<-t.C
			}
		}
	}
}

// jitter returns d give or take a fifth.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + rand.N(2*d/5+1)
}

// backoff returns the wait after fails failures in a row, starting at
// base and doubling up to most, with jitter.
func backoff(base, most time.Duration, fails int) time.Duration {
	d := base
	for i := 1; i < fails && d < most; i++ {
		d *= 2
	}
	return jitter(min(d, most))
}

// track adds owner to the users mirrored, if there is room, and pulls
// soon.
func (m *mirrors) track(owner spindle.UserName) {
	m.mu.Lock()
	if st, ok := m.users[owner]; ok {
		st.next, st.nudged = time.Time{}, true
	} else if len(m.users) < maxMirrored {
		m.users[owner] = &mirrorState{nudged: true}
	}
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// record returns a user's key record, as looked up at most versionTTL ago
// on a node without a key cluster.
func (n *Node) record(ctx context.Context, user spindle.UserName) (*spindle.User, error) {
	ks := n.kst()
	if ks.rkeys != nil {
		return ks.rkeys.recent(ctx, user)
	}
	return ks.ks.Lookup(ctx, user)
}

// dirHostPeers returns the peers of a record's dir hosts, in order, and
// the place of self among them (-1 if not listed). Addresses that do not
// parse are left out.
func dirHostPeers(u *spindle.User, self peer.ID) ([]peer.AddrInfo, int) {
	var out []peer.AddrInfo
	me := -1
	for _, a := range u.DirHosts {
		info, err := p2p.ParsePeerAddr(a)
		if err != nil {
			continue
		}
		if info.ID == self {
			me = len(out)
		}
		out = append(out, info)
	}
	return out, me
}

// sync looks owner's record up and pulls owner's log if this node mirrors
// it, and records the outcome.
func (m *mirrors) sync(ctx context.Context, owner spindle.UserName) {
	const op spindle.Op = "node.Mirror"
	n := m.n
	m.mu.Lock()
	fresh := false
	if st := m.users[owner]; st != nil {
		fresh, st.nudged = st.nudged, false
	}
	m.mu.Unlock()
	var u *spindle.User
	var err error
	if fresh {
		u, err = n.kst().ks.Lookup(ctx, owner)
	} else {
		u, err = n.record(ctx, owner)
	}
	var hosts []peer.AddrInfo
	me := -1
	var source peer.ID
	var sourceSeq int64
	if err != nil {
		// Not a sign that this node is not listed: the key state may not
		// be ready yet (a member just restarted). Try again soon.
		err = spindle.E(op, owner, fmt.Errorf("cannot look up the key record: %w", err))
	} else {
		hosts, me = dirHostPeers(u, n.host.ID())
		if me > 0 {
			source, sourceSeq, err = m.pullAny(ctx, owner, hosts, me)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.users[owner]
	if st == nil {
		return
	}
	now := time.Now()
	if u != nil {
		st.setHosts(hosts, me, now)
	}
	if source != "" {
		st.source = source
		if sourceSeq >= 0 {
			st.sourceSeq = sourceSeq
		}
	}
	if err != nil {
		if st.err == nil || st.err.Error() != err.Error() {
			n.log.Warn("mirror not updated", "user", owner, "from", source, "err", err)
		}
		st.err = err
		st.fails++
		st.next = now.Add(backoff(mirrorInterval, mirrorMaxBackoff, st.fails))
		return
	}
	st.err, st.fails = nil, 0
	switch {
	case me < 0:
		st.next = now.Add(idleInterval)
		if st.unlisted.IsZero() {
			st.unlisted = now
		} else if now.Sub(st.unlisted) > mirrorForget {
			delete(m.users, owner)
		}
	case me == 0:
		st.next = now.Add(idleInterval)
	default:
		st.pulled = now
		st.next = now.Add(jitter(mirrorInterval))
	}
}

// setHosts records the dir hosts a record names, and this node's place
// among them (-1 if not listed). m.mu is held.
func (st *mirrorState) setHosts(hosts []peer.AddrInfo, me int, now time.Time) {
	st.looked, st.hosts, st.sequencer = true, hosts, me == 0
	if me >= 0 {
		st.unlisted = time.Time{}
	}
	if me != 0 {
		st.peers = nil
		return
	}
	// As the sequencer, expect each other host to ask from now on.
	peers := make(map[peer.ID]*hostPos, len(hosts)-1)
	for _, h := range hosts[1:] {
		p := st.peers[h.ID]
		if p == nil {
			p = &hostPos{expected: now}
		}
		peers[h.ID] = p
	}
	st.peers = peers
}

// served notes that the dir host remote asked this node for owner's log
// from the entry seq on.
func (m *mirrors) served(owner spindle.UserName, remote peer.ID, seq int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.users[owner]
	if st == nil {
		return
	}
	if p := st.peers[remote]; p != nil {
		p.seq, p.asked, p.nudges, p.nextNudge = max(seq-1, 0), time.Now(), 0, time.Time{}
	}
}

// nudgeSilent nudges, if this node sequences owner's log, each other dir
// host that has not asked for it for mirrorSilent: it may have missed
// every nudge while down, or lost its copy of the log and with it the
// user. A host that stays silent is nudged less and less often.
func (m *mirrors) nudgeSilent(owner spindle.UserName) {
	n := m.n
	now := time.Now()
	var silent []peer.AddrInfo
	m.mu.Lock()
	if st := m.users[owner]; st != nil && st.sequencer {
		for _, h := range st.hosts[1:] {
			p := st.peers[h.ID]
			if p == nil || p.nudging || now.Sub(p.asked) < mirrorSilent || now.Sub(p.expected) < mirrorSilent || now.Before(p.nextNudge) {
				continue
			}
			p.nudging = true
			p.nudges++
			p.nextNudge = now.Add(backoff(mirrorSilent, nudgeMaxBackoff, p.nudges))
			silent = append(silent, h)
		}
	}
	m.mu.Unlock()
	for _, h := range silent {
		n.bg.Go(func() {
			ctx, cancel := context.WithTimeout(n.ctx, nudgeTimeout)
			defer cancel()
			err := m.nudgePeer(ctx, owner, h)
			m.mu.Lock()
			if st := m.users[owner]; st != nil && st.peers[h.ID] != nil {
				st.peers[h.ID].nudging = false
			}
			m.mu.Unlock()
			if err != nil {
				n.log.Debug("silent mirror not nudged", "user", owner, "host", h.ID, "err", err)
			}
		})
	}
}

// pullAny pulls owner's log from the first dir host other than this
// node's place me that answers. It reports the host and its head.
func (m *mirrors) pullAny(ctx context.Context, owner spindle.UserName, hosts []peer.AddrInfo, me int) (source peer.ID, seq int64, err error) {
	const op spindle.Op = "node.Mirror"
	if !m.n.writers.admits(owner) {
		return "", 0, spindle.E(op, owner, spindle.Permission, "this node is a dir host of "+string(owner)+" in the key record but does not admit the user as a writer: not mirrored")
	}
	var errs []string
	for i, h := range hosts {
		if i == me {
			continue
		}
		seq, err := m.pullSeq(ctx, owner, h)
		if err == nil {
			return h.ID, seq, nil
		}
		if spindle.KindOf(err) != spindle.IO || ctx.Err() != nil {
			return h.ID, seq, err // Refused, not unreachable: stop here.
		}
		errs = append(errs, err.Error())
	}
	return "", 0, spindle.E(op, owner, spindle.IO, "no other dir host answered: "+strings.Join(errs, "; "))
}

// pull copies the entries of owner's log that from holds beyond this
// node's head, checking each as an append.
func (m *mirrors) pull(ctx context.Context, owner spindle.UserName, from peer.AddrInfo) error {
	_, err := m.pullSeq(ctx, owner, from)
	return err
}

// pullSeq is pull, returning also from's head as it last answered, or -1
// if it did not.
func (m *mirrors) pullSeq(ctx context.Context, owner spindle.UserName, from peer.AddrInfo) (theirs int64, err error) {
	theirs = -1
	err = m.pullPages(ctx, owner, from, func(h *dirlog.Head) {
		if h != nil && h.User == owner {
			theirs = h.Seq
		}
	})
	return theirs, err
}

// pullPages is pull, telling seen the head of each answer.
func (m *mirrors) pullPages(ctx context.Context, owner spindle.UserName, from peer.AddrInfo, seen func(*dirlog.Head)) error {
	const op spindle.Op = "node.Mirror"
	n := m.n
	m.pullMu.Lock()
	defer m.pullMu.Unlock()
	for {
		mine, err := n.dir.Head(ctx, owner)
		if err != nil {
			return spindle.E(op, owner, err)
		}
		data, err := encodeRequest(wire.DirMirror, &wire.DirMirrorRequest{User: owner, From: mine.Seq + 1, Max: mirrorPage})
		if err != nil {
			return spindle.E(op, err)
		}
		out, err := n.callPeer(ctx, from, data)
		if err != nil {
			return spindle.E(op, owner, spindle.IO, fmt.Errorf("dir host %s: %w", from.ID, err))
		}
		resp, err := wire.DecodeAnswer[wire.DirMirrorResponse](out)
		if err != nil {
			return spindle.E(op, owner, fmt.Errorf("dir host %s: %w", from.ID, err))
		}
		seen(resp.Head)
		if len(resp.Checkpoint) > 0 {
			if err := m.startFrom(ctx, owner, from.ID, mine, resp.Checkpoint); err != nil {
				return err
			}
			continue
		}
		if len(resp.Log) == 0 {
			return checkSourceHead(op, owner, from.ID, mine, resp.Head)
		}
		es := make([]*dirlog.Entry, len(resp.Log))
		for i, b := range resp.Log {
			if es[i], err = dirlog.UnmarshalEntry(b); err != nil {
				return spindle.E(op, owner, spindle.Integrity, fmt.Errorf("dir host %s sent entry %d that does not decode: %w", from.ID, mine.Seq+1+int64(i), err))
			}
		}
		if first := es[0]; first.Seq != mine.Seq+1 {
			return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("asked dir host %s for entries from %d, it sent entry %d", from.ID, mine.Seq+1, first.Seq))
		} else if first.Prev != mine.Hash {
			return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("the log on dir host %s forks from this node's: its entry %d follows an entry %d with hash %s, this node's entry %d has hash %s; nothing taken", from.ID, first.Seq, mine.Seq, first.Prev, mine.Seq, mine.Hash))
		}
		for len(es) > 0 {
			k := min(len(es), dirlog.MaxBatch)
			if _, err := n.dir.Mirror(ctx, es[:k]); err != nil {
				return spindle.E(op, owner, fmt.Errorf("entry from dir host %s refused: %w", from.ID, err))
			}
			es = es[k:]
		}
		if len(resp.Log) < mirrorPage {
			return nil
		}
	}
}

// startFrom installs the checkpoint a dir host sent because this node's
// log of owner, at mine, is behind the host's compacted log: it must be of
// owner, past mine, signed by a dir host owner's key record names, and
// verify (every entry's signature, the map root); see
// dirhost.Server.StartFrom.
func (m *mirrors) startFrom(ctx context.Context, owner spindle.UserName, from peer.ID, mine *dirlog.Head, data []byte) error {
	const op spindle.Op = "node.Mirror"
	n := m.n
	cp, err := dirlog.UnmarshalCheckpoint(data)
	if err != nil {
		return spindle.E(op, owner, spindle.Integrity, fmt.Errorf("dir host %s sent a checkpoint that does not decode: %w", from, err))
	}
	switch {
	case cp.User != owner:
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("dir host %s sent a checkpoint of %s", from, cp.User))
	case cp.Seq < mine.Seq+1:
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("asked dir host %s for entries from %d, it sent a checkpoint at %d", from, mine.Seq+1, cp.Seq))
	}
	u, err := n.kst().ks.Lookup(ctx, owner)
	if err != nil {
		return spindle.E(op, owner, err)
	}
	hosts, _ := dirHostPeers(u, n.host.ID())
	if err := cp.VerifySigner(listedHosts(hosts)); err != nil {
		return spindle.E(op, owner, fmt.Errorf("checkpoint from dir host %s refused: %w", from, err))
	}
	// StartFrom checks every entry's signature, with the node's keys,
	// and the map root.
	if err := n.dir.StartFrom(ctx, cp); err != nil {
		return spindle.E(op, owner, fmt.Errorf("checkpoint from dir host %s refused: %w", from, err))
	}
	n.log.Info("mirror started from a checkpoint", "user", owner, "from", from, "seq", cp.Seq, "signer", cp.Host)
	return nil
}

// listedHosts is a dirlog.HeadVerifier that accepts what the given dir
// hosts signed.
type listedHosts []peer.AddrInfo

func (hosts listedHosts) VerifyHead(user spindle.UserName, host string, key, digest, sig []byte) error {
	for _, h := range hosts {
		if h.ID.String() == host {
			return p2p.VerifyPeerSig(host, key, digest, sig)
		}
	}
	return fmt.Errorf("%s is not a dir host of %s (the key record names %d)", host, user, len(hosts))
}

// checkSourceHead compares the head of the host a mirror pulls from with
// the mirror's own once it has every entry the host sent: a host behind
// the mirror, or at the same place with another entry, lost or forked the
// log.
func checkSourceHead(op spindle.Op, owner spindle.UserName, from peer.ID, mine, theirs *dirlog.Head) error {
	switch {
	case theirs == nil:
		return nil
	case theirs.User != owner:
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("dir host %s answered with the head of %s", from, theirs.User))
	case theirs.Seq < mine.Seq:
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("dir host %s is at sequence %d, behind this node's %d: it lost entries, or took over without catching up; nothing taken", from, theirs.Seq, mine.Seq))
	case theirs.Seq == mine.Seq && theirs.Hash != mine.Hash:
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("the log on dir host %s forks from this node's at sequence %d (hash %s there, %s here); nothing taken", from, mine.Seq, theirs.Hash, mine.Hash))
	case theirs.Seq == mine.Seq && theirs.HasLogRoot() && mine.HasLogRoot() && theirs.LogRoot != mine.LogRoot:
		// The same log makes one log tree: the host signs a root its
		// log does not give.
		return spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("dir host %s signs log root %s at sequence %d, the log this node replayed makes %s", from, theirs.LogRoot, mine.Seq, mine.LogRoot))
	}
	return nil
}

// serveMirror answers dir.mirror: owner's entries, to a peer that owner's
// key record names as a dir host.
func (n *Node) serveMirror(ctx context.Context, c *caller, req *wire.DirMirrorRequest) (*wire.DirMirrorResponse, error) {
	remote := c.remote
	const op spindle.Op = "node.ServeMirror"
	owner, err := spindle.CleanUser(req.User)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	u, err := n.record(ctx, owner)
	if err != nil {
		return nil, spindle.E(op, owner, err)
	}
	if hosts, _ := dirHostPeers(u, n.host.ID()); !listedPeer(hosts, remote) {
		return nil, spindle.E(op, owner, spindle.Permission, fmt.Sprintf("peer %s is not a dir host of %s: only the dir hosts its key record names copy the log", remote, owner))
	}
	n.mirrors.served(owner, remote, req.From)
	cp, err := n.dir.Checkpoint(ctx, owner, owner)
	if err != nil {
		return nil, err
	}
	if cp != nil && req.From <= cp.Seq {
		// The entries asked for were compacted: the mirror starts from
		// the checkpoint, and asks for the entries after it.
		h, err := n.dir.Head(ctx, owner)
		if err != nil {
			return nil, err
		}
		return &wire.DirMirrorResponse{Head: h, Checkpoint: cp.Marshal()}, nil
	}
	es, err := n.dir.Entries(ctx, owner, owner, req.From, int(min(max(req.Max, 1), mirrorPage)))
	if err != nil {
		return nil, err
	}
	h, err := n.dir.Head(ctx, owner)
	if err != nil {
		return nil, err
	}
	resp := &wire.DirMirrorResponse{Head: h}
	for _, e := range es {
		resp.Log = append(resp.Log, e.Marshal())
	}
	return resp, nil
}

func listedPeer(hosts []peer.AddrInfo, p peer.ID) bool {
	for _, h := range hosts {
		if h.ID == p {
			return true
		}
	}
	return false
}

// notSequencer refuses a write to owner's tree on a node that owner's key
// record names as a dir host but not the first: a mirror takes entries only
// from the log it copies, or its log would fork. A node not named at all
// keeps its -writers rule.
func (n *Node) notSequencer(ctx context.Context, owner spindle.UserName) error {
	u, err := n.record(ctx, owner)
	if err != nil {
		return nil // The append's own checks decide.
	}
	hosts, me := dirHostPeers(u, n.host.ID())
	if rk := n.kst().rkeys; me > 0 && rk != nil {
		// The record may have changed since it was looked up here: the
		// owner may just have moved this node first.
		if u, err = rk.Lookup(ctx, owner); err != nil {
			return nil
		}
		hosts, me = dirHostPeers(u, n.host.ID())
	}
	if me <= 0 {
		return nil
	}
	return spindle.E(spindle.Op("node.Append"), spindle.PathName(owner+"/"), spindle.Permission, fmt.Sprintf("this node mirrors the tree of %s (dir host %d of %d in the key record); writes go to its sequencer, the first dir host, %s", owner, me+1, len(hosts), hosts[0].ID))
}

// nudge tells owner's dir hosts other than this node that the log or the
// record changed, in the background; this node, if listed, pulls too.
// Nudges for one user do not pile up: one more runs after the one under
// way.
func (m *mirrors) nudge(owner spindle.UserName) {
	m.mu.Lock()
	if _, busy := m.nudging[owner]; busy {
		m.nudging[owner] = true
		m.mu.Unlock()
		return
	}
	if len(m.nudging) >= maxMirrored {
		m.mu.Unlock()
		return
	}
	m.nudging[owner] = false
	m.mu.Unlock()
	n := m.n
	n.bg.Go(func() {
		for {
			m.nudgeOnce(n.ctx, owner)
			m.mu.Lock()
			again := m.nudging[owner]
			if !again || n.ctx.Err() != nil {
				delete(m.nudging, owner)
				m.mu.Unlock()
				return
			}
			m.nudging[owner] = false
			m.mu.Unlock()
		}
	})
}

func (m *mirrors) nudgeOnce(ctx context.Context, owner spindle.UserName) {
	n := m.n
	ctx, cancel := context.WithTimeout(ctx, nudgeTimeout)
	defer cancel()
	u, err := n.kst().ks.Lookup(ctx, owner) // Fresh: the record may just have changed.
	if err != nil {
		return
	}
	hosts, me := dirHostPeers(u, n.host.ID())
	switch {
	case me > 0:
		m.track(owner)
	case me == 0:
		m.learn(owner, hosts)
	}
	var wg sync.WaitGroup
	for i, h := range hosts {
		if i == me {
			continue
		}
		wg.Go(func() {
			// A host that misses it pulls on its own, or is nudged
			// again once silent (nudgeSilent).
			m.nudgePeer(ctx, owner, h)
		})
	}
	wg.Wait()
}

// nudgePeer sends dir.nudge about owner to the dir host h.
func (m *mirrors) nudgePeer(ctx context.Context, owner spindle.UserName, h peer.AddrInfo) error {
	data, err := encodeRequest(wire.DirNudge, &wire.DirNudgeRequest{User: owner})
	if err != nil {
		return spindle.E(spindle.Op("node.Nudge"), err)
	}
	_, err = m.n.callPeer(ctx, h, data)
	return err
}

// learn records, for a log this node sequences, the dir hosts its record
// names (hosts[0] is this node), tracking the user if it is new here.
func (m *mirrors) learn(owner spindle.UserName, hosts []peer.AddrInfo) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.users[owner]
	if st == nil {
		if len(m.users) >= maxMirrored {
			return
		}
		st = &mirrorState{next: now.Add(idleInterval)}
		m.users[owner] = st
	}
	st.setHosts(hosts, 0, now)
}

// nudged answers dir.nudge.
func (n *Node) nudged(_ context.Context, _ *caller, req *wire.DirNudgeRequest) (*wire.DirNudgeResponse, error) {
	owner, err := spindle.CleanUser(req.User)
	if err != nil {
		return nil, spindle.E(spindle.Op("node.Nudge"), err)
	}
	n.mirrors.track(owner)
	return &wire.DirNudgeResponse{}, nil
}

// keyPutDone nudges the dir hosts of a record the node just took.
func (n *Node) keyPutDone(data []byte) {
	if u, err := keylog.DecodeRecord(data); err == nil {
		n.mirrors.nudge(u.Name)
	}
}
