package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/node/wire"
)

// A client does not take the key records its node hands it on trust: a
// node that substituted a reader's key could read every file wrapped for
// that reader. With a key log (Config.KeyLog) every record comes with
// a proof that it is in the key cluster's transparency log, under a tree
// head signed by the cluster, and every head is checked to extend the
// newest one the client has seen before (keyraft.Checker). A node can then
// neither make up a record nor rewrite or fork the log without the client
// noticing; what it can still do is answer with an older head, which
// serves at most records that were once valid, or refuse to answer.
//
// The key log file holds the cluster's note verifier key on its first line
// and, after it, a line "version USER N" for each user whose record the
// client has looked up, then the newest signed tree head seen. The first
// client to use a file that does not exist yet asks its node for the
// verifier key and trusts it from then on, as ssh does with a host key,
// unless Config.Verifier pins the key; spin does that only in spin init,
// which prints the key's fingerprint, and refuses to carry on without the
// file afterwards (Config.RequireKeyLog).
//
// A tree head proves that a record was accepted, not that it is the
// newest version of the user's record, so a node could still show an old
// one: a key its owner replaced because it was lost or stolen. The versions
// line catches that for every user whose newer record this client has
// seen; the first lookup of a user still takes the node's choice of the
// versions in the log.

// keyLog is a client's view of the key cluster's transparency log.
type keyLog struct {
	file    string
	vkey    string
	checker *keyraft.Checker

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
			return nil, spindle.E(spindle.NotExist, fmt.Sprintf("key log %s is missing; "+
				"it holds the key cluster's verifier key, which is not taken from the node again without your say: "+
				"restore the file from a backup, or start a new one with spin init -force -recover USER "+
				"(-verifier KEY pins the cluster's key, from its operator, instead of trusting the node's)", file))
		}
		theirs, err = c.nodeVerifier(ctx, theirs)
		if err != nil {
			return nil, err
		}
		vkey := theirs
		if pin != "" {
			if theirs != pin {
				return nil, c.otherCluster(theirs, pin, "-verifier")
			}
			vkey = pin
		}
		l, err := newKeyLog(file, vkey, nil)
		if err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("verifier key: %w", err))
		}
		if pin == "" {
			c.log.Info("trusting the key cluster's tree heads from now on", "verifier", l.vkey, "fingerprint", VerifierFingerprint(l.vkey), "file", file)
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
	if pin != "" && pin != l.vkey {
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("key log %s trusts %s, not the pinned verifier key %s; if the pin is right, move that file away", file, l.vkey, pin))
	}
	// Say so at once if the node belongs to another cluster, rather than
	// fail each lookup with a head signed by a key nobody trusts.
	theirs, err = c.nodeVerifier(ctx, theirs)
	if err != nil {
		return nil, err
	}
	if theirs != l.vkey {
		return nil, c.otherCluster(theirs, l.vkey, file)
	}
	return l, nil
}

// nodeVerifier asks the node for its key cluster's verifier key, unless
// known is that key already.
func (c *Client) nodeVerifier(ctx context.Context, known string) (string, error) {
	if known != "" {
		return known, nil
	}
	resp, err := c.svc.call(ctx, &wire.Request{Method: wire.KeyVerifier})
	if err != nil {
		return "", fmt.Errorf("asking the node for the key cluster's verifier key: %w", err)
	}
	return strings.TrimSpace(string(resp.Data)), nil
}

// otherCluster is the error for a node whose key cluster signs with
// theirs when the client trusts ours (from where).
func (c *Client) otherCluster(theirs, ours, from string) error {
	return spindle.E(spindle.Integrity, fmt.Sprintf(
		"the node's key cluster signs with %s, but this client trusts only %s (from %s); "+
			"if you moved to another cluster on purpose, remove that file or run spin init -force", theirs, ours, from))
}

func newKeyLog(file, vkey string, head []byte) (*keyLog, error) {
	vkey = strings.TrimSpace(vkey)
	checker, err := keyraft.NewChecker(vkey)
	if err != nil {
		return nil, err
	}
	l := &keyLog{file: file, vkey: vkey, checker: checker, versions: map[spindle.UserName]int64{}}
	if len(head) > 0 {
		if err := checker.Trust(head); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// parseKeyLog reads a key log file's content (see above).
func parseKeyLog(file string, data []byte) (*keyLog, error) {
	vkey, versions, head, err := splitKeyLog(data)
	if err != nil {
		return nil, err
	}
	l, err := newKeyLog(file, vkey, head)
	if err != nil {
		return nil, err
	}
	l.versions, l.saved = versions, data
	return l, nil
}

// splitKeyLog splits a key log file's content into its parts, checking
// the versions lines but not the head.
func splitKeyLog(data []byte) (vkey string, versions map[spindle.UserName]int64, head []byte, err error) {
	vkey, rest, _ := strings.Cut(string(data), "\n")
	versions = map[spindle.UserName]int64{}
	for strings.HasPrefix(rest, "version ") {
		var line string
		line, rest, _ = strings.Cut(rest, "\n")
		f := strings.Fields(line)
		if len(f) != 3 {
			return "", nil, nil, fmt.Errorf("bad line %q", line)
		}
		user, err := spindle.CleanUser(spindle.UserName(f[1]))
		if err != nil {
			return "", nil, nil, err
		}
		v, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil || v < 1 {
			return "", nil, nil, fmt.Errorf("bad version in %q", line)
		}
		versions[user] = v
	}
	return strings.TrimSpace(vkey), versions, []byte(rest), nil
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

// save writes the newest head and versions seen to the file, if they
// changed. What another command saved meanwhile is kept where it is newer:
// versions user by user, and the stored tree head if it verifies and is of
// a larger tree than this client's.
func (l *keyLog) save() error {
	if l.saved != nil && bytes.Equal(l.content(nil), l.saved) {
		return nil
	}
	var out []byte
	err := updateState(l.file, func(old []byte) []byte {
		vkey, versions, head, err := splitKeyLog(old)
		if err == nil && vkey == l.vkey {
			l.mu.Lock()
			for u, v := range versions {
				l.versions[u] = max(l.versions[u], v)
			}
			l.mu.Unlock()
		} else {
			head = nil
		}
		out = l.content(head)
		return out
	})
	if err != nil {
		return err
	}
	l.saved = out
	return nil
}

// content returns the key log file's content: the verifier key, the
// versions seen, and the newer of the checker's head and stored, a head
// read from the file, if that verifies.
func (l *keyLog) content(stored []byte) []byte {
	head := l.checker.Head()
	if len(stored) > 0 {
		if t, err := keyraft.VerifyHead(stored, l.checker.Verifiers()); err == nil && t.N > l.checker.Tree().N {
			head = stored
		}
	}
	var b bytes.Buffer
	b.WriteString(l.vkey + "\n")
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

// ConsistencyProof implements keyraft.TreeProver.
func (p prover) ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	resp, err := p.svc.call(ctx, &wire.Request{Method: wire.KeyConsistency, Seq: oldSize, Size: newSize})
	if err != nil {
		return nil, err
	}
	return keyraft.UnmarshalTreeProof(resp.Data)
}

// provedRecord asks the node for name's key record with its proof and
// checks both against the key log.
func (c *Client) provedRecord(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	floor := c.keyLog.floor(name)
	resp, err := c.svc.call(ctx, &wire.Request{Method: wire.KeyProof, User: name})
	if err != nil {
		return nil, err
	}
	p, err := keyraft.UnmarshalProof(resp.Data)
	if err != nil {
		return nil, err
	}
	u, err := c.keyLog.checker.VerifyLookup(ctx, p, name, prover{c.svc})
	if err != nil {
		return nil, err
	}
	if err := c.keyLog.seen(u, floor); err != nil {
		return nil, err
	}
	c.log.Debug("key record proved in the key log", "user", name, "version", c.keyLog.floor(name), "seen", floor)
	return u, nil
}

// provedHistory returns every version of name's key record, oldest
// first, each proved to be in the key log when the client keeps one.
func (c *Client) provedHistory(ctx context.Context, name spindle.UserName) ([]*spindle.User, error) {
	resp, err := c.svc.call(ctx, &wire.Request{Method: wire.KeyProofs, User: name})
	if err != nil {
		return nil, err
	}
	var versions []*spindle.User
	for _, data := range resp.Proofs {
		p, err := keyraft.UnmarshalProof(data)
		if err != nil {
			return nil, err
		}
		var u *spindle.User
		if c.keyLog != nil {
			u, err = c.keyLog.checker.VerifyLookup(ctx, p, name, prover{c.svc})
		} else {
			// Without a key log nothing is proved: the node's word is taken.
			u, err = keyraft.DecodeRecord(p.Record)
		}
		if err != nil {
			return nil, err
		}
		versions = append(versions, u)
	}
	return versions, nil
}
