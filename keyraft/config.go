package keyraft

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// Cluster configuration. Besides user records, the transparency log holds
// the cluster's configuration changes, each a [Change] signed by an
// operator (or, for a member, by the node operator who vouches for it):
// who the operators are, which node operators' keys may join, the members
// and their verifier keys, the namespace policy, and each domain's admin
// key. Changes are leaves of the same Merkle log as records (they start
// with changeMagic, records with recordMagic), so a client that audits the
// log sees every change of the rules; a snapshot holds them as it holds
// records, and replaying it rebuilds the configuration.

// Namespace policies.
const (
	// PolicyOpen grants a new name to the first record that proves
	// possession of its key.
	PolicyOpen = "open"
	// PolicyDomain grants a new name under a domain only with the
	// countersignature of the domain's admin key (see [GrantDigest]),
	// which operators register with a ChangeDomain.
	PolicyDomain = "domain"
)

// Kinds of configuration change.
const (
	// ChangeInit makes Key the first operator of a cluster that has none.
	// It is signed by Key itself. Its Arg, if set, is the note verifier
	// key of the cluster's first member, recorded as a member vouched for
	// by Key.
	ChangeInit = "init"
	// ChangeAddOperator and ChangeRemoveOperator add and remove Key as an
	// operator. The last operator cannot be removed.
	ChangeAddOperator    = "add-operator"
	ChangeRemoveOperator = "remove-operator"
	// ChangeAdmit lets a node whose operator holds Key join the cluster
	// (see [Cluster.Join]); ChangeUnadmit withdraws that.
	ChangeAdmit   = "admit"
	ChangeUnadmit = "unadmit"
	// ChangePolicy sets the namespace policy to Arg, PolicyOpen or
	// PolicyDomain.
	ChangePolicy = "policy"
	// ChangeDomain registers Key as the admin key of domain Arg, replacing
	// any before it.
	ChangeDomain = "domain"
	// ChangeUndomain removes the admin key of domain Arg (a key lost or
	// no longer trusted): under PolicyDomain no new name under it is
	// granted until another is added. It names no Key.
	ChangeUndomain = "undomain"
	// ChangeAddMember records a member: Arg is its note verifier key
	// (whose name, "spindle-keyraft/ID", names the member) and Key the
	// node operator who vouches for it, who signs: an admitted key or an
	// operator's. See [Cluster.Join].
	ChangeAddMember = "add-member"
	// ChangeRemoveMember removes the member whose ID is Arg; it is signed
	// by an operator or by the key that vouched for the member, and names
	// no Key. See [Cluster.Leave].
	ChangeRemoveMember = "remove-member"
)

// A Change is a change of the cluster's configuration, signed by one of
// its operators. Seq is the configuration's sequence number after the
// change: one more than the current one, so that a change is applied at
// most once and a replayed one is refused (or, if it is the last change
// applied, accepted again without effect).
type Change struct {
	Seq       int64
	Kind      string
	Arg       string            // The policy of ChangePolicy, the domain of ChangeDomain.
	Key       spindle.PublicKey // The key the change is about.
	Signer    spindle.PublicKey // The operator who signs.
	Signature spindle.Signature
}

const (
	changeMagic         = "SPKC\x01"
	changeSigningDomain = "spindle.dev/keyraft config change v1\n"
	grantSigningDomain  = "spindle.dev/keyraft domain grant v1\n"
	maxKeyLen           = 256
)

func appendChangeBody(b []byte, ch *Change) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(ch.Seq))
	b = appendString(b, ch.Kind)
	b = appendString(b, ch.Arg)
	b = appendString(b, string(ch.Key))
	return appendString(b, string(ch.Signer))
}

// ChangeDigest returns the SHA-256 digest an operator signs for ch: a
// domain-separation string, then Seq (8 bytes big-endian), Kind, Arg, Key
// and Signer, each prefixed by its length as a uvarint.
func ChangeDigest(ch *Change) []byte {
	sum := sha256.Sum256(appendChangeBody([]byte(changeSigningDomain), ch))
	return sum[:]
}

// SignChange fills in ch.Signer and ch.Signature with s's key.
func SignChange(ch *Change, s spindle.Signer) error {
	ch.Signer = s.PublicKey()
	sig, err := s.Sign(ChangeDigest(ch))
	if err != nil {
		return spindle.E(spindle.Op("keyraft.SignChange"), err)
	}
	ch.Signature = sig
	return nil
}

// EncodeChange returns the canonical encoding of a change, signature
// included: its form in the Raft log and as a leaf of the transparency log.
func EncodeChange(ch *Change) []byte {
	b := appendChangeBody([]byte(changeMagic), ch)
	return appendString(b, string(ch.Signature))
}

// DecodeChange decodes a change encoded by [EncodeChange] and checks that
// it is well formed on its own. Anything else is Invalid. It is safe on
// untrusted input.
func DecodeChange(data []byte) (*Change, error) {
	const op spindle.Op = "keyraft.DecodeChange"
	ch, err := decodeChange(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed config change: %w", err))
	}
	if err := checkChangeForm(ch); err != nil {
		return nil, spindle.E(op, err)
	}
	return ch, nil
}

func decodeChange(data []byte) (*Change, error) {
	if len(data) > MaxRecordSize {
		return nil, fmt.Errorf("%d bytes, more than %d", len(data), MaxRecordSize)
	}
	if !bytes.HasPrefix(data, []byte(changeMagic)) {
		return nil, errors.New("bad magic")
	}
	d := decoder{data: data[len(changeMagic):]}
	ch := new(Change)
	seq := d.uint64()
	if seq > math.MaxInt64 {
		return nil, errors.New("sequence out of range")
	}
	ch.Seq = int64(seq)
	ch.Kind = d.string(32)
	ch.Arg = d.string(spindle.MaxUserNameLen)
	ch.Key = spindle.PublicKey(d.string(maxKeyLen))
	ch.Signer = spindle.PublicKey(d.string(maxKeyLen))
	if s := d.string(MaxSignatureLen); s != "" {
		ch.Signature = spindle.Signature(s)
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.data) != 0 {
		return nil, errors.New("trailing bytes")
	}
	if !bytes.Equal(EncodeChange(ch), data) {
		return nil, errors.New("non-canonical encoding")
	}
	return ch, nil
}

// checkKey checks that k is a canonical P-256 public key.
func checkKey(what string, k spindle.PublicKey) error {
	pub, err := spindle.ParsePublicKey(k)
	if err != nil {
		return spindle.E(spindle.Invalid, fmt.Errorf("%s: %w", what, err))
	}
	if f, err := spindle.FormatPublicKey(pub); err != nil || f != k {
		return spindle.E(spindle.Invalid, what+" is not in canonical form")
	}
	return nil
}

// checkChangeForm checks a change on its own, regardless of the state.
func checkChangeForm(ch *Change) error {
	if ch.Seq < 1 {
		return spindle.E(spindle.Invalid, fmt.Sprintf("config change sequence %d; sequences start at 1", ch.Seq))
	}
	switch ch.Kind {
	case ChangeInit:
		if ch.Arg != "" {
			if _, err := memberOfVerifierKey(ch.Arg); err != nil {
				return err
			}
		}
	case ChangeAddMember:
		if _, err := memberOfVerifierKey(ch.Arg); err != nil {
			return err
		}
	case ChangeRemoveMember:
		if err := checkMemberID(ch.Arg); err != nil {
			return err
		}
		if ch.Key != "" {
			return spindle.E(spindle.Invalid, "a member removal names no key")
		}
	case ChangeAddOperator, ChangeRemoveOperator, ChangeAdmit, ChangeUnadmit:
		if ch.Arg != "" {
			return spindle.E(spindle.Invalid, fmt.Sprintf("config change %s takes no argument, got %q", ch.Kind, ch.Arg))
		}
	case ChangePolicy:
		if ch.Arg != PolicyOpen && ch.Arg != PolicyDomain {
			return spindle.E(spindle.Invalid, fmt.Sprintf("unknown namespace policy %q; want %q or %q", ch.Arg, PolicyOpen, PolicyDomain))
		}
		if ch.Key != "" {
			return spindle.E(spindle.Invalid, "a policy change names no key")
		}
	case ChangeDomain, ChangeUndomain:
		if _, err := cleanDomain(ch.Arg); err != nil {
			return err
		}
		if ch.Kind == ChangeUndomain && ch.Key != "" {
			return spindle.E(spindle.Invalid, "removing a domain's admin key names no key")
		}
	default:
		return spindle.E(spindle.Invalid, fmt.Sprintf("unknown config change %q", ch.Kind))
	}
	if ch.Kind != ChangePolicy && ch.Kind != ChangeRemoveMember && ch.Kind != ChangeUndomain {
		if err := checkKey("config change key", ch.Key); err != nil {
			return err
		}
	}
	if err := checkKey("config change signer", ch.Signer); err != nil {
		return err
	}
	if len(ch.Signature) == 0 {
		return spindle.E(spindle.Invalid, "config change is not signed")
	}
	if len(ch.Signature) > MaxSignatureLen {
		return spindle.E(spindle.Invalid, fmt.Sprintf("config change signature of %d bytes, more than %d", len(ch.Signature), MaxSignatureLen))
	}
	return nil
}

// cleanDomain returns the canonical form of a domain, which must be
// canonical already.
func cleanDomain(dom string) (string, error) {
	_, _, _, canon, err := spindle.ParseUser(spindle.UserName("x@" + dom))
	if err != nil || canon != dom {
		return "", spindle.E(spindle.Invalid, fmt.Sprintf("bad domain %q (it must be a canonical, lower-case domain)", dom))
	}
	return canon, nil
}

// checkMemberID checks a member ID as Open does.
func checkMemberID(id string) error {
	if id == "" || strings.ContainsFunc(id, func(r rune) bool { return r == '+' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) {
		return spindle.E(spindle.Invalid, fmt.Sprintf("bad member ID %q", id))
	}
	return nil
}

// memberOfVerifierKey returns the member ID named by a member's note
// verifier key.
func memberOfVerifierKey(vkey string) (string, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return "", spindle.E(spindle.Invalid, fmt.Errorf("member verifier key %q: %v", vkey, err))
	}
	id, ok := strings.CutPrefix(v.Name(), keyName(""))
	if !ok {
		return "", spindle.E(spindle.Invalid, fmt.Sprintf("member verifier key is named %q, not %s<member ID>", v.Name(), keyName("")))
	}
	if err := checkMemberID(id); err != nil {
		return "", err
	}
	return id, nil
}

// memberInfo is a member recorded in the configuration.
type memberInfo struct {
	vkey string            // Its note verifier key.
	by   spindle.PublicKey // The node operator who vouched for it.
}

// clusterConfig is the configuration part of the replicated state.
type clusterConfig struct {
	members   map[string]memberInfo // By member ID.
	seq       int64
	last      []byte // EncodeChange of the last change applied.
	operators map[spindle.PublicKey]bool
	admitted  map[spindle.PublicKey]bool
	policy    string
	domains   map[string]spindle.PublicKey
}

// clone returns a deep copy of cfg.
func (cfg *clusterConfig) clone() clusterConfig {
	return clusterConfig{
		members:   maps.Clone(cfg.members),
		seq:       cfg.seq,
		last:      cfg.last,
		operators: maps.Clone(cfg.operators),
		admitted:  maps.Clone(cfg.admitted),
		policy:    cfg.policy,
		domains:   maps.Clone(cfg.domains),
	}
}

// memberKeys returns the recorded members' note verifier keys, by ID.
func (cfg *clusterConfig) memberKeys() map[string]string {
	m := make(map[string]string, len(cfg.members))
	for id, mi := range cfg.members {
		m[id] = mi.vkey
	}
	return m
}

func newConfig() clusterConfig {
	return clusterConfig{
		members:   make(map[string]memberInfo),
		operators: make(map[spindle.PublicKey]bool),
		admitted:  make(map[spindle.PublicKey]bool),
		policy:    PolicyOpen,
		domains:   make(map[string]spindle.PublicKey),
	}
}

// checkChange decides whether ch may be applied to the state, as check does
// for records: dup when ch is the last change applied. Kinds: Invalid
// (malformed, a sequence that does not follow, or removing the last
// operator), Permission (not signed by a current operator, or a bad
// signature), NotExist (removing a key that is no operator's).
func (s *state) checkChange(ch *Change, verify bool) (dup bool, err error) {
	return s.cfg.checkChange(ch, verify)
}

// checkChange is state.checkChange on the configuration alone, which is
// all it needs: clients replaying the cluster's changes use it too.
func (cfg *clusterConfig) checkChange(ch *Change, verify bool) (dup bool, err error) {
	if err := checkChangeForm(ch); err != nil {
		return false, err
	}
	if cfg.seq > 0 && ch.Seq == cfg.seq && bytes.Equal(EncodeChange(ch), cfg.last) {
		return true, nil
	}
	if ch.Seq != cfg.seq+1 {
		return false, spindle.E(spindle.Invalid, fmt.Sprintf("config change %d does not follow the current configuration %d (a replayed or stale change?)", ch.Seq, cfg.seq))
	}
	switch ch.Kind {
	case ChangeInit:
		if len(cfg.operators) != 0 {
			return false, spindle.E(spindle.Permission, "the cluster has operators already; init is for a cluster with none")
		}
		if ch.Signer != ch.Key {
			return false, spindle.E(spindle.Permission, "init must be signed by the first operator's own key")
		}
	case ChangeAddMember:
		if !cfg.operators[ch.Signer] && !(ch.Signer == ch.Key && cfg.admitted[ch.Key]) {
			return false, spindle.E(spindle.Permission, "a member is added by an operator, or by a node operator whose key the operators admitted, vouching with that key")
		}
		id, _ := memberOfVerifierKey(ch.Arg)
		if _, ok := cfg.members[id]; ok {
			return false, spindle.E(spindle.Exist, fmt.Sprintf("member %s is recorded already", id))
		}
	case ChangeRemoveMember:
		m, ok := cfg.members[ch.Arg]
		if !ok {
			return false, spindle.E(spindle.NotExist, fmt.Sprintf("member %s is not recorded", ch.Arg))
		}
		if !cfg.operators[ch.Signer] && ch.Signer != m.by {
			return false, spindle.E(spindle.Permission, fmt.Sprintf("member %s is removed by an operator or by the node operator who vouched for it", ch.Arg))
		}
	default:
		if !cfg.operators[ch.Signer] {
			return false, spindle.E(spindle.Permission, fmt.Sprintf("config change %s signed by a key that is not an operator's", ch.Kind))
		}
	}
	if ch.Kind == ChangeUndomain {
		if _, ok := cfg.domains[ch.Arg]; !ok {
			return false, spindle.E(spindle.NotExist, fmt.Sprintf("domain %s has no admin key registered", ch.Arg))
		}
	}
	if ch.Kind == ChangeRemoveOperator {
		if !cfg.operators[ch.Key] {
			return false, spindle.E(spindle.NotExist, "the key to remove is not an operator's")
		}
		if len(cfg.operators) == 1 {
			return false, spindle.E(spindle.Invalid, "cannot remove the last operator")
		}
	}
	if verify {
		if err := spindle.Verify(ch.Signer, ChangeDigest(ch), ch.Signature); err != nil {
			return false, spindle.E(spindle.Permission, fmt.Errorf("config change %s: %w", ch.Kind, errors.Unwrap(err)))
		}
	}
	return false, nil
}

// applyChange makes a checked change to the configuration.
func (cfg *clusterConfig) applyChange(ch *Change, enc []byte) {
	switch ch.Kind {
	case ChangeInit:
		cfg.operators[ch.Key] = true
		if ch.Arg != "" {
			id, _ := memberOfVerifierKey(ch.Arg)
			cfg.members[id] = memberInfo{vkey: ch.Arg, by: ch.Key}
		}
	case ChangeAddMember:
		id, _ := memberOfVerifierKey(ch.Arg)
		cfg.members[id] = memberInfo{vkey: ch.Arg, by: ch.Key}
	case ChangeRemoveMember:
		delete(cfg.members, ch.Arg)
	case ChangeAddOperator:
		cfg.operators[ch.Key] = true
	case ChangeRemoveOperator:
		delete(cfg.operators, ch.Key)
	case ChangeAdmit:
		cfg.admitted[ch.Key] = true
	case ChangeUnadmit:
		delete(cfg.admitted, ch.Key)
	case ChangePolicy:
		cfg.policy = ch.Arg
	case ChangeDomain:
		cfg.domains[ch.Arg] = ch.Key
	case ChangeUndomain:
		delete(cfg.domains, ch.Arg)
	}
	cfg.seq = ch.Seq
	cfg.last = enc
}

// GrantDigest returns the digest a domain's admin key signs to grant the
// new name of record u under the domain policy: a domain-separation string
// and the record's hash, so that the grant is for that name and key only.
func GrantDigest(u *spindle.User) []byte {
	sum := sha256.Sum256(append([]byte(grantSigningDomain), RecordHash(u)...))
	return sum[:]
}

// checkGrant applies the namespace policy to a new registration of u,
// whose other checks passed. Replaying a snapshot (verify false) skips it:
// the grant was checked when the record was accepted, and the log keeps
// records, not grants.
func (s *state) checkGrant(u *spindle.User, grant spindle.Signature, verify bool) error {
	if s.cfg.policy != PolicyDomain || !verify {
		return nil
	}
	_, _, _, dom, err := spindle.ParseUser(u.Name)
	if err != nil {
		return spindle.E(spindle.Invalid, u.Name, err)
	}
	key, ok := s.cfg.domains[dom]
	if !ok {
		return spindle.E(spindle.Permission, u.Name, fmt.Sprintf("the cluster runs the domain policy and domain %s has no admin key registered", dom))
	}
	if len(grant) == 0 {
		return spindle.E(spindle.Permission, u.Name, fmt.Sprintf("the cluster runs the domain policy: a new name under %s needs the countersignature of the domain's admin key", dom))
	}
	if err := spindle.Verify(key, GrantDigest(u), grant); err != nil {
		return spindle.E(spindle.Permission, u.Name, fmt.Errorf("countersignature is not by the admin key of %s: %w", dom, errors.Unwrap(err)))
	}
	return nil
}

// ClusterConfig is a copy of the cluster's configuration.
type ClusterConfig struct {
	Seq       int64                        // Changes applied.
	Members   map[string]string            // Recorded members' note verifier keys, by member ID.
	Operators []spindle.PublicKey          // Sorted.
	Admitted  []spindle.PublicKey          // Node operator keys that may join; sorted.
	Policy    string                       // PolicyOpen or PolicyDomain.
	Domains   map[string]spindle.PublicKey // Domain admin keys.
}

// Config returns this member's view of the cluster's configuration.
func (c *Cluster) Config() ClusterConfig {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	cfg := &c.fsm.st.cfg
	return ClusterConfig{
		Seq:       cfg.seq,
		Members:   cfg.memberKeys(),
		Operators: slices.Sorted(maps.Keys(cfg.operators)),
		Admitted:  slices.Sorted(maps.Keys(cfg.admitted)),
		Policy:    cfg.policy,
		Domains:   maps.Clone(cfg.domains),
	}
}

// IsMember reports whether the configuration records member id.
func (c *Cluster) IsMember(id string) bool {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	_, ok := c.fsm.st.cfg.members[id]
	return ok
}

// Change applies a configuration change, signed by an operator, through
// Raft, as Put does a record. Only the leader judges it against the
// configuration, and every member checks it again when applying it; a
// member that is not the leader checks only its form (a malformed change
// is Invalid) and then returns Transient wrapping [ErrNotLeader], for the
// caller to forward the change to [Cluster.Leader]. Applying the last
// change again is not an error. Error kinds: Invalid (malformed, or a
// sequence that does not follow: a stale or replayed change), Permission
// (not signed by a current operator), NotExist (removing a key that is no
// operator's), Transient.
func (c *Cluster) Change(ctx context.Context, ch *Change) error {
	const op spindle.Op = "keyraft.Change"
	if ch == nil {
		return spindle.E(op, spindle.Invalid, "nil config change")
	}
	enc := EncodeChange(ch)
	ch, err := DecodeChange(enc)
	if err != nil {
		return spindle.E(op, err)
	}
	if err := c.leading(ctx, ""); err != nil {
		return spindle.E(op, err)
	}
	c.fsm.mu.RLock()
	dup, err := c.fsm.st.checkChange(ch, true)
	c.fsm.mu.RUnlock()
	if err != nil {
		return spindle.E(op, err)
	}
	if dup {
		return nil
	}
	if err := c.submit(ctx, &putReq{name: spindle.UserName("config change " + ch.Kind), enc: enc}); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Join adds a member: ch, a ChangeAddMember signed by the node operator
// who vouches for it (a key the operators admitted, or an operator's),
// records the member and its verifier key in the configuration, and the
// member becomes a voter. A node whose operator's key no operator admitted
// is refused with Permission and nothing changes. It runs on the leader
// (else Transient wrapping ErrNotLeader). Joining again with the same
// change is not an error, so a Join whose outcome is unknown is repeated.
func (c *Cluster) Join(ctx context.Context, ch *Change) error {
	const op spindle.Op = "keyraft.Join"
	if ch == nil || ch.Kind != ChangeAddMember {
		return spindle.E(op, spindle.Invalid, "a join request is an add-member config change")
	}
	id, err := memberOfVerifierKey(ch.Arg)
	if err != nil {
		return spindle.E(op, err)
	}
	if err := c.Change(ctx, ch); err != nil {
		return spindle.E(op, err)
	}
	if err := c.AddVoter(ctx, id); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Leave removes a member: ch, a ChangeRemoveMember signed by an operator
// or by the node operator who vouched for the member, removes it from the
// configuration, whose log clients follow, and from the voters. It runs on
// the leader.
func (c *Cluster) Leave(ctx context.Context, ch *Change) error {
	const op spindle.Op = "keyraft.Leave"
	if ch == nil || ch.Kind != ChangeRemoveMember {
		return spindle.E(op, spindle.Invalid, "a leave request is a remove-member config change")
	}
	if err := c.Change(ctx, ch); err != nil {
		return spindle.E(op, err)
	}
	if err := c.RemoveServer(ctx, ch.Arg); err != nil {
		return spindle.E(op, err)
	}
	return nil
}

// Status is what a member knows of the cluster, for `spin key members`.
type Status struct {
	ID          string   // This member.
	VerifierKey string   // This member's tree-head verifier key.
	Leader      string   // The leader's ID, or "" if none is known.
	Members     []string // The voters' IDs, sorted.
	Term        uint64   // The current Raft term.
	LastIndex   uint64   // The last Raft log index this member holds.
	Applied     uint64   // The last Raft log index applied to its state.
	Config      ClusterConfig
}

// Status returns this member's view of the cluster. Error kinds:
// Transient (ctx ended before raft answered).
func (c *Cluster) Status(ctx context.Context) (*Status, error) {
	const op spindle.Op = "keyraft.Status"
	ids, err := c.Members(ctx)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	slices.Sort(ids)
	term, _ := strconv.ParseUint(c.raft.Stats()["term"], 10, 64)
	return &Status{
		ID:          c.cfg.ID,
		VerifierKey: c.vkey,
		Leader:      c.Leader(),
		Members:     ids,
		Term:        term,
		LastIndex:   c.raft.LastIndex(),
		Applied:     c.raft.AppliedIndex(),
		Config:      c.Config(),
	}, nil
}
