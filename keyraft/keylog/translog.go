package keylog

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// headHeader starts the text of a signed tree head, so that a head of this
// log is never mistaken for one of another log (such as the Go checksum
// database, whose heads have the same shape).
const headHeader = "spindle.dev key log\n"

// Limits on the encodings of proofs and heads.
const (
	maxProofHashes = 64       // A tree of 2^63 leaves needs at most 63.
	maxHeadSize    = 16 << 10 // Bytes in a signed tree head.
)

// A HeadInfo is what a tree head states: the tree, and the sequence
// number of the cluster's configuration in that tree (the number of
// configuration changes among its leaves), which says whose signatures
// the head needs (see [VerifyQuorum]).
type HeadInfo struct {
	tlog.Tree
	Config int64
}

// FormatHead returns the text of tree head h, which the members sign as a
// note (see golang.org/x/mod/sumdb/note):
//
//	spindle.dev key log
//	<number of leaves>
//	<base64 of the tree hash>
//	config <configuration sequence number>
func FormatHead(h HeadInfo) []byte {
	return fmt.Appendf(nil, "%s%d\n%s\nconfig %d\n", headHeader, h.N, h.Hash, h.Config)
}

// parseHead parses the text written by FormatHead, strictly.
func parseHead(text string) (HeadInfo, error) {
	rest, ok := strings.CutPrefix(text, headHeader)
	if !ok {
		return HeadInfo{}, errors.New("not a spindle.dev key log head")
	}
	lines := strings.SplitAfter(rest, "\n")
	if len(lines) != 4 || lines[3] != "" {
		return HeadInfo{}, errors.New("malformed tree head")
	}
	n, err := parseCount(strings.TrimSuffix(lines[0], "\n"))
	if err != nil {
		return HeadInfo{}, errors.New("malformed tree size in head")
	}
	h, err := tlog.ParseHash(strings.TrimSuffix(lines[1], "\n"))
	if err != nil {
		return HeadInfo{}, errors.New("malformed tree hash in head")
	}
	cfgText, ok := strings.CutPrefix(strings.TrimSuffix(lines[2], "\n"), "config ")
	if !ok {
		return HeadInfo{}, errors.New("tree head does not name its configuration")
	}
	seq, err := parseCount(cfgText)
	if err != nil || seq > n {
		return HeadInfo{}, errors.New("malformed configuration sequence in head")
	}
	hi := HeadInfo{Tree: tlog.Tree{N: n, Hash: h}, Config: seq}
	if !bytes.Equal(FormatHead(hi), []byte(text)) {
		return HeadInfo{}, errors.New("tree head is not in canonical form")
	}
	return hi, nil
}

// parseCount parses a non-negative decimal number in canonical form.
func parseCount(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != s {
		return 0, fmt.Errorf("bad count %q", s)
	}
	return n, nil
}

// ParseHeadText parses the text of a tree head, as [FormatHead] writes
// it, strictly: text in any other form is Invalid. It is safe on untrusted
// input.
func ParseHeadText(text []byte) (HeadInfo, error) {
	const op spindle.Op = "keylog.ParseHeadText"
	if len(text) > maxHeadSize {
		return HeadInfo{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("tree head of %d bytes", len(text)))
	}
	hi, err := parseHead(string(text))
	if err != nil {
		return HeadInfo{}, spindle.E(op, spindle.Invalid, err)
	}
	return hi, nil
}

// NewVerifiers returns the verifiers of the given note verifier keys (as
// returned by [spindle.dev/keyraft.Cluster.VerifierKey]), for checking
// tree heads.
func NewVerifiers(vkeys ...string) (note.Verifiers, error) {
	const op spindle.Op = "keylog.NewVerifiers"
	var list []note.Verifier
	for _, k := range vkeys {
		v, err := note.NewVerifier(k)
		if err != nil {
			return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("verifier key %q: %v", k, err))
		}
		list = append(list, v)
	}
	return note.VerifierList(list...), nil
}

// VerifyHead checks that a signed tree head carries a valid signature by one
// of the verifiers and returns the tree it describes. A head that is not
// signed by a known key, or whose signature is bad, is Integrity; one that
// is malformed is Invalid.
func VerifyHead(head []byte, verifiers note.Verifiers) (tlog.Tree, error) {
	const op spindle.Op = "keylog.VerifyHead"
	if len(head) > maxHeadSize {
		return tlog.Tree{}, spindle.E(op, spindle.Invalid, fmt.Sprintf("tree head of %d bytes", len(head)))
	}
	n, err := note.Open(head, verifiers)
	if err != nil {
		var unverified *note.UnverifiedNoteError
		var invalid *note.InvalidSignatureError
		if errors.As(err, &unverified) || errors.As(err, &invalid) {
			return tlog.Tree{}, spindle.E(op, spindle.Integrity, fmt.Errorf("tree head: %v", err))
		}
		return tlog.Tree{}, spindle.E(op, spindle.Invalid, fmt.Errorf("tree head: %v", err))
	}
	h, err := parseHead(n.Text)
	if err != nil {
		return tlog.Tree{}, spindle.E(op, spindle.Invalid, err)
	}
	return h.Tree, nil
}

// A Proof shows that a key record is in the cluster's transparency log: the
// record, its leaf index, the Merkle inclusion proof, and the signed tree
// head it is proved against. [VerifyLookup] checks it.
type Proof struct {
	Record    []byte           // EncodeRecord of the record.
	Index     int64            // Leaf index of the record in the log.
	Inclusion tlog.RecordProof // Proof that leaf Index is in the tree of the head.
	Head      []byte           // Signed tree head: a note, see VerifyHead.
}

// proofMagic starts an encoded Proof.
const proofMagic = "SPKP\x01"

// MarshalBinary encodes the proof for travel between peers.
func (p *Proof) MarshalBinary() ([]byte, error) {
	b := []byte(proofMagic)
	b = appendString(b, string(p.Record))
	b = binary.BigEndian.AppendUint64(b, uint64(p.Index))
	b = appendHashes(b, p.Inclusion)
	b = appendString(b, string(p.Head))
	return b, nil
}

// UnmarshalProof decodes a proof encoded by [Proof.MarshalBinary]. It checks
// the shape of the encoding only; [VerifyLookup] checks the proof. Bytes
// that are not such an encoding are Invalid. It is safe on untrusted input.
func UnmarshalProof(data []byte) (*Proof, error) {
	const op spindle.Op = "keylog.UnmarshalProof"
	if !bytes.HasPrefix(data, []byte(proofMagic)) {
		return nil, spindle.E(op, spindle.Invalid, "malformed proof: bad magic")
	}
	d := decoder{data: data[len(proofMagic):]}
	p := new(Proof)
	p.Record = bytes.Clone(d.bytes(MaxRecordSize))
	idx := d.uint64()
	p.Inclusion = d.hashes()
	p.Head = bytes.Clone(d.bytes(maxHeadSize))
	if d.err == nil && len(d.data) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err == nil && idx > math.MaxInt64 {
		d.err = errors.New("index out of range")
	}
	if d.err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed proof: %w", d.err))
	}
	p.Index = int64(idx)
	return p, nil
}

// MarshalProofs encodes proofs for travel between peers, each as
// [Proof.MarshalBinary] does.
func MarshalProofs(ps []*Proof) ([][]byte, error) {
	out := make([][]byte, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = p.MarshalBinary(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// UnmarshalProofs decodes proofs encoded by [MarshalProofs], as
// [UnmarshalProof] does each. It is safe on untrusted input.
func UnmarshalProofs(data [][]byte) ([]*Proof, error) {
	ps := make([]*Proof, len(data))
	for i, d := range data {
		var err error
		if ps[i], err = UnmarshalProof(d); err != nil {
			return nil, err
		}
	}
	return ps, nil
}

// MarshalTreeProof encodes a consistency proof for travel between peers.
func MarshalTreeProof(p tlog.TreeProof) []byte {
	return appendHashes(nil, p)
}

// UnmarshalTreeProof decodes a proof encoded by [MarshalTreeProof]. Bytes
// that are not such an encoding are Invalid.
func UnmarshalTreeProof(data []byte) (tlog.TreeProof, error) {
	d := decoder{data: data}
	p := d.hashes()
	if d.err == nil && len(d.data) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return nil, spindle.E(spindle.Op("keylog.UnmarshalTreeProof"), spindle.Invalid, fmt.Errorf("malformed tree proof: %w", d.err))
	}
	return tlog.TreeProof(p), nil
}

func appendHashes(b []byte, hs []tlog.Hash) []byte {
	b = binary.AppendUvarint(b, uint64(len(hs)))
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}

func (d *decoder) hashes() []tlog.Hash {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > maxProofHashes {
		d.fail(fmt.Errorf("%d hashes in a proof, more than %d", n, maxProofHashes))
		return nil
	}
	if uint64(len(d.data)) < n*tlog.HashSize {
		d.fail(errors.New("short data"))
		return nil
	}
	hs := make([]tlog.Hash, n)
	for i := range hs {
		copy(hs[i][:], d.data)
		d.data = d.data[tlog.HashSize:]
	}
	return hs
}

// VerifyLookup checks a proof that name's record is in the log: the head is
// signed by one of the verifiers, the inclusion proof leads from the record
// to the head's tree hash, and the record is a well-formed record of name.
// It returns the record and the tree it was proved against. A proof that
// does not verify is Integrity; one that is malformed is Invalid.
//
// VerifyLookup proves only that the record was accepted by the cluster, not
// that it is the newest version: a member may serve stale records. Use a
// [Checker] to make sure the log seen is never rewritten.
func VerifyLookup(p *Proof, name spindle.UserName, verifiers note.Verifiers) (*spindle.User, tlog.Tree, error) {
	const op spindle.Op = "keylog.VerifyLookup"
	if p == nil {
		return nil, tlog.Tree{}, spindle.E(op, spindle.Invalid, name, "nil proof")
	}
	t, err := VerifyHead(p.Head, verifiers)
	if err != nil {
		return nil, tlog.Tree{}, spindle.E(op, name, err)
	}
	u, err := verifyInTree(p, name, t)
	if err != nil {
		return nil, tlog.Tree{}, err
	}
	return u, t, nil
}

// verifyInTree checks the rest of a lookup proof whose head verified as
// the tree t: the inclusion proof and the record.
func verifyInTree(p *Proof, name spindle.UserName, t tlog.Tree) (*spindle.User, error) {
	const op spindle.Op = "keylog.VerifyLookup"
	if p.Index < 0 || p.Index >= t.N {
		return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("record index %d outside the tree of %d records", p.Index, t.N))
	}
	if err := tlog.CheckRecord(p.Inclusion, t.N, t.Hash, p.Index, tlog.RecordHash(p.Record)); err != nil {
		return nil, spindle.E(op, spindle.Integrity, name, fmt.Errorf("record %d is not in the tree of %d records: %v", p.Index, t.N, err))
	}
	u, err := DecodeRecord(p.Record)
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	if u.Name != name {
		return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("proof is for the record of %s", u.Name))
	}
	return u, nil
}

// A TreeProver proves that a smaller tree of the log is a prefix of a larger
// one. A member ([spindle.dev/keyraft.Cluster]) implements it; so can a
// client reaching a member remotely.
type TreeProver interface {
	// ConsistencyProof returns the proof that the log's tree of newSize
	// records contains the tree of oldSize records as a prefix.
	ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error)
}

// A Checker remembers the newest tree head a client has seen and accepts
// another head only with a proof that one of the two trees is a prefix of
// the other. So a cluster that rewrites history, or shows different
// clients different logs, is caught as soon as a client that saw one
// version sees the other. A Checker is safe for concurrent use.
type Checker struct {
	verifiers note.Verifiers    // For a checker of fixed keys (NewChecker).
	cfg       *ConfigLog        // For a following checker (NewFollowingChecker); guarded by mu, replaced under upd.
	boot      map[string]string // For a following checker: the member first trusted, by ID, or nil.
	witness   bool              // A witness's checker, which needs no witnesses' cosignatures (NewWitnessChecker).

	upd  sync.Mutex // Held across an update, so each is checked against the newest head.
	mu   sync.Mutex // Guards tree and head.
	tree tlog.Tree  // The newest tree seen; N == 0 before any.
	head []byte     // Its signed head.
}

// NewChecker returns a checker that trusts tree heads signed by any of the
// given note verifier keys. It has seen no head yet.
func NewChecker(vkeys ...string) (*Checker, error) {
	v, err := NewVerifiers(vkeys...)
	if err != nil {
		return nil, err
	}
	return &Checker{verifiers: v}, nil
}

// Verifiers returns the verifiers the checker trusts: for a following
// checker, those of the members of the newest configuration it knows (or
// the member it first trusted, while the configuration records none).
func (c *Checker) Verifiers() note.Verifiers {
	if c.cfg != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return verifiersOf(c.signers(c.cfg, c.cfg.Seq()))
	}
	return c.verifiers
}

// verify checks head's signatures as the checker's kind demands and
// returns its tree and, for a following checker, the config log extended
// up to the head's configuration. The caller holds c.upd.
func (c *Checker) verify(ctx context.Context, head []byte, prover TreeProver) (tlog.Tree, *ConfigLog, error) {
	return c.verifyWith(ctx, head, prover, !c.witness)
}

// verifyWith is verify, checking the witnesses' cosignatures the
// configuration needs only if witnesses is set.
func (c *Checker) verifyWith(ctx context.Context, head []byte, prover TreeProver, witnesses bool) (tlog.Tree, *ConfigLog, error) {
	if c.cfg != nil {
		return c.verifyFollowing(ctx, head, prover, witnesses)
	}
	t, err := VerifyHead(head, c.verifiers)
	return t, nil, err
}

// Head returns the newest signed tree head the checker has accepted, or nil,
// for the client to store and hand to [Checker.Trust] in a later run.
func (c *Checker) Head() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.head)
}

// Tree returns the newest tree the checker has accepted.
func (c *Checker) Tree() tlog.Tree {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tree
}

// Trust sets the newest head seen, as stored from an earlier run, before
// the checker has accepted any other. The head's signature is checked.
//
// A following checker checks it against the configuration it was made
// with, which must hold every change in the head's tree.
func (c *Checker) Trust(head []byte) error {
	const op spindle.Op = "keylog.Checker.Trust"
	c.upd.Lock()
	defer c.upd.Unlock()
	t, _, err := c.verify(context.Background(), head, nil)
	if err != nil {
		return spindle.E(op, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head != nil {
		return spindle.E(op, spindle.Invalid, "checker has already seen a tree head")
	}
	c.tree, c.head = t, bytes.Clone(head)
	return nil
}

// Update accepts a signed tree head if it is consistent with the newest one
// seen, asking prover for a consistency proof when the sizes differ, and
// remembers it if it is newer. It returns the head's tree. The prover is
// needed only when the sizes differ. Two different
// trees of one size, or a failed consistency proof, are Integrity errors
// whose message shows both heads: evidence that the log was rewritten.
//
// A following checker also asks prover, which must then be a
// [ConfigProver], for the configuration changes up to the one the head
// names, when that is newer than the newest it knows.
func (c *Checker) Update(ctx context.Context, head []byte, prover TreeProver) (tlog.Tree, error) {
	const op spindle.Op = "keylog.Checker.Update"
	t, err := c.update(ctx, head, prover)
	if err != nil {
		return tlog.Tree{}, spindle.E(op, err)
	}
	return t, nil
}

// update verifies head and checks it against the newest head seen.
func (c *Checker) update(ctx context.Context, head []byte, prover TreeProver) (tlog.Tree, error) {
	c.upd.Lock()
	defer c.upd.Unlock()
	t, cl, err := c.verify(ctx, head, prover)
	if err != nil {
		return tlog.Tree{}, err
	}
	if err := c.consistent(ctx, t, head, prover); err != nil {
		return tlog.Tree{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.head == nil || t.N > c.tree.N {
		c.tree, c.head = t, bytes.Clone(head)
	}
	if cl != nil && cl.Seq() > c.cfg.Seq() {
		c.cfg = cl
	}
	return t, nil
}

// consistent checks the verified head of tree t against the newest head
// seen. The caller holds c.upd.
func (c *Checker) consistent(ctx context.Context, t tlog.Tree, head []byte, prover TreeProver) error {
	c.mu.Lock()
	old, oldHead := c.tree, c.head
	c.mu.Unlock()
	evidence := func(why string, p tlog.TreeProof) error {
		return forkOf(ctx, why, old, oldHead, t, head, p, prover)
	}
	switch {
	case oldHead == nil || old.N == 0:
		// First head seen, or the empty log: anything extends it.
	case t.N == old.N:
		if t.Hash != old.Hash {
			return evidence(fmt.Sprintf("two different trees of %d records", t.N), nil)
		}
		return nil
	case t.N == 0:
		return nil // The empty log is a prefix of every log: a member that has not caught up.
	case prover == nil:
		return spindle.E(spindle.Invalid, fmt.Sprintf("head of %d records differs in size from the %d seen, and no prover to check it", t.N, old.N))
	case t.N > old.N:
		p, err := prover.ConsistencyProof(ctx, old.N, t.N)
		if err != nil {
			return fmt.Errorf("consistency proof from %d to %d records: %w", old.N, t.N, err)
		}
		if err := tlog.CheckTree(p, t.N, t.Hash, old.N, old.Hash); err != nil {
			return evidence(fmt.Sprintf("tree of %d records does not extend the one of %d: %v", t.N, old.N, err), p)
		}
	default: // An older tree than the newest seen: it must be a prefix of it.
		p, err := prover.ConsistencyProof(ctx, t.N, old.N)
		if err != nil {
			// A member that lags cannot prove a tree it does not hold yet.
			return spindle.E(spindle.Transient, fmt.Errorf("head of %d records is older than the %d seen, and no consistency proof: %w", t.N, old.N, err))
		}
		if err := tlog.CheckTree(p, old.N, old.Hash, t.N, t.Hash); err != nil {
			return evidence(fmt.Sprintf("tree of %d records is not a prefix of the one of %d: %v", t.N, old.N, err), nil)
		}
	}
	return nil
}

// VerifyLookup checks a lookup proof as the function [VerifyLookup] does and
// then checks its head against the newest head seen, as [Checker.Update]
// does. It returns the verified record.
func (c *Checker) VerifyLookup(ctx context.Context, p *Proof, name spindle.UserName, prover TreeProver) (*spindle.User, error) {
	const op spindle.Op = "keylog.Checker.VerifyLookup"
	if p != nil {
		// Most lookups are proved against the newest head seen, whose
		// signature was checked when it was accepted: the same bytes
		// need no second check.
		c.mu.Lock()
		known, t := c.head != nil && bytes.Equal(p.Head, c.head), c.tree
		c.mu.Unlock()
		if known {
			u, err := verifyInTree(p, name, t)
			if err != nil {
				return nil, spindle.E(op, err)
			}
			return u, nil
		}
	}
	if p == nil {
		return nil, spindle.E(op, spindle.Invalid, name, "nil proof")
	}
	t, err := c.update(ctx, p.Head, prover)
	if err != nil {
		return nil, spindle.E(op, name, err)
	}
	u, err := verifyInTree(p, name, t)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return u, nil
}

// VerifyHistory checks the history of name's record as returned by
// [spindle.dev/keyraft.Cluster.History], for the owner's audit: every
// proof verifies against one and the same signed head, the versions run
// 1, 2, … in log order, each Prev is the hash of the version before, and
// each change made by the user itself is signed by the key of the version
// before (the first by its own key). Changes signed by a base user are
// checked for their link but not their signature, which needs the base
// user's history. It returns the records, oldest first; the owner then
// confirms that each is one they made.
func VerifyHistory(proofs []*Proof, name spindle.UserName, verifiers note.Verifiers) ([]*spindle.User, error) {
	const op spindle.Op = "keylog.VerifyHistory"
	if len(proofs) == 0 {
		return nil, spindle.E(op, spindle.NotExist, name, "empty history")
	}
	var out []*spindle.User
	for i, p := range proofs {
		if p == nil {
			return nil, spindle.E(op, spindle.Invalid, name, "nil proof")
		}
		if !bytes.Equal(p.Head, proofs[0].Head) {
			return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("version %d is proved against another tree head", i+1))
		}
		u, _, err := VerifyLookup(p, name, verifiers)
		if err != nil {
			return nil, spindle.E(op, err)
		}
		if u.Version != int64(i+1) {
			return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("history entry %d is version %d", i+1, u.Version))
		}
		if i > 0 && p.Index <= proofs[i-1].Index {
			return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("version %d precedes version %d in the log", i+1, i))
		}
		key := u.PublicKey
		if i > 0 {
			prev := out[i-1]
			if !bytes.Equal(u.Prev, RecordHash(prev)) {
				return nil, spindle.E(op, spindle.Integrity, name, fmt.Sprintf("version %d does not link to version %d", i+1, i))
			}
			key = prev.PublicKey
		}
		if u.SignedBy == u.Name {
			if err := spindle.Verify(key, SigningDigest(u), u.Signature); err != nil {
				return nil, spindle.E(op, spindle.Integrity, name, fmt.Errorf("version %d: %w", i+1, err))
			}
		}
		out = append(out, u)
	}
	return out, nil
}

// VerifierKeyOf returns the note verifier key of a note signer key, which
// has the form "PRIVATE+KEY+<name>+<hash>+<base64 of 0x01 and the Ed25519
// seed>" (as note.GenerateKey makes it).
func VerifierKeyOf(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5)
	if len(parts) != 5 {
		return "", errors.New("malformed signer key")
	}
	key, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(key) != 1+ed25519.SeedSize || key[0] != 1 {
		return "", errors.New("signer key is not an Ed25519 key")
	}
	return note.NewEd25519VerifierKey(parts[2], ed25519.NewKeyFromSeed(key[1:]).Public().(ed25519.PublicKey))
}

// MemberKeyName returns the name of the note key with which member id
// signs tree heads: its verifier key, which the configuration records,
// names the member.
func MemberKeyName(id string) string { return "spindle-keyraft/" + id }
