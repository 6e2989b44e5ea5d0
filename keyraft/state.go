package keyraft

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// state is the replicated state: every accepted record in log order, the
// stored hashes of the Merkle log over them, and each user's versions.
// It is changed only by add, which callers serialise; readers hold the
// fsm's read lock.
type state struct {
	entries []entry                      // Accepted records, in log order; entry i is leaf i.
	hashes  []tlog.Hash                  // Stored hashes of the tree over entries (tlog layout).
	users   map[spindle.UserName][]int64 // Leaf indices of each user's versions, oldest first.
	cfg     keylog.ConfigState           // Built from the config change leaves.
	cfgIdx  []int64                      // Leaf index of each config change: cfgIdx[seq-1].
	sigs    *sigCache                    // Signatures verified here; nil for none. Not replicated.
}

// sigCache remembers record signatures this member verified: the leader
// checks a record when Put receives it and again when Raft applies it, and
// every member verifies the records of a batch in parallel before it
// applies them in order (see fsm.preverify), so each signature is verified
// once on each member. It is a pure memo of spindle.Verify: an entry says
// that the record's signature verifies under the key, which is true
// whatever the state, so it changes no outcome of check. Safe for
// concurrent use.
type sigCache struct {
	mu       sync.Mutex
	cur, old map[[sha256.Size]byte]struct{}
}

// maxSigCache bounds the cache. It keeps two generations of at most half
// as many entries each: when the current one is full it becomes the old
// one and the one before is dropped, so the entries just added, which
// the checks that follow are about to ask for, survive.
const maxSigCache = 4 * MaxBatch

// sigCacheKey is the cache's key for a record, given by its encoding
// (which includes the signature), signed with key.
func sigCacheKey(key spindle.PublicKey, enc []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(appendString(nil, string(key)))
	h.Write(enc)
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

func (c *sigCache) verified(key spindle.PublicKey, enc []byte) bool {
	if c == nil {
		return false
	}
	k := sigCacheKey(key, enc)
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.cur[k]
	if !ok {
		_, ok = c.old[k]
	}
	return ok
}

func (c *sigCache) add(key spindle.PublicKey, enc []byte) {
	if c == nil {
		return
	}
	k := sigCacheKey(key, enc)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil || len(c.cur) >= maxSigCache/2 {
		c.old, c.cur = c.cur, make(map[[sha256.Size]byte]struct{})
	}
	c.cur[k] = struct{}{}
}

type entry struct {
	enc  []byte        // EncodeRecord of rec.
	rec  *spindle.User // Never handed out; callers get clones. Nil for a config change.
	hash tlog.Hash     // tlog.RecordHash(enc).
}

func newState() *state {
	return &state{users: make(map[spindle.UserName][]int64), cfg: keylog.NewConfigState()}
}

// size returns the number of records in the log.
func (s *state) size() int64 { return int64(len(s.entries)) }

// current returns the current entry of name, or nil.
func (s *state) current(name spindle.UserName) *entry {
	idx := s.users[name]
	if len(idx) == 0 {
		return nil
	}
	return &s.entries[idx[len(idx)-1]]
}

// ReadHashes implements tlog.HashReader over the stored hashes.
func (s *state) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		if x < 0 || x >= int64(len(s.hashes)) {
			return nil, fmt.Errorf("stored hash %d out of range (have %d)", x, len(s.hashes))
		}
		out[i] = s.hashes[x]
	}
	return out, nil
}

// treeHash returns the hash of the tree of the first n records.
func (s *state) treeHash(n int64) (tlog.Hash, error) {
	return tlog.TreeHash(n, s)
}

// check decides whether u may be applied to the state, under the open
// policy. It reports dup when u is exactly the current record (a repeated
// request, accepted without change). With verify false, signatures are not
// checked: for replaying records that were checked when first accepted.
// check is deterministic: the same state and record always give the same
// answer, on every member.
//
// The rules: a new name needs version 1 and is granted to a record signed
// by its own key, except that a +suffix user is registered by its base
// user, whose record must exist. An existing record is replaced only by
// version+1 with Prev the hash of the current record, signed by the current
// key of the record or of its base user. Kinds: Invalid (malformed, stale
// version, wrong Prev), NotExist (update of an unregistered name), Exist (a
// version 1 for a registered name), Permission (the signature does not
// verify or the signer has no authority).
//
// A new name is also subject to the namespace policy: under PolicyDomain
// it needs grant, the countersignature of its domain's admin key.
func (s *state) check(u *spindle.User, grant spindle.Signature, verify bool) (dup bool, err error) {
	if err := keylog.CheckRecord(u); err != nil {
		return false, err
	}
	return s.checkFormed(u, keylog.EncodeRecord(u), grant, verify)
}

// checkFormed is check for a record u that checkRecord has passed (as
// every record DecodeRecord returns has); enc is EncodeRecord(u).
func (s *state) checkFormed(u *spindle.User, enc []byte, grant spindle.Signature, verify bool) (dup bool, err error) {
	cur := s.current(u.Name)
	base := spindle.BaseUser(u.Name)
	if cur == nil {
		if u.Version != 1 {
			return false, spindle.E(spindle.NotExist, u.Name, fmt.Sprintf("update to version %d of a user that is not registered", u.Version))
		}
		if base != u.Name && u.SignedBy != base {
			return false, spindle.E(spindle.Permission, u.Name, fmt.Sprintf("a +suffix user is registered by its base user %s", base))
		}
		if base == u.Name {
			if err := s.checkGrant(u, grant, verify); err != nil {
				return false, err
			}
		}
	} else {
		if bytes.Equal(enc, cur.enc) {
			return true, nil
		}
		if u.Version == 1 {
			return false, spindle.E(spindle.Exist, u.Name, fmt.Sprintf("user is registered (version %d); an update needs version %d", cur.rec.Version, cur.rec.Version+1))
		}
		if u.Version != cur.rec.Version+1 {
			return false, spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("version %d does not follow the current version %d", u.Version, cur.rec.Version))
		}
		if !bytes.Equal(u.Prev, cur.hash[:]) {
			return false, spindle.E(spindle.Invalid, u.Name, "previous-record hash is not the hash of the current record")
		}
		// A rotation's cutoff never moves back: that would make
		// entries signed with a replaced key valid again.
		if u.DirSeq < cur.rec.DirSeq {
			return false, spindle.E(spindle.Invalid, u.Name, fmt.Sprintf("dir sequence %d is below the current record's %d", u.DirSeq, cur.rec.DirSeq))
		}
	}
	signerKey, ok := s.signerOf(u)
	if !ok {
		return false, spindle.E(spindle.Permission, u.Name, fmt.Sprintf("base user %s is not registered", base))
	}
	if !verify {
		return false, nil
	}
	if s.sigs.verified(signerKey, enc) {
		return false, nil
	}
	if err := spindle.Verify(signerKey, keylog.SigningDigest(u), u.Signature); err != nil {
		return false, spindle.E(spindle.Permission, u.Name, fmt.Errorf("signature by %s: %w", u.SignedBy, errors.Unwrap(err)))
	}
	s.sigs.add(signerKey, enc)
	return false, nil
}

// signerOf returns the key whose signature on u the rules require in this
// state: the current key of the base user for a record signed by its base
// user, else the current key of the record being replaced, else (a new
// name) the record's own key, whose possession the signature proves. It
// reports false when a base user who signs is not registered.
func (s *state) signerOf(u *spindle.User) (spindle.PublicKey, bool) {
	if u.SignedBy != u.Name {
		b := s.current(spindle.BaseUser(u.Name))
		if b == nil {
			return "", false
		}
		return b.rec.PublicKey, true
	}
	if cur := s.current(u.Name); cur != nil {
		return cur.rec.PublicKey, true // The old key authorises the change.
	}
	return u.PublicKey, true
}

// add appends a checked record to the log; enc is EncodeRecord(u). Neither
// may be changed afterwards.
func (s *state) add(u *spindle.User, enc []byte) error {
	n := s.size()
	if err := s.appendLeaf(entry{enc: enc, rec: u}); err != nil {
		return spindle.E(u.Name, err)
	}
	s.users[u.Name] = append(s.users[u.Name], n)
	return nil
}

// addChange appends a checked config change to the log and applies it.
func (s *state) addChange(ch *keylog.Change) error {
	enc := keylog.EncodeChange(ch)
	if err := s.appendLeaf(entry{enc: enc}); err != nil {
		return err
	}
	s.cfg.Apply(ch, enc)
	s.cfgIdx = append(s.cfgIdx, s.size()-1)
	return nil
}

// seqAt returns the configuration's sequence number in the tree of the
// first n leaves: the number of config changes among them.
func (s *state) seqAt(n int64) int64 {
	i, _ := slices.BinarySearch(s.cfgIdx, n)
	return int64(i)
}

func (s *state) appendLeaf(e entry) error {
	hs, err := tlog.StoredHashes(s.size(), e.enc, s)
	if err != nil {
		return spindle.E(spindle.Internal, fmt.Errorf("extend transparency log: %w", err))
	}
	e.hash = tlog.RecordHash(e.enc)
	s.entries = append(s.entries, e)
	s.hashes = append(s.hashes, hs...)
	return nil
}

// checkChange decides whether ch may be applied to the state, as check does
// for records: dup when ch is the last change applied. Kinds: Invalid
// (malformed, a sequence that does not follow, or removing the last
// operator), Permission (not signed by a current operator, or a bad
// signature), NotExist (removing a key that is no operator's).
func (s *state) checkChange(ch *keylog.Change, verify bool) (dup bool, err error) {
	return s.cfg.Check(ch, verify)
}

// checkGrant applies the namespace policy to a new registration of u,
// whose other checks passed. Replaying a snapshot (verify false) skips it:
// the grant was checked when the record was accepted, and the log keeps
// records, not grants.
func (s *state) checkGrant(u *spindle.User, grant spindle.Signature, verify bool) error {
	if !verify {
		return nil
	}
	return s.cfg.CheckGrant(u, grant)
}
