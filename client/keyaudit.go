package client

import (
	"bytes"
	"context"
	"fmt"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
)

// A KeyVersion is one version of a user's key record, as a key audit
// found it in the key cluster's log.
type KeyVersion struct {
	User  *spindle.User
	Index int64 // Leaf index of the record in the log.
	// Problem says why the version is not one its user's previous key
	// (or, for a +suffix user, the base user's key) made; empty if it is.
	Problem string
}

// A KeyAuditReport is what a key audit found: every version of a user's
// record, oldest first, each proved to be in the key cluster's log.
type KeyAuditReport struct {
	User     spindle.UserName
	Versions []KeyVersion
}

// Problems returns the versions that have a problem.
func (r *KeyAuditReport) Problems() []KeyVersion {
	var out []KeyVersion
	for _, v := range r.Versions {
		if v.Problem != "" {
			out = append(out, v)
		}
	}
	return out
}

// KeyAudit replays every version of name's key record from the key
// cluster's log: each comes with a proof that it is in the log, checked
// against the key log as every lookup is (a head signed by the cluster,
// consistent with every head seen before), and the history must reach the
// newest version this client has seen and the current record. Then each
// version is checked against the one before: its number follows, it comes
// later in the log, it links to it by hash, and it is signed by the key
// that version names (the first by its own key); a +suffix user's
// versions signed by the base user are checked with the keys the base
// user's proved history shows. A version that fails is reported in the
// KeyAuditReport, not as an error: it is a record the key cluster accepted
// without its owner's say, which only a cluster whose members are all
// dishonest or broken can do. A proof that does not verify is an Integrity
// error. KeyAudit needs a key log (Config.KeyLog).
func (c *Client) KeyAudit(ctx context.Context, name spindle.UserName) (*KeyAuditReport, error) {
	const op spindle.Op = "client.KeyAudit"
	name, err := spindle.CleanUser(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if c.keyLog == nil {
		return nil, spindle.E(op, name, spindle.Invalid, "a key audit needs a key log, to check the records' proofs")
	}
	floor := c.keyLog.floor(name)
	cur, err := c.lookupUser(ctx, name, true)
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	resp, err := call[wire.KeyProofsRequest, wire.KeyProofsResponse](ctx, c.svc, wire.KeyProofs, "", &wire.KeyProofsRequest{User: name})
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	rep := &KeyAuditReport{User: name}
	for i, data := range resp.Proofs {
		p, err := keylog.UnmarshalProof(data)
		if err != nil {
			return nil, spindle.E(op, name, spindle.Integrity, fmt.Errorf("version %d: %w", i+1, err))
		}
		u, err := c.keyLog.chk().VerifyLookup(ctx, p, name, prover{c.svc})
		if err != nil {
			return nil, spindle.E(op, name, fmt.Errorf("version %d: %w", i+1, c.keepKeyFork(err)))
		}
		rep.Versions = append(rep.Versions, KeyVersion{User: u, Index: p.Index})
	}
	n := int64(len(rep.Versions))
	switch {
	case n == 0:
		return nil, spindle.E(op, name, spindle.Integrity, "the node answered with an empty history")
	case n < floor || n < cur.Version:
		return nil, spindle.E(op, name, spindle.Integrity, fmt.Sprintf(
			"the node shows %d versions of the record; this client has seen version %d and the current record is version %d", n, floor, cur.Version))
	}
	var baseKeys []spindle.PublicKey // Of the base user of a +suffix user, once looked up.
	err = checkVersions(rep.Versions, func(base spindle.UserName) ([]spindle.PublicKey, error) {
		if baseKeys == nil {
			keys, err := c.heldKeys(ctx, base)
			if err != nil {
				return nil, fmt.Errorf("keys of base user %s: %w", base, err)
			}
			baseKeys = keys
		}
		return baseKeys, nil
	})
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	if last := rep.Versions[n-1].User; last.Version == cur.Version && !bytes.Equal(keylog.RecordHash(last), keylog.RecordHash(cur)) {
		return nil, spindle.E(op, name, spindle.Integrity, fmt.Sprintf("version %d of the history is not the current record", last.Version))
	}
	return rep, nil
}

// checkVersions checks each of the versions of a record, proved in the
// log, against the one before it, and sets its Problem if it is not one
// the user (or its base user, whose keys baseKeys returns) made: its number
// follows, it comes later in the log, it links to the one before by hash,
// and it is signed by that one's key (the first by its own key). It
// returns an error only if baseKeys does.
func checkVersions(versions []KeyVersion, baseKeys func(spindle.UserName) ([]spindle.PublicKey, error)) error {
	for i := range versions {
		v := &versions[i]
		u := v.User
		var prev *spindle.User
		if i > 0 {
			prev = versions[i-1].User
		}
		switch {
		case u.Version != int64(i+1):
			v.Problem = fmt.Sprintf("stands at place %d of the history", i+1)
		case prev != nil && v.Index <= versions[i-1].Index:
			v.Problem = fmt.Sprintf("comes before version %d in the log", prev.Version)
		case prev != nil && !bytes.Equal(u.Prev, keylog.RecordHash(prev)):
			v.Problem = fmt.Sprintf("does not link to version %d", prev.Version)
		case u.SignedBy == u.Name:
			key := u.PublicKey
			if prev != nil {
				key = prev.PublicKey
			}
			if spindle.Verify(key, keylog.SigningDigest(u), u.Signature) != nil {
				if prev != nil {
					v.Problem = fmt.Sprintf("not signed by the key of version %d", prev.Version)
				} else {
					v.Problem = "not signed by its own key"
				}
			}
		case u.SignedBy == spindle.BaseUser(u.Name):
			keys, err := baseKeys(u.SignedBy)
			if err != nil {
				return err
			}
			if !signedByAny(keys, u) {
				v.Problem = fmt.Sprintf("not signed by any key base user %s has held", u.SignedBy)
			}
		default:
			v.Problem = fmt.Sprintf("signed by %s, who may not change it", u.SignedBy)
		}
	}
	return nil
}

// heldKeys returns every key name's proved history shows.
func (c *Client) heldKeys(ctx context.Context, name spindle.UserName) ([]spindle.PublicKey, error) {
	versions, err := c.provedHistory(ctx, name)
	if err != nil {
		return nil, err
	}
	var keys []spindle.PublicKey
	for _, u := range versions {
		keys = append(keys, u.PublicKey)
	}
	return keys, nil
}

// signedByAny reports whether u's signature verifies with one of keys.
func signedByAny(keys []spindle.PublicKey, u *spindle.User) bool {
	for _, k := range keys {
		if spindle.Verify(k, keylog.SigningDigest(u), u.Signature) == nil {
			return true
		}
	}
	return false
}

// A KeyHead is a signed tree head of the key cluster's log.
type KeyHead struct {
	Tree    tlog.Tree
	Note    []byte   // The signed note, as the cluster's member signed it.
	Signers []string // Names of the keys whose signatures verified.
}

// KeyHead returns the key cluster's current signed tree head, as the node
// serves it with the proof of the client's own record, checked as every
// head is: signed by the cluster and consistent with every head this
// client has seen before. It needs a key log (Config.KeyLog).
func (c *Client) KeyHead(ctx context.Context) (*KeyHead, error) {
	const op spindle.Op = "client.KeyHead"
	if c.keyLog == nil {
		return nil, spindle.E(op, spindle.Invalid, "no key log: tree heads are not checked")
	}
	if _, err := c.provedRecord(ctx, c.user); err != nil {
		return nil, spindle.E(op, c.user, err)
	}
	head := c.keyLog.chk().Head()
	t := c.keyLog.chk().Tree()
	n, err := note.Open(head, c.keyLog.chk().Verifiers())
	if err != nil {
		return nil, spindle.E(op, spindle.Integrity, fmt.Errorf("tree head: %v", err))
	}
	h := &KeyHead{Tree: t, Note: head}
	for _, s := range n.Sigs {
		h.Signers = append(h.Signers, s.Name)
	}
	return h, nil
}
