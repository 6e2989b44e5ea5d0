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
// dirlog.Server.AppendBatch: the same checks the sequencer made, against
// the mirror's own fold of the log (the writer's signature, the place in
// the chain, the right under the Access and Group files in force at that
// point). An entry that fails is not taken; the mirror stops there and
// reports the error (MirrorStatus, and the node's log) naming the host
// that served it. An entry for the next place whose Prev is not the
// mirror's head, or a host whose log is shorter than the mirror's, is a
// fork or a rollback: Integrity, nothing taken.
//
// A mirror pulls every mirrorInterval, and at once when nudged
// (dir.nudge, after which it looks the record up afresh): the sequencer
// nudges the other dir hosts after each append, and the node that takes a
// key record nudges every dir host it names, so that a mirror added later
// starts copying the whole log at once. A node also looks, from its
// start, at each user whose log it holds: a former sequencer that the
// owner moved down the list catches up from the new one. Users a node
// sequences, or is no longer listed for, it looks at again every
// idleInterval, or when nudged.
//
// A mirror behind the checkpoint of a compacted log (see
// dirlog.Server.Compact) cannot have the entries before it: dir.mirror
// then answers with the checkpoint (Data) instead of entries. The mirror
// takes it only if it is of the user, past the mirror's head, signed by a
// dir host the key record names, and verifies (every entry's signature,
// the map root: dirlog.Checkpoint.Verify); dirlog.Server.StartFrom makes
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
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

const (
	// mirrorInterval is how often a mirror pulls without being nudged.
	mirrorInterval = 2 * time.Second
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

	mu      sync.Mutex
	users   map[spindle.UserName]*mirrorState
	nudging map[spindle.UserName]bool // Users whose dir hosts are being nudged; true if again after.
}

// A mirrorState is what a node knows of its mirror of one user's log.
type mirrorState struct {
	source    peer.ID   // The host the last pull came from.
	err       error     // Why the last pull failed, or nil.
	unlisted  time.Time // Since when the record does not name this node, or zero.
	sequencer bool      // This node is the first dir host.
	next      time.Time // No pull before this, unless nudged.
	nudged    bool      // Look the record up afresh: it may just have changed.
}

// A MirrorStatus reports a node's mirror of one user's log.
type MirrorStatus struct {
	Sequencer bool    // This node is the user's first dir host.
	Source    peer.ID // The dir host the log was last pulled from.
	Seq       int64   // The head held here.
	Err       error   // Why the last pull failed, or nil.
}

// startMirrors starts mirroring the users whose logs the node holds, and
// any it is nudged about.
func (n *Node) startMirrors() {
	m := &mirrors{n: n, kick: make(chan struct{}, 1), users: make(map[spindle.UserName]*mirrorState), nudging: make(map[spindle.UserName]bool)}
	for _, u := range n.dir.Users() {
		m.users[u] = new(mirrorState)
	}
	n.mirrors = m
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		m.run(n.ctx)
	}()
}

// MirrorStatus reports the node's mirror of owner's log; false if the node
// does not track it.
func (n *Node) MirrorStatus(ctx context.Context, owner spindle.UserName) (MirrorStatus, bool) {
	m := n.mirrors
	m.mu.Lock()
	st, ok := m.users[owner]
	var out MirrorStatus
	if ok {
		out = MirrorStatus{Sequencer: st.sequencer, Source: st.source, Err: st.err}
	}
	m.mu.Unlock()
	if h, err := n.dir.Head(ctx, owner); err == nil {
		out.Seq = h.Seq
	}
	return out, ok
}

func (m *mirrors) run(ctx context.Context) {
	t := time.NewTicker(mirrorInterval)
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
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
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

// sync pulls owner's log if this node mirrors it, and records the outcome.
func (m *mirrors) sync(ctx context.Context, owner spindle.UserName) {
	n := m.n
	m.mu.Lock()
	fresh := false
	if st := m.users[owner]; st != nil {
		fresh, st.nudged = st.nudged, false
	}
	m.mu.Unlock()
	source, sequencer, listed, err := m.pullAny(ctx, owner, fresh)
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.users[owner]
	if st == nil {
		return
	}
	st.next = time.Time{}
	if sequencer || !listed {
		st.next = time.Now().Add(idleInterval)
	}
	switch {
	case !listed && err == nil:
		st.err, st.sequencer = nil, false
		if st.unlisted.IsZero() {
			st.unlisted = time.Now()
		} else if time.Since(st.unlisted) > mirrorForget {
			delete(m.users, owner)
		}
		return
	case listed:
		st.unlisted = time.Time{}
	}
	if err != nil && (st.err == nil || st.err.Error() != err.Error()) {
		n.log.Warn("mirror not updated", "user", owner, "from", source, "err", err)
	}
	st.err, st.sequencer = err, sequencer
	if source != "" {
		st.source = source
	}
}

// pullAny pulls owner's log from the first other dir host that answers, if
// this node is a mirror of it. It reports the host, whether this node is
// the sequencer, and whether it is listed at all.
func (m *mirrors) pullAny(ctx context.Context, owner spindle.UserName, fresh bool) (source peer.ID, sequencer, listed bool, err error) {
	const op spindle.Op = "node.Mirror"
	n := m.n
	var u *spindle.User
	if fresh {
		u, err = n.kst().ks.Lookup(ctx, owner)
	} else {
		u, err = n.record(ctx, owner)
	}
	if err != nil {
		return "", false, false, spindle.E(op, owner, err)
	}
	hosts, me := dirHostPeers(u, n.host.ID())
	switch {
	case me < 0:
		return "", false, false, nil
	case me == 0:
		return "", true, true, nil
	case !n.writers.admits(owner):
		return "", false, true, spindle.E(op, owner, spindle.Permission, "this node is a dir host of "+string(owner)+" in the key record but does not admit the user (spin node -writers): not mirrored")
	}
	var errs []error
	for i, h := range hosts {
		if i == me {
			continue
		}
		err := m.pull(ctx, owner, h)
		if err == nil {
			return h.ID, false, true, nil
		}
		if spindle.KindOf(err) != spindle.IO || ctx.Err() != nil {
			return h.ID, false, true, err // Refused, not unreachable: stop here.
		}
		errs = append(errs, err)
	}
	return "", false, true, spindle.E(op, owner, spindle.IO, fmt.Errorf("no other dir host answered: %w", errors.Join(errs...)))
}

// pull copies the entries of owner's log that from holds beyond this
// node's head, checking each as an append.
func (m *mirrors) pull(ctx context.Context, owner spindle.UserName, from peer.AddrInfo) error {
	const op spindle.Op = "node.Mirror"
	n := m.n
	for {
		mine, err := n.dir.Head(ctx, owner)
		if err != nil {
			return spindle.E(op, owner, err)
		}
		data, err := wire.Encode(&wire.Request{Method: wire.DirMirror, User: owner, Seq: mine.Seq + 1, Size: mirrorPage})
		if err != nil {
			return spindle.E(op, spindle.Internal, err)
		}
		out, err := n.callPeer(ctx, from, data)
		if err != nil {
			return spindle.E(op, owner, spindle.IO, fmt.Errorf("dir host %s: %w", from.ID, err))
		}
		resp, err := decodeAnswer(out)
		if err != nil {
			return spindle.E(op, owner, fmt.Errorf("dir host %s: %w", from.ID, err))
		}
		if len(resp.Data) > 0 {
			if err := m.startFrom(ctx, owner, from.ID, mine, resp.Data); err != nil {
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
			if _, err := n.dir.AppendBatch(ctx, es[:k]); err != nil {
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
// dirlog.Server.StartFrom.
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
	}
	return nil
}

// serveMirror answers dir.mirror: owner's entries, to a peer that owner's
// key record names as a dir host.
func (n *Node) serveMirror(ctx context.Context, remote peer.ID, req *wire.Request) (*wire.Response, error) {
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
	cp, err := n.dir.Checkpoint(ctx, owner, owner)
	if err != nil {
		return nil, err
	}
	if cp != nil && req.Seq <= cp.Seq {
		// The entries asked for were compacted: the mirror starts from
		// the checkpoint, and asks for the entries after it.
		h, err := n.dir.Head(ctx, owner)
		if err != nil {
			return nil, err
		}
		return &wire.Response{Head: h, Data: cp.Marshal()}, nil
	}
	es, err := n.dir.Entries(ctx, owner, owner, req.Seq, int(min(max(req.Size, 1), mirrorPage)))
	if err != nil {
		return nil, err
	}
	h, err := n.dir.Head(ctx, owner)
	if err != nil {
		return nil, err
	}
	resp := &wire.Response{Head: h}
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
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
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
	}()
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
	if me > 0 {
		m.track(owner)
	}
	data, err := wire.Encode(&wire.Request{Method: wire.DirNudge, User: owner})
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for i, h := range hosts {
		if i == me {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.callPeer(ctx, h, data) // A host that misses it pulls on its own.
		}()
	}
	wg.Wait()
}

// nudged answers dir.nudge.
func (n *Node) nudged(req *wire.Request) (*wire.Response, error) {
	owner, err := spindle.CleanUser(req.User)
	if err != nil {
		return nil, spindle.E(spindle.Op("node.Nudge"), err)
	}
	n.mirrors.track(owner)
	return &wire.Response{}, nil
}

// keyPutDone nudges the dir hosts of a record the node just took.
func (n *Node) keyPutDone(data []byte) {
	if u, err := keyraft.DecodeRecord(data); err == nil {
		n.mirrors.nudge(u.Name)
	}
}
