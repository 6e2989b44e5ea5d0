package keylog

import (
	"bytes"
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
	// PolicyInvite grants a new name under any domain only with an
	// invitation: the countersignature of an operator's key over
	// [GrantDigest] of its first record (or, for a domain with an admin
	// key registered, of that key). It is the open network's answer to
	// strangers who make identities for free: each name costs an
	// operator's word.
	PolicyInvite = "invite"
)

// Network policies: which nodes may be servers of the network's DHT, hold
// replicas and be providers of blocks.
const (
	// NetworkOpen lets any node be one. The network relies on challenges
	// of holding, hedged reads and quotas to bound what sybils do. It is
	// the policy of a cluster whose log sets none, so that a network
	// started before network policies existed keeps working unchanged.
	NetworkOpen = "open"
	// NetworkMembers lets only the network's member nodes be one: the
	// members of the key cluster and the nodes the operators admitted
	// with a ChangeAddNode. Every node refuses DHT and replica traffic
	// from any other; clients and other nodes read and write through a
	// member.
	NetworkMembers = "members"
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
	// (see [spindle.dev/keyraft.Cluster.Join]); ChangeUnadmit withdraws that.
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
	// operator's. See [spindle.dev/keyraft.Cluster.Join].
	ChangeAddMember = "add-member"
	// ChangeRemoveMember removes the member whose ID is Arg; it is signed
	// by an operator or by the key that vouched for the member, and names
	// no Key. See [spindle.dev/keyraft.Cluster.Leave].
	ChangeRemoveMember = "remove-member"
	// ChangeAddWitness records a witness of the log (see package
	// spindle.dev/keyraft/witness): Arg is its note verifier key, named
	// WitnessKeyName of its ID. ChangeRemoveWitness removes the witness
	// whose ID is Arg. ChangeWitnessQuorum sets to Arg, a decimal number
	// no larger than the number of witnesses, how many of them must
	// cosign a head for it to count. None names a Key.
	ChangeAddWitness    = "add-witness"
	ChangeRemoveWitness = "remove-witness"
	ChangeWitnessQuorum = "witness-quorum"
	// ChangeAddNode admits the node whose libp2p peer ID is Arg to the
	// network, and ChangeRemoveNode takes it out; see [NetworkMembers].
	// Both are signed by an operator and name no Key.
	ChangeAddNode    = "add-node"
	ChangeRemoveNode = "remove-node"
	// ChangeNetwork sets the network policy to Arg, [NetworkOpen] or
	// [NetworkMembers]. It is signed by an operator and names no Key.
	ChangeNetwork = "network"
)

// WitnessKeyName returns the name of the note key of the witness with the
// given ID, a node's peer ID.
func WitnessKeyName(id string) string { return "spindle-witness/" + id }

// WitnessOfVerifierKey returns the ID of the witness whose note verifier
// key vkey is, or an Invalid error if vkey is not a witness's.
func WitnessOfVerifierKey(vkey string) (string, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return "", spindle.E(spindle.Invalid, fmt.Errorf("witness verifier key %q: %v", vkey, err))
	}
	id, ok := strings.CutPrefix(v.Name(), WitnessKeyName(""))
	if !ok {
		return "", spindle.E(spindle.Invalid, fmt.Sprintf("witness verifier key is named %q, not %s<witness ID>", v.Name(), WitnessKeyName("")))
	}
	if err := checkMemberID(id); err != nil {
		return "", err
	}
	return id, nil
}

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

// IsChange reports whether enc, a leaf of the log, is the encoding of a
// configuration change rather than of a key record: whether it starts as
// [EncodeChange]'s encodings do. It does not check the rest.
func IsChange(enc []byte) bool { return bytes.HasPrefix(enc, []byte(changeMagic)) }

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
		return spindle.E(spindle.Op("keylog.SignChange"), err)
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
	const op spindle.Op = "keylog.DecodeChange"
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
			if _, err := MemberOfVerifierKey(ch.Arg); err != nil {
				return err
			}
		}
	case ChangeAddMember:
		if _, err := MemberOfVerifierKey(ch.Arg); err != nil {
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
		if ch.Arg != PolicyOpen && ch.Arg != PolicyDomain && ch.Arg != PolicyInvite {
			return spindle.E(spindle.Invalid, fmt.Sprintf("unknown namespace policy %q; want %q, %q or %q", ch.Arg, PolicyOpen, PolicyDomain, PolicyInvite))
		}
		if ch.Key != "" {
			return spindle.E(spindle.Invalid, "a policy change names no key")
		}
	case ChangeAddWitness:
		if _, err := WitnessOfVerifierKey(ch.Arg); err != nil {
			return err
		}
	case ChangeRemoveWitness:
		if err := checkMemberID(ch.Arg); err != nil {
			return err
		}
	case ChangeWitnessQuorum:
		if k, err := strconv.Atoi(ch.Arg); err != nil || k < 0 || strconv.Itoa(k) != ch.Arg {
			return spindle.E(spindle.Invalid, fmt.Sprintf("witness quorum %q is not a number of witnesses", ch.Arg))
		}
	case ChangeAddNode, ChangeRemoveNode:
		if err := checkNodeID(ch.Arg); err != nil {
			return err
		}
		if ch.Key != "" {
			return spindle.E(spindle.Invalid, "a node admission names no key")
		}
	case ChangeNetwork:
		if ch.Arg != NetworkOpen && ch.Arg != NetworkMembers {
			return spindle.E(spindle.Invalid, fmt.Sprintf("unknown network policy %q; want %q or %q", ch.Arg, NetworkOpen, NetworkMembers))
		}
		if ch.Key != "" {
			return spindle.E(spindle.Invalid, "a network policy change names no key")
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
	if witnessChange(ch.Kind) && ch.Key != "" {
		return spindle.E(spindle.Invalid, fmt.Sprintf("config change %s names no key", ch.Kind))
	}
	if !witnessChange(ch.Kind) && !slices.Contains([]string{ChangePolicy, ChangeRemoveMember, ChangeUndomain, ChangeAddNode, ChangeRemoveNode, ChangeNetwork}, ch.Kind) {
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

// witnessChange reports whether kind is a change of the witnesses.
func witnessChange(kind string) bool {
	return kind == ChangeAddWitness || kind == ChangeRemoveWitness || kind == ChangeWitnessQuorum
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

// maxNodeIDLen bounds the text of a node's peer ID.
const maxNodeIDLen = 128

// checkNodeID checks the form of a node's peer ID as far as this package,
// which links no libp2p, can: text without spaces, bounded. Nodes decode
// it as a peer ID, and skip one that is not.
func checkNodeID(id string) error {
	if len(id) > maxNodeIDLen || checkMemberID(id) != nil {
		return spindle.E(spindle.Invalid, fmt.Sprintf("bad node peer ID %q", id))
	}
	return nil
}

// MemberOfVerifierKey returns the ID of the member whose note verifier key
// vkey is: the name of the key is [MemberKeyName] of the ID. A key that is
// not a member's is Invalid.
func MemberOfVerifierKey(vkey string) (string, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return "", spindle.E(spindle.Invalid, fmt.Errorf("member verifier key %q: %v", vkey, err))
	}
	id, ok := strings.CutPrefix(v.Name(), MemberKeyName(""))
	if !ok {
		return "", spindle.E(spindle.Invalid, fmt.Sprintf("member verifier key is named %q, not %s<member ID>", v.Name(), MemberKeyName("")))
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

// A ConfigState is a cluster's configuration as its changes make it: the
// members, operators, admitted node operator keys, namespace policy and
// domain admin keys. The members keep it in their replicated state, and a
// client following them keeps one in its [ConfigLog]; both build it alike,
// applying each change that [ConfigState.Check] accepts with
// [ConfigState.Apply]. Make one with [NewConfigState]. It is not safe for
// concurrent use.
type ConfigState struct {
	members   map[string]memberInfo // By member ID.
	seq       int64
	last      []byte // EncodeChange of the last change applied.
	operators map[spindle.PublicKey]bool
	admitted  map[spindle.PublicKey]bool
	policy    string
	domains   map[string]spindle.PublicKey
	witnesses map[string]string // Note verifier keys by witness ID.
	quorum    int               // Witnesses that must cosign a head.
	nodes     map[string]bool   // Admitted nodes, by peer ID (ChangeAddNode).
	network   string            // NetworkOpen or NetworkMembers.
}

// Clone returns a deep copy of cfg.
func (cfg *ConfigState) Clone() ConfigState {
	return ConfigState{
		members:   maps.Clone(cfg.members),
		seq:       cfg.seq,
		last:      cfg.last,
		operators: maps.Clone(cfg.operators),
		admitted:  maps.Clone(cfg.admitted),
		policy:    cfg.policy,
		domains:   maps.Clone(cfg.domains),
		witnesses: maps.Clone(cfg.witnesses),
		quorum:    cfg.quorum,
		nodes:     maps.Clone(cfg.nodes),
		network:   cfg.network,
	}
}

// Witnesses returns the witnesses' note verifier keys, by ID (a new map,
// which the caller owns), and how many of them must cosign a head.
func (cfg *ConfigState) Witnesses() (map[string]string, int) {
	return maps.Clone(cfg.witnesses), cfg.quorum
}

// Members returns the recorded members' note verifier keys, by ID: a new
// map, which the caller owns.
func (cfg *ConfigState) Members() map[string]string {
	m := make(map[string]string, len(cfg.members))
	for id, mi := range cfg.members {
		m[id] = mi.vkey
	}
	return m
}

// NewConfigState returns the configuration of a cluster that has applied
// no change: no members, no operators, the open namespace policy and the
// open network.
func NewConfigState() ConfigState {
	return ConfigState{
		members:   make(map[string]memberInfo),
		operators: make(map[spindle.PublicKey]bool),
		admitted:  make(map[spindle.PublicKey]bool),
		policy:    PolicyOpen,
		domains:   make(map[string]spindle.PublicKey),
		witnesses: make(map[string]string),
		nodes:     make(map[string]bool),
		network:   NetworkOpen,
	}
}

// Check decides whether ch may be applied to the configuration. It
// reports dup when ch is the last change applied (a repeated request,
// accepted without effect). With verify false the signature is not
// checked: for replaying changes that were checked when first accepted.
// Check is deterministic, so members replaying the log and clients
// following it reach the same answer. Kinds: Invalid (malformed, a
// sequence that does not follow, or removing the last operator),
// Permission (not signed by a current operator, or a bad signature),
// NotExist (removing a key that is no operator's).
func (cfg *ConfigState) Check(ch *Change, verify bool) (dup bool, err error) {
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
		byOperator := cfg.operators[ch.Signer]
		if !byOperator && !(ch.Signer == ch.Key && cfg.admitted[ch.Key]) {
			return false, spindle.E(spindle.Permission, "a member is added by an operator, or by a node operator whose key the operators admitted, vouching with that key")
		}
		id, _ := MemberOfVerifierKey(ch.Arg)
		if _, ok := cfg.members[id]; ok {
			return false, spindle.E(spindle.Exist, fmt.Sprintf("member %s is recorded already", id))
		}
		// One operator, one vote: an admitted node operator holds one
		// membership at a time, so that one admitted key cannot add the
		// members that make a majority; and a member's signing key
		// appears once, so that one key cannot sign as two members.
		for _, other := range slices.Sorted(maps.Keys(cfg.members)) {
			m := cfg.members[other]
			if verifierKeyMaterial(m.vkey) == verifierKeyMaterial(ch.Arg) {
				return false, spindle.E(spindle.Exist, fmt.Sprintf("the signing key of member %s is member %s's already", id, other))
			}
			if !byOperator && m.by == ch.Key {
				return false, spindle.E(spindle.Permission, fmt.Sprintf("the node operator key vouches for member %s already: an admitted key holds one membership, and only an operator adds more", other))
			}
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
	switch ch.Kind {
	case ChangeAddWitness:
		id, _ := WitnessOfVerifierKey(ch.Arg)
		if _, ok := cfg.witnesses[id]; ok {
			return false, spindle.E(spindle.Exist, fmt.Sprintf("witness %s is recorded already", id))
		}
	case ChangeRemoveWitness:
		if _, ok := cfg.witnesses[ch.Arg]; !ok {
			return false, spindle.E(spindle.NotExist, fmt.Sprintf("witness %s is not recorded", ch.Arg))
		}
		if len(cfg.witnesses)-1 < cfg.quorum {
			return false, spindle.E(spindle.Invalid, fmt.Sprintf("removing witness %s would leave %d witnesses, fewer than the %d that must cosign: lower the quorum first", ch.Arg, len(cfg.witnesses)-1, cfg.quorum))
		}
	case ChangeWitnessQuorum:
		if k, _ := strconv.Atoi(ch.Arg); k > len(cfg.witnesses) {
			return false, spindle.E(spindle.Invalid, fmt.Sprintf("a quorum of %d witnesses, of the %d recorded", k, len(cfg.witnesses)))
		}
	}
	if ch.Kind == ChangeUndomain {
		if _, ok := cfg.domains[ch.Arg]; !ok {
			return false, spindle.E(spindle.NotExist, fmt.Sprintf("domain %s has no admin key registered", ch.Arg))
		}
	}
	if ch.Kind == ChangeRemoveNode && !cfg.nodes[ch.Arg] {
		return false, spindle.E(spindle.NotExist, fmt.Sprintf("node %s is not admitted", ch.Arg))
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

// Apply makes a change that Check accepted to the configuration; enc is
// EncodeChange(ch).
func (cfg *ConfigState) Apply(ch *Change, enc []byte) {
	switch ch.Kind {
	case ChangeInit:
		cfg.operators[ch.Key] = true
		if ch.Arg != "" {
			id, _ := MemberOfVerifierKey(ch.Arg)
			cfg.members[id] = memberInfo{vkey: ch.Arg, by: ch.Key}
		}
	case ChangeAddMember:
		id, _ := MemberOfVerifierKey(ch.Arg)
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
	case ChangeAddWitness:
		id, _ := WitnessOfVerifierKey(ch.Arg)
		cfg.witnesses[id] = ch.Arg
	case ChangeRemoveWitness:
		delete(cfg.witnesses, ch.Arg)
	case ChangeWitnessQuorum:
		cfg.quorum, _ = strconv.Atoi(ch.Arg)
	case ChangeAddNode:
		cfg.nodes[ch.Arg] = true
	case ChangeRemoveNode:
		delete(cfg.nodes, ch.Arg)
	case ChangeNetwork:
		cfg.network = ch.Arg
	}
	cfg.seq = ch.Seq
	cfg.last = enc
}

// verifierKeyMaterial returns the key of a note verifier key
// ("name+hash+key"), without the name and the hash that covers it: the
// same key under two names is one key.
func verifierKeyMaterial(vkey string) string {
	_, rest, _ := strings.Cut(vkey, "+")
	_, key, _ := strings.Cut(rest, "+")
	return key
}

// GrantDigest returns the digest a domain's admin key signs to grant the
// new name of record u under the domain policy: a domain-separation string
// and the record's hash, so that the grant is for that name and key only.
func GrantDigest(u *spindle.User) []byte {
	sum := sha256.Sum256(append([]byte(grantSigningDomain), RecordHash(u)...))
	return sum[:]
}

// CheckGrant applies the namespace policy to a new registration of u,
// whose other checks passed: under [PolicyDomain], grant must be the
// countersignature of the admin key of u's domain over [GrantDigest] of
// u; under [PolicyOpen] anything passes. Failures are Permission, or
// Invalid for a malformed name.
func (cfg *ConfigState) CheckGrant(u *spindle.User, grant spindle.Signature) error {
	if cfg.policy == PolicyInvite {
		return cfg.checkInvitation(u, grant)
	}
	if cfg.policy != PolicyDomain {
		return nil
	}
	_, _, _, dom, err := spindle.ParseUser(u.Name)
	if err != nil {
		return spindle.E(spindle.Invalid, u.Name, err)
	}
	key, ok := cfg.domains[dom]
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

// checkInvitation applies [PolicyInvite]: grant must be the
// countersignature over [GrantDigest] of u of an operator's key, or of the
// admin key of u's domain if one is registered. It binds the name and its
// key, so an invitation cannot serve another name or another key.
func (cfg *ConfigState) checkInvitation(u *spindle.User, grant spindle.Signature) error {
	if len(grant) == 0 {
		return spindle.E(spindle.Permission, u.Name, "the cluster admits new names by invitation: a new name needs the countersignature of an operator's key (spin signup -request, then an operator runs spin key grant)")
	}
	keys := slices.Sorted(maps.Keys(cfg.operators))
	if _, _, _, dom, err := spindle.ParseUser(u.Name); err == nil {
		if k, ok := cfg.domains[dom]; ok {
			keys = append(keys, k)
		}
	}
	digest := GrantDigest(u)
	for _, k := range keys {
		if spindle.Verify(k, digest, grant) == nil {
			return nil
		}
	}
	return spindle.E(spindle.Permission, u.Name, "the invitation is not signed by an operator's key (nor by the domain's admin key) for this name and key")
}

// Seq returns the configuration's sequence number: the number of changes
// applied.
func (cfg *ConfigState) Seq() int64 { return cfg.seq }

// IsMember reports whether the configuration records member id.
func (cfg *ConfigState) IsMember(id string) bool {
	_, ok := cfg.members[id]
	return ok
}

// Network returns the network policy, [NetworkOpen] or [NetworkMembers].
func (cfg *ConfigState) Network() string { return cfg.network }

// Nodes returns the peer IDs of the nodes admitted to the network with
// ChangeAddNode, sorted. The members of the key cluster, whose IDs are
// their peer IDs, are the network's members too: see [ConfigState.NetworkMembers].
func (cfg *ConfigState) Nodes() []string { return slices.Sorted(maps.Keys(cfg.nodes)) }

// NetworkMembers returns the peer IDs of the network's member nodes, sorted:
// the nodes admitted with ChangeAddNode and the key cluster's members. A
// member of the key cluster was vouched for by an admitted node operator
// already, and a network whose operators close it keeps its key cluster.
func (cfg *ConfigState) NetworkMembers() []string {
	all := maps.Clone(cfg.nodes)
	for id := range cfg.members {
		all[id] = true
	}
	return slices.Sorted(maps.Keys(all))
}

// NumMembers returns the number of members the configuration records.
func (cfg *ConfigState) NumMembers() int { return len(cfg.members) }

// Operators returns the operators' keys, sorted.
func (cfg *ConfigState) Operators() []spindle.PublicKey {
	return slices.Sorted(maps.Keys(cfg.operators))
}

// Admitted returns the node operator keys that may join, sorted.
func (cfg *ConfigState) Admitted() []spindle.PublicKey {
	return slices.Sorted(maps.Keys(cfg.admitted))
}

// Policy returns the namespace policy, [PolicyOpen] or [PolicyDomain].
func (cfg *ConfigState) Policy() string { return cfg.policy }

// Domains returns the domain admin keys, by domain: a new map, which the
// caller owns.
func (cfg *ConfigState) Domains() map[string]spindle.PublicKey { return maps.Clone(cfg.domains) }
