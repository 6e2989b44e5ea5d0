package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
)

// A client does not take the key records its node hands it on trust: a
// node that substituted a reader's key could read every file wrapped for
// that reader. With a key log (Config.KeyLog) every record comes with
// a proof that it is in the key cluster's transparency log, under a tree
// head signed by a majority of the cluster's members, and every head is
// checked to extend the newest one the client has seen before
// (keylog.Checker). A node can then neither make up a record nor rewrite
// or fork the log without the client noticing; what it can still do is
// answer with an older head, which serves at most records that were once
// valid, or refuse to answer.
//
// The client is tied to no member: it follows the cluster's members
// through the log (keylog.NewFollowingChecker). The configuration
// changes, each signed by an operator, are leaves of the log, and a head
// names the configuration in force in its tree; a head naming a newer one
// than the client knows comes with the changes in between, proved in its
// tree. So a member that joined later is trusted because the log says so,
// and one that was removed signs nothing the client accepts.
//
// The key log file holds, after its first line "spindle key log 2":
//
//	boot VKEY          the verifier key of the member first trusted
//	change INDEX B64   each configuration change, as a leaf of the log
//	version USER N     for each user whose record the client looked up
//
// and then the newest signed tree head seen. The first client to use a
// file that does not exist yet takes the boot key from its node, as ssh
// does a host key, unless Config.Verifier pins it; spin does that only in
// spin init, which prints the key's fingerprint, and refuses to carry on
// without the file afterwards (Config.RequireKeyLog). The boot key stands
// for the members while the cluster's operator has not recorded any (a
// node that bootstrapped a cluster of its own), and signs the head that
// first records them.
//
// A tree head proves that a record was accepted, not that it is the
// newest version of the user's record, so a node could still show an old
// one: a key its owner replaced because it was lost or stolen. The versions
// line catches that for every user whose newer record this client has
// seen; the first lookup of a user still takes the node's choice of the
// versions in the log.

// keyLogHeader is the first line of a key log file.
const keyLogHeader = "spindle key log 2"

// keyLog is a client's view of the key cluster's transparency log.
type keyLog struct {
	file string
	boot string // Verifier key of the member first trusted.
	// checker checks heads and records; refresh replaces it with one
	// from the file when another command saved a newer head there.
	checker atomic.Pointer[keylog.Checker]

	mu       sync.Mutex
	versions map[spindle.UserName]int64 // Newest record version seen, by user.
	saved    []byte                     // The file's content as last written.
}

// openKeyLog reads the key log in file. If there is none it starts one
// with the verifier key c.cfg.Verifier pins or, unless c.cfg.RequireKeyLog
// is set, with the one the node gives: a key log that went missing is
// never replaced silently by whatever the node of the day says. theirs is
// the node's verifier key if the client has it already, else empty.
func (c *Client) openKeyLog(ctx context.Context, file, theirs string) (*keyLog, error) {
	pin := strings.TrimSpace(c.cfg.Verifier)
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		if pin == "" && c.cfg.RequireKeyLog {
			return nil, spindle.E(spindle.NotExist, fmt.Errorf("%w: %s holds what this client trusts of the key cluster, "+
				"which is not taken from the node again without your say", ErrKeyLogMissing, file))
		}
		boot := pin
		if boot == "" {
			if boot, err = c.nodeVerifier(ctx, theirs); err != nil {
				return nil, err
			}
		}
		l, err := newKeyLog(file, boot, nil, nil)
		if err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("verifier key: %w", err))
		}
		if pin != "" {
			// Check the pin against the cluster before anything is
			// written: its current head, and the members it names.
			if err := c.checkPin(ctx, l, pin); err != nil {
				return nil, err
			}
		}
		if pin == "" {
			c.log.Info("trusting the key cluster from now on", "verifier", l.boot, "fingerprint", VerifierFingerprint(l.boot), "file", file)
		} else if c.cfg.RequireKeyLog {
			c.log.Warn("key log was missing; started again with the pinned verifier key: records seen before are not remembered", "file", file)
		}
		return l, l.save()
	}
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	l, err := parseKeyLog(file, data)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Errorf("key log %s: %w", file, err))
	}
	if l.upgraded {
		c.log.Info("key log upgraded: the cluster's members are followed through its log from now on", "file", file)
	}
	if len(l.chk().Members()) > 0 {
		// The members are known from the log; the node may be any of
		// them, or reach them for the client.
		return l.keyLog, nil
	}
	if pin != "" && pin != l.boot {
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("key log %s trusts %s, not the pinned verifier key %s; if the pin is right, move that file away", file, l.boot, pin))
	}
	// The cluster records no members yet, so its heads are the boot
	// member's: say so at once if the node belongs to another cluster,
	// rather than fail each lookup with a head signed by a key nobody
	// trusts.
	theirs, err = c.nodeVerifier(ctx, theirs)
	if err != nil {
		return nil, err
	}
	if theirs != l.boot {
		// The node may be a member that joined since the client last
		// looked: then the cluster's current head names the members,
		// and the member first trusted signed the first head to.
		resp, herr := call[wire.KeyHeadRequest, wire.KeyHeadResponse](ctx, c.svc, wire.KeyHead, "", &wire.KeyHeadRequest{})
		if herr == nil {
			_, herr = l.chk().Update(ctx, resp.Head, prover{c.svc})
		}
		switch {
		case herr != nil && !errors.Is(herr, spindle.Integrity):
			return nil, spindle.E(spindle.Transient, fmt.Errorf("the node signs with %s, not the key %s this client trusts (from %s), and could not show the cluster's current head, which would say whether it is a member now: %w", theirs, l.boot, file, herr))
		case herr == nil && len(l.chk().Members()) == 0:
			// A member that joined so recently that its head is from
			// before the cluster recorded its members.
			return nil, spindle.E(spindle.Transient, fmt.Sprintf("the node signs with %s, not the key %s this client trusts (from %s), and its newest head does not name the cluster's members yet", theirs, l.boot, file))
		case herr != nil:
			c.log.Debug("the node's key cluster is not followed from the key log", "err", herr)
			c.log.Debug("the node's key cluster is not followed from the key log", "err", herr)
			return nil, c.otherCluster(theirs, l.boot, file)
		}
	}
	return l.keyLog, nil
}

// checkPin accepts the cluster's current head into a new key log whose
// boot key is pin, which checks that the pinned key signs it, or is one
// of the members of the configuration it names.
func (c *Client) checkPin(ctx context.Context, l *keyLog, pin string) error {
	resp, err := call[wire.KeyHeadRequest, wire.KeyHeadResponse](ctx, c.svc, wire.KeyHead, "", &wire.KeyHeadRequest{})
	if err != nil {
		return fmt.Errorf("asking the node for the key cluster's tree head: %w", err)
	}
	if _, err := l.chk().Update(ctx, resp.Head, prover{c.svc}); err != nil {
		if errors.Is(err, spindle.Integrity) {
			return spindle.E(spindle.Integrity, fmt.Errorf("the node's key cluster is not the one the pinned verifier key %s is of: %w", l.boot, err))
		}
		return err
	}
	members := l.chk().Members()
	if len(members) > 0 && !slices.Contains(slices.Collect(maps.Values(members)), pin) {
		return spindle.E(spindle.Integrity, fmt.Sprintf(
			"the node's key cluster does not have the pinned verifier key %s among its members (%s); nothing of it is trusted",
			pin, strings.Join(slices.Sorted(maps.Keys(members)), ", ")))
	}
	return nil
}

// nodeVerifier asks the node for its key cluster's verifier key, unless
// known is that key already.
func (c *Client) nodeVerifier(ctx context.Context, known string) (string, error) {
	if known != "" {
		return known, nil
	}
	resp, err := call[wire.KeyVerifierRequest, wire.KeyVerifierResponse](ctx, c.svc, wire.KeyVerifier, "", &wire.KeyVerifierRequest{})
	if err != nil {
		return "", fmt.Errorf("asking the node for the key cluster's verifier key: %w", err)
	}
	return strings.TrimSpace(string(resp.Verifier)), nil
}

// otherCluster is the error for a node whose key cluster signs with
// theirs when the client trusts ours (from where).
func (c *Client) otherCluster(theirs, ours, from string) error {
	return spindle.E(spindle.Integrity, fmt.Errorf("%w: it signs with %s, but this client trusts only %s (from %s)", ErrOtherCluster, theirs, ours, from))
}

func newKeyLog(file, boot string, changes []keylog.ConfigEntry, head []byte) (*keyLog, error) {
	boot = strings.TrimSpace(boot)
	cl, err := keylog.RestoreConfigLog(changes)
	if err != nil {
		return nil, err
	}
	checker, err := keylog.NewFollowingChecker(cl, boot)
	if err != nil {
		return nil, err
	}
	l := &keyLog{file: file, boot: boot, versions: map[spindle.UserName]int64{}}
	l.checker.Store(checker)
	if len(head) > 0 {
		if err := checker.Trust(head); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// parsedKeyLog is a key log read from its file.
type parsedKeyLog struct {
	*keyLog
	upgraded bool // The file was of the first form, with one verifier key and no changes.
}

// parseKeyLog reads a key log file's content (see above).
func parseKeyLog(file string, data []byte) (parsedKeyLog, error) {
	kf, err := splitKeyLog(data)
	if err != nil {
		return parsedKeyLog{}, err
	}
	l, err := newKeyLog(file, kf.boot, kf.changes, kf.head)
	if err != nil {
		return parsedKeyLog{}, err
	}
	l.versions = kf.versions
	if !kf.legacy {
		l.saved = data
	}
	return parsedKeyLog{l, kf.legacy}, nil
}

// keyLogFile is the content of a key log file, split into its parts.
type keyLogFile struct {
	boot     string
	changes  []keylog.ConfigEntry
	versions map[spindle.UserName]int64
	head     []byte
	legacy   bool // The first form: the boot key on the first line, no changes; its head is dropped.
}

// splitKeyLog splits a key log file's content into its parts, checking
// the lines' form but not the changes or the head.
func splitKeyLog(data []byte) (keyLogFile, error) {
	kf := keyLogFile{versions: map[spindle.UserName]int64{}}
	first, rest, _ := strings.Cut(string(data), "\n")
	if first != keyLogHeader {
		// The first form: the verifier key, versions, and a head of a
		// form heads no longer have.
		kf.boot, kf.legacy = strings.TrimSpace(first), true
	}
	if line, r, ok := strings.Cut(rest, "\n"); !kf.legacy && ok && strings.HasPrefix(line, "boot ") {
		kf.boot, rest = strings.TrimSpace(strings.TrimPrefix(line, "boot ")), r
	}
	for !kf.legacy && strings.HasPrefix(rest, "change ") {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		f := strings.Fields(line)
		if len(f) != 3 {
			return keyLogFile{}, fmt.Errorf("bad line %q", line)
		}
		idx, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || idx < 0 {
			return keyLogFile{}, fmt.Errorf("bad leaf index in %q", line)
		}
		enc, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil {
			return keyLogFile{}, fmt.Errorf("bad change in %q", line)
		}
		kf.changes = append(kf.changes, keylog.ConfigEntry{Index: idx, Change: enc})
	}
	for strings.HasPrefix(rest, "version ") {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		f := strings.Fields(line)
		if len(f) != 3 {
			return keyLogFile{}, fmt.Errorf("bad line %q", line)
		}
		user, err := spindle.CleanUser(spindle.UserName(f[1]))
		if err != nil {
			return keyLogFile{}, err
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || v < 1 {
			return keyLogFile{}, fmt.Errorf("bad version in %q", line)
		}
		kf.versions[user] = v
	}
	if !kf.legacy {
		kf.head = []byte(rest)
	}
	return kf, nil
}

// chk returns the checker of the key log.
func (l *keyLog) chk() *keylog.Checker { return l.checker.Load() }

// refresh takes what other commands of the user saved in the key log
// file since this client read it, as a client started now would: a head
// of a larger tree, with the configuration changes up to it, and newer
// record versions. A long-running client (spin ui, spin mount) thus
// follows a change of the key cluster's members that its own lookups
// missed, such as the head that first named members, signed by the
// member it first trusted while that one was still a member. It reports
// whether it took a newer head.
//
// The head in the file must extend the one this client holds, as any
// head a node serves must: p proves it (and the configuration changes up
// to it) as the key cluster holds it. A head that does not is refused,
// and the error is the fork's evidence if it can be proved: another
// command of the user was shown another log than this one.
func (l *keyLog) refresh(ctx context.Context, p prover) (bool, error) {
	data, err := os.ReadFile(l.file)
	if err != nil {
		return false, nil
	}
	kf, err := splitKeyLog(data)
	if err != nil || kf.legacy || kf.boot != l.boot || len(kf.head) == 0 {
		return false, nil
	}
	l.mu.Lock()
	for u, v := range kf.versions {
		l.versions[u] = max(l.versions[u], v)
	}
	l.mu.Unlock()
	hi, err := keylog.ParseHead(kf.head)
	cur := l.chk()
	if err != nil || hi.N <= cur.Tree().N {
		return false, nil
	}
	if _, err := cur.Update(ctx, kf.head, p); err != nil {
		return false, fmt.Errorf("the head another command saved in %s: %w", l.file, err)
	}
	return true, nil
}

// floor returns the newest version of name's record seen so far.
func (l *keyLog) floor(name spindle.UserName) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.versions[name]
}

// seen checks a proved record against floor, the newest version of its
// user's record the client had seen when it asked (not the newest now:
// answers to concurrent lookups may overtake each other), and remembers
// it if it is the newest.
func (l *keyLog) seen(u *spindle.User, floor int64) error {
	if u.Version < floor {
		return spindle.E(spindle.Integrity, u.Name, fmt.Sprintf(
			"the node offers version %d of the key record, and this client has seen version %d (see %s)", u.Version, floor, l.file))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.versions[u.Name] = max(l.versions[u.Name], u.Version)
	return nil
}

// save writes the newest head, changes and versions seen to the file, if
// they changed. What another command saved meanwhile is kept where it is
// newer: versions user by user, and the stored tree head with its changes
// if they verify and are of a larger tree than this client's.
func (l *keyLog) save() error {
	if l.saved != nil && bytes.Equal(l.content(keyLogFile{}), l.saved) {
		return nil
	}
	var out []byte
	err := updateState(l.file, func(old []byte) []byte {
		kf, err := splitKeyLog(old)
		if err == nil && kf.boot == l.boot {
			l.mu.Lock()
			for u, v := range kf.versions {
				l.versions[u] = max(l.versions[u], v)
			}
			l.mu.Unlock()
		} else {
			kf = keyLogFile{}
		}
		out = l.content(kf)
		return out
	})
	if err != nil {
		return err
	}
	l.saved = out
	return nil
}

// content returns the key log file's content: the boot key, the newer of
// the checker's head and changes and those stored (read from the file),
// if those verify, and the versions seen.
func (l *keyLog) content(stored keyLogFile) []byte {
	head, changes := l.chk().Head(), l.chk().ConfigEntries()
	if len(stored.head) > 0 && !stored.legacy {
		if other, err := newKeyLog(l.file, l.boot, stored.changes, stored.head); err == nil && other.chk().Tree().N > l.chk().Tree().N {
			head, changes = stored.head, stored.changes
		}
	}
	var b bytes.Buffer
	b.WriteString(keyLogHeader + "\n")
	if l.boot != "" {
		fmt.Fprintf(&b, "boot %s\n", l.boot)
	}
	for _, e := range changes {
		fmt.Fprintf(&b, "change %d %s\n", e.Index, base64.StdEncoding.EncodeToString(e.Change))
	}
	l.mu.Lock()
	for _, u := range slices.Sorted(maps.Keys(l.versions)) {
		fmt.Fprintf(&b, "version %s %d\n", u, l.versions[u])
	}
	l.mu.Unlock()
	b.Write(head)
	return b.Bytes()
}

// A prover asks the node for consistency proofs of the key cluster's log.
type prover struct{ svc *remote }

// ConfigProofs implements keylog.ConfigProver.
func (p prover) ConfigProofs(ctx context.Context, after int64, head []byte) ([]*keylog.Proof, error) {
	resp, err := call[wire.KeyConfigRequest, wire.KeyConfigResponse](ctx, p.svc, wire.KeyConfig, "", &wire.KeyConfigRequest{After: after, Head: head})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalProofs(resp.Proofs)
}

// ConsistencyProof implements keylog.TreeProver.
func (p prover) ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	resp, err := call[wire.KeyConsistencyRequest, wire.KeyConsistencyResponse](ctx, p.svc, wire.KeyConsistency, "", &wire.KeyConsistencyRequest{Old: oldSize, New: newSize})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalTreeProof(resp.Proof)
}

// PrefixHash implements keylog.PrefixProver: the hash of the first n
// records of the log as the node's cluster holds it.
func (p prover) PrefixHash(ctx context.Context, n int64) (tlog.Hash, error) {
	var h tlog.Hash
	resp, err := call[wire.KeyConsistencyRequest, wire.KeyConsistencyResponse](ctx, p.svc, wire.KeyConsistency, "", &wire.KeyConsistencyRequest{Old: n, New: n})
	if err != nil {
		return h, err
	}
	if len(resp.Prefix) != len(h) {
		return h, spindle.E(spindle.Invalid, fmt.Sprintf("prefix hash of %d bytes", len(resp.Prefix)))
	}
	copy(h[:], resp.Prefix)
	return h, nil
}

// keepKeyFork saves the evidence of a fork of the key cluster's log that
// err carries (a *keylog.ForkError), if it does, and returns err naming
// the file. The key log keeps the head it had: the client cannot tell
// which of the two logs is the one the rest of the world sees, and the
// evidence is what its user shows the cluster's operators.
func (c *Client) keepKeyFork(err error) error {
	var fe *keylog.ForkError
	if !errors.As(err, &fe) || c.svc.evidence == "" {
		return err
	}
	ev := &Evidence{Kind: EvidenceKeyFork, Peer: c.svc.peer.String(), Time: spindle.Now(), Fork: fe.Fork, Note: fe.Why}
	file, serr := saveEvidence(c.svc.evidence, ev)
	if serr != nil {
		c.log.Warn("cannot save evidence", "err", serr)
		return err
	}
	return spindle.E(spindle.Integrity, fmt.Errorf("%w (evidence saved in %s; spin audit -evidence checks it)", err, file))
}

// provedRecord asks the node for name's key record with its proof and
// checks both against the key log.
func (c *Client) provedRecord(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	floor := c.keyLog.floor(name)
	// The gossip of the head the proof comes under goes with it, unless
	// this client gossiped the key log's head already.
	gossip := c.gossiped.Load() == 0 || c.gossiped.Load() < c.keyLog.chk().Tree().N
	resp, err := call[wire.KeyProofRequest, wire.KeyProofResponse](ctx, c.svc, wire.KeyProof, "", &wire.KeyProofRequest{User: name, Gossip: gossip})
	if err != nil {
		return nil, err
	}
	return c.checkProved(ctx, name, floor, resp)
}

// checkProved checks resp, the answer to a key proof of name's record
// asked for when the newest version of it seen was floor, against the key
// log, and returns the record.
func (c *Client) checkProved(ctx context.Context, name spindle.UserName, floor int64, resp *wire.KeyProofResponse) (*spindle.User, error) {
	p, err := keylog.UnmarshalProof(resp.Proof)
	if err != nil {
		return nil, err
	}
	chk := c.keyLog.chk()
	changes := len(chk.ConfigEntries())
	u, err := chk.VerifyLookup(ctx, p, name, prover{c.svc})
	if errors.Is(err, spindle.Integrity) {
		took, rerr := c.keyLog.refresh(ctx, prover{c.svc})
		switch {
		case took:
			c.log.Info("key log taken from its file, where another command saved a newer head", "file", c.keyLog.file)
			u, err = chk.VerifyLookup(ctx, p, name, prover{c.svc})
		case errors.Is(rerr, spindle.Integrity):
			err = rerr
		}
	}
	if err != nil {
		return nil, c.keepKeyFork(err)
	}
	if len(chk.ConfigEntries()) != changes {
		// The members changed: leave the news in the file for the
		// user's other clients now, not only when this one closes.
		if err := c.keyLog.save(); err != nil {
			c.log.Warn("cannot save the key log", "file", c.keyLog.file, "err", err)
		}
	}
	if err := c.keyLog.seen(u, floor); err != nil {
		return nil, err
	}
	took := false
	if resp.Gossiped {
		hi, herr := keylog.ParseHead(p.Head)
		if herr == nil {
			if took, err = c.gossipWithProof(hi.N, resp.Heads); err != nil {
				return nil, err
			}
		}
	}
	if !took {
		if err := c.gossipAfterLookup(ctx); err != nil {
			return nil, err
		}
	}
	c.log.Debug("key record proved in the key log", "user", name, "version", c.keyLog.floor(name), "seen", floor)
	return u, nil
}

// Proofs that came with an answer. A whichaccess answer carries the
// proofs of the records of the readers its Access file names
// (wire.DirWhichRequest.WithKeys), which a put looks up next, to wrap the
// file's key for them: kept here by user, each is checked as the answer
// to a key proof would be when the client looks the user up, instead of
// asking (lookupUser).

// keepProofs keeps proofs, encoded keylog.Proofs, for lookupUser.
func (c *Client) keepProofs(proofs [][]byte) {
	for _, data := range proofs[:min(len(proofs), wire.MaxKeyProofs)] {
		p, err := keylog.UnmarshalProof(data)
		if err != nil {
			continue
		}
		u, err := keylog.DecodeRecord(p.Record)
		if err != nil {
			continue
		}
		c.mu.Lock()
		if c.proofs == nil {
			c.proofs = map[spindle.UserName]keptProof{}
		}
		c.proofs[u.Name] = keptProof{data, time.Now()}
		c.mu.Unlock()
	}
}

// A keptProof is a key proof that came with an answer, and when.
type keptProof struct {
	data []byte
	at   time.Time
}

// keptProof returns, once, the proof kept for name, or nil; a proof kept
// for longer than a looked up record is used is dropped.
func (c *Client) keptProof(name spindle.UserName) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	kp, ok := c.proofs[name]
	delete(c.proofs, name)
	if !ok || time.Since(kp.at) >= keyCacheTTL {
		return nil
	}
	return kp.data
}

// keptRecord returns name's record from a proof kept for it, checked, if
// there is one; an Integrity error if the proof is a lie.
func (c *Client) keptRecord(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	data := c.keptProof(name)
	if data == nil {
		return nil, nil
	}
	u, err := c.checkProved(ctx, name, c.keyLog.floor(name), &wire.KeyProofResponse{Proof: data})
	if err != nil && !errors.Is(err, spindle.Integrity) {
		return nil, nil // Ask, as without it.
	}
	return u, err
}

// provedHistory returns every version of name's key record, oldest
// first, each proved to be in the key log when the client keeps one.
func (c *Client) provedHistory(ctx context.Context, name spindle.UserName) ([]*spindle.User, error) {
	versions, _, err := c.provedHistoryAt(ctx, name)
	return versions, err
}

// provedHistoryAt is provedHistory with each version's index in the key
// log.
func (c *Client) provedHistoryAt(ctx context.Context, name spindle.UserName) ([]*spindle.User, []int64, error) {
	resp, err := call[wire.KeyProofsRequest, wire.KeyProofsResponse](ctx, c.svc, wire.KeyProofs, "", &wire.KeyProofsRequest{User: name})
	if err != nil {
		return nil, nil, err
	}
	var versions []*spindle.User
	var index []int64
	for _, data := range resp.Proofs {
		p, err := keylog.UnmarshalProof(data)
		if err != nil {
			return nil, nil, err
		}
		var u *spindle.User
		if c.keyLog != nil {
			u, err = c.keyLog.chk().VerifyLookup(ctx, p, name, prover{c.svc})
			err = c.keepKeyFork(err)
		} else {
			// Without a key log nothing is proved: the node's word is taken.
			u, err = keylog.DecodeRecord(p.Record)
		}
		if err != nil {
			return nil, nil, err
		}
		versions = append(versions, u)
		index = append(index, p.Index)
	}
	return versions, index, nil
}
