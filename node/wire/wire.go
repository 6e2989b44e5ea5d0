// Package wire defines the client protocol between a spin client and the
// node it talks through: the protocol IDs, the methods, and the CBOR
// messages both sides exchange. Every request travels in a Request
// envelope and every answer in a Response, each carrying the method's own
// message (see messages.go) as its Body. It holds no behaviour beyond encoding, so
// that the node (the server side) and node/client (the client side) share
// one definition of every message.
package wire

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/fxamacker/cbor/v2"

	"spindle.dev"
)

// The protocols a node serves to clients.
const (
	// ClientProtocol carries a client's requests: one request and one
	// response per stream, each a CBOR-encoded message.
	// Version 2 has one request and one response per method (see
	// Request and Response).
	ClientProtocol = "/spindle/client/2"
	// WatchProtocol carries one Watch: a request, then a stream of events.
	WatchProtocol = "/spindle/watch/2"
	// OperatorProtocol carries the requests a node answers only to its
	// operator: KeyJoin, KeyLeave, NodeBackup, and NodeStatus with the logs the node
	// hosts. A node serves it only on its Unix socket, which only its
	// operator can reach, and never over the network, whose protocols
	// have no operator methods at all.
	OperatorProtocol = "/spindle/operator/1"
)

// MaxMessage bounds a client request or response: room for the entry of a
// file of some 100 GiB (1 MiB blocks) or a long Glob answer.
const MaxMessage = 16 << 20

// Methods of the client and operator protocols. Each method's contract is
// on its request and response types, named after it (KeyLookup:
// KeyLookupRequest and KeyLookupResponse).
const (
	Auth            = "auth"
	KeyLookup       = "key.lookup"
	KeyLookupLeader = "key.lookup.leader"
	KeyPut          = "key.put"
	KeyDomain       = "key.domain"
	KeyHistory      = "key.history"
	KeyProof        = "key.proof"
	KeyProofs       = "key.proofs"
	KeyConsistency  = "key.consistency"
	KeyVerifier     = "key.verifier"
	KeyHead         = "key.head"
	KeyGossip       = "key.gossip"
	KeyConfig       = "key.config"
	KeyCosign       = "key.cosign"
	KeyStatus       = "key.status"
	KeyChange       = "key.change"
	DirHead         = "dir.head"
	DirStep         = "dir.step"
	DirMapStep      = "dir.mapstep"
	DirAppend       = "dir.append"
	DirBatch        = "dir.appendbatch"
	DirLookup       = "dir.lookup"
	DirGlob         = "dir.glob"
	DirWhich        = "dir.whichaccess"
	DirWatch        = "dir.watch"
	DirEntries      = "dir.entries"
	DirMirror       = "dir.mirror"
	DirNudge        = "dir.nudge"
	DirCosign       = "dir.cosign"
	DirCheckpoint   = "dir.checkpoint"
	DirPublished    = "dir.published"
	WitnessCosign   = "witness.cosign"
	WitnessHead     = "witness.head"
	// NodeStatus is a method of both protocols: on ClientProtocol for
	// the writers a node admits, on OperatorProtocol with the logs it
	// hosts.
	NodeStatus = "node.status"
	// KeyJoin and KeyLeave are methods of OperatorProtocol only, which a
	// node serves through its socket, to its operator.
	KeyJoin  = "key.join"
	KeyLeave = "key.leave"
	// NodeBackup, of OperatorProtocol only, has the node write a backup
	// of its state to a directory on its machine.
	NodeBackup = "node.backup"
)

// Ops of the errors by which a node tells a client about the protocol
// itself rather than about a request's subject.
const (
	// SessionOp is the Op of the error a node returns to a peer that has
	// not signed in; the client signs in again and retries.
	SessionOp spindle.Op = "node.session"
	// UnknownOp is the Op of the error a node returns for a method it
	// does not know, as an older node does for dir.appendbatch.
	UnknownOp spindle.Op = "node.Client"
	// NotHostedOp is the Op of the Permission error a node returns for a
	// tree it does not host and may not start: it does not admit the
	// tree's owner as a writer (spin node -writers).
	NotHostedOp spindle.Op = "node.NotHosted"
)

// A Request is the envelope of every request of the client and operator
// protocols: the method, the fields every method may carry, and the
// method's own request (such as a DirLookupRequest) as Body, which only
// the method's handler decodes.
type Request struct {
	Method string `cbor:"1,keyasint"`
	// Auth signs the peer in, for Auth; for a key.put, it proves
	// possession of the key; with To, it signs this one request (see
	// AuthMsg.Req and SignedDigest).
	Auth *AuthMsg `cbor:"7,keyasint,omitempty"`
	// To, if set, is the peer ID of the node that is to answer a dir.*
	// request: the dir host of the tree it is about. A node that is not
	// To carries the request there unchanged and returns the answer
	// unchanged. Such a request acts for the user who signed it, not for
	// a session: Auth must sign it (see AuthMsg.Req and SignedDigest).
	// Unsigned, a dir.lookup or dir.whichaccess for To is answered by To
	// for no user (the anonymous reader of a gateway) with what all may
	// read; no node carries it.
	To string `cbor:"10,keyasint,omitempty"`
	// Body is the method's request, encoded.
	Body []byte `cbor:"12,keyasint,omitempty"`
}

// NewRequest returns the request of method whose body is body encoded.
func NewRequest(method string, body any) (*Request, error) {
	b, err := Encode(body)
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	return &Request{Method: method, Body: b}, nil
}

// SignedDigest returns the digest of req that AuthMsg.Req holds when the
// user signs the request itself: the SHA-256 of its canonical encoding
// without Auth. It covers the method, To and the body.
func SignedDigest(req *Request) ([]byte, error) {
	r := *req
	r.Auth = nil
	data, err := Encode(&r)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return sum[:], nil
}

// A Response is the envelope of every answer: the method's response
// (such as a DirLookupResponse) as Body, and the error, if any. Err, an
// encoded *spindle.Error, travels beside the body because some answers
// carry both, such as a lookup that stops at a link.
type Response struct {
	Body []byte `cbor:"1,keyasint,omitempty"`
	Err  []byte `cbor:"5,keyasint,omitempty"`
	// NotLeader says that Err is a key cluster member's refusal because
	// it does not lead (keyraft.ErrNotLeader), which an error's encoding
	// does not carry: the sender then asks the leader.
	NotLeader bool `cbor:"14,keyasint,omitempty"`
	// Sig, in the answer to a request its user signed for the node that
	// answers (Request.To with AuthMsg.Req), is that node's signature,
	// with its peer key, of AnswerDigest: the answer bound to the one
	// request it answers, so that no node carrying it can hand it to
	// another request. Key is the node's public key in libp2p's
	// encoding, sent only if its peer ID does not embed it (an Ed25519
	// peer ID does).
	Key []byte `cbor:"15,keyasint,omitempty"`
	Sig []byte `cbor:"16,keyasint,omitempty"`
}

// NewResponse returns the answer whose body is body encoded (nil for
// none) and whose error is err.
func NewResponse(body any, err error, notLeader bool) (*Response, error) {
	resp := &Response{Err: ErrBytes(err), NotLeader: notLeader}
	if body != nil {
		b, eerr := Encode(body)
		if eerr != nil {
			return nil, spindle.E(spindle.Internal, eerr)
		}
		resp.Body = b
	}
	return resp, nil
}

// EncodeResponse encodes the answer body (nil for none) and err.
func EncodeResponse(body any, err error, notLeader bool) ([]byte, error) {
	resp, rerr := NewResponse(body, err, notLeader)
	if rerr != nil {
		return nil, rerr
	}
	return Encode(resp)
}

// AnswerDigest returns what the node that answers a signed request (a,
// its Request.Auth) signs in Response.Sig: the request's own digest (the
// one its user signed, which covers the method, To, the body, the user,
// the time and the nonce) and the answer's body, error and NotLeader.
func AnswerDigest(a *AuthMsg, resp *Response) []byte {
	h := sha256.New()
	h.Write([]byte("spindle.dev signed answer v1\x00"))
	for _, b := range [][]byte{a.Digest(), resp.Body, resp.Err} {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	if resp.NotLeader {
		h.Write([]byte{1})
	} else {
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// SignedFor reports whether req is a request its user signed for the
// node id (To with AuthMsg.Req), whose answer that node signs.
func SignedFor(req *Request, id string) bool {
	return req.To != "" && req.To == id && req.Auth != nil && len(req.Auth.Req) > 0
}

// A ClusterStatus is what a member of the key cluster knows of it: for spin
// key members, and for the operator who signs a configuration change,
// whose sequence number follows Seq.
type ClusterStatus struct {
	ID        string                       `cbor:"1,keyasint"`           // The member that answered.
	Leader    string                       `cbor:"2,keyasint,omitempty"` // "" if none is known.
	Term      uint64                       `cbor:"3,keyasint,omitempty"`
	LastIndex uint64                       `cbor:"4,keyasint,omitempty"`
	Applied   uint64                       `cbor:"5,keyasint,omitempty"`
	Voters    []string                     `cbor:"6,keyasint,omitempty"` // Raft voters' IDs, sorted.
	Members   map[string]string            `cbor:"7,keyasint,omitempty"` // Recorded members' verifier keys, by ID.
	Seq       int64                        `cbor:"8,keyasint,omitempty"` // Configuration changes applied.
	Operators []spindle.PublicKey          `cbor:"9,keyasint,omitempty"`
	Admitted  []spindle.PublicKey          `cbor:"10,keyasint,omitempty"`
	Policy    string                       `cbor:"11,keyasint,omitempty"`
	Domains   map[string]spindle.PublicKey `cbor:"12,keyasint,omitempty"`
	Network   string                       `cbor:"13,keyasint,omitempty"` // "open" or "members"; "" (from older members) is open.
	Nodes     []string                     `cbor:"14,keyasint,omitempty"` // The network's member nodes' peer IDs: admitted nodes and key cluster members; sorted.
	Witnesses map[string]string            `cbor:"20,keyasint,omitempty"` // Witnesses' verifier keys, by ID.
	Quorum    int                          `cbor:"21,keyasint,omitempty"` // Witnesses that must cosign a head.
	// What the answering member last heard from each witness, by ID:
	// the size of the tree it cosigned last, when, and the error of the
	// last request if it failed.
	WitnessSize map[string]int64        `cbor:"22,keyasint,omitempty"`
	WitnessAt   map[string]spindle.Time `cbor:"23,keyasint,omitempty"`
	WitnessErr  map[string]string       `cbor:"24,keyasint,omitempty"`
}

// A Status is what node.status reports: a node's place in the network
// and what it holds. Counts that a node does not keep are nil, never a
// guess: the fields after Bytes belong to the replicated block network,
// which fills them in where it runs.
type Status struct {
	Peer         string       `cbor:"1,keyasint"`            // The node's peer ID.
	Started      spindle.Time `cbor:"2,keyasint"`            // When the node started.
	Reachability string       `cbor:"3,keyasint,omitempty"`  // What AutoNAT found: public, private or unknown.
	Peers        int          `cbor:"4,keyasint"`            // Peers connected, clients included.
	DHTPeers     int          `cbor:"5,keyasint"`            // Peers in the DHT's routing table.
	Remembered   int          `cbor:"6,keyasint"`            // Peers remembered for the next start.
	Blocks       int64        `cbor:"7,keyasint"`            // Blocks held.
	Bytes        int64        `cbor:"8,keyasint"`            // Their size.
	Relay        bool         `cbor:"9,keyasint,omitempty"`  // The node offers relay service.
	Addrs        []string     `cbor:"15,keyasint,omitempty"` // Its network addresses, for others to join through.

	Announced     *int64        `cbor:"10,keyasint,omitempty"` // Blocks announced in the DHT.
	AnnouncedAt   *spindle.Time `cbor:"11,keyasint,omitempty"` // When the last sweep of announcements ended.
	CacheBytes    *int64        `cbor:"12,keyasint,omitempty"` // Bytes in the cache of fetched blocks.
	CacheMax      *int64        `cbor:"13,keyasint,omitempty"` // The cache's bound.
	RepairBacklog *int64        `cbor:"14,keyasint,omitempty"` // Blocks with fewer live copies than wanted.
	HoldLimit     *int64        `cbor:"20,keyasint,omitempty"` // Bytes held past which copies from other nodes are refused.
	ReplicaFull   *int64        `cbor:"21,keyasint,omitempty"` // Copies from other nodes refused for HoldLimit since the start.
	RepairMissing *int64        `cbor:"22,keyasint,omitempty"` // Copies the blocks of RepairBacklog lack.

	// Leases (see package blocks/lease).
	Leases        *int64        `cbor:"30,keyasint,omitempty"` // Leases held for dir hosts, this node's own included.
	LeasedBlocks  *int64        `cbor:"31,keyasint,omitempty"` // Blocks they keep.
	Collectable   *int64        `cbor:"32,keyasint,omitempty"` // Blocks held without a lease past the grace, at the last pass.
	Unleased      *int64        `cbor:"33,keyasint,omitempty"` // Blocks held without a lease, within the grace, at the last pass.
	LeasesRenewed *int64        `cbor:"34,keyasint,omitempty"` // Leases this node renewed, as a dir host, in its last round.
	CollectPaused *spindle.Time `cbor:"35,keyasint,omitempty"` // Collection is paused until then.

	// Directory logs this node hosts that it does not serve, each as
	// "user: why".
	LogsWaiting []string `cbor:"50,keyasint,omitempty"` // Waiting for the key cluster to tell their keys.
	LogsDamaged []string `cbor:"51,keyasint,omitempty"` // Damaged: not served until the operator repairs them.

	// A witness (spin node -witness): the verifier key of its
	// cosignatures, the size of the key log's tree it cosigned last, and
	// when that last grew (nil if not since the node started).
	WitnessKey      string        `cbor:"60,keyasint,omitempty"`
	WitnessSize     *int64        `cbor:"61,keyasint,omitempty"`
	WitnessAdvanced *spindle.Time `cbor:"62,keyasint,omitempty"`

	// KeyRole is the node's place in its key cluster: "leader",
	// "follower" (of KeyLeader, with KeyApplied of KeyLast log entries
	// applied), "joining", or "client" (it runs none, and carries key
	// requests to KeyMember, the member that answered it last).
	KeyRole    string `cbor:"73,keyasint,omitempty"`
	KeyLeader  string `cbor:"74,keyasint,omitempty"`
	KeyMember  string `cbor:"75,keyasint,omitempty"`
	KeyLast    uint64 `cbor:"76,keyasint,omitempty"`
	KeyApplied uint64 `cbor:"77,keyasint,omitempty"`

	// The network's policy as the node last learnt it from its key
	// cluster ("open" or "members"; "" before it learnt any), how many
	// member nodes it names, and whether this node is one of them.
	Network        string `cbor:"70,keyasint,omitempty"`
	NetworkMembers int    `cbor:"71,keyasint,omitempty"`
	NetworkMember  bool   `cbor:"72,keyasint,omitempty"`

	// Logs are the directory logs the node holds or mirrors, by user
	// name. Who hosts whose tree is its users' business: a node tells it
	// only through its socket, to its operator.
	Logs []LogStatus `cbor:"40,keyasint,omitempty"`
}

// A LogStatus is a node's state for one user's directory log: its role
// for the log, the head it holds, how far it trails the dir host it
// copies from, and why its last pull failed.
type LogStatus struct {
	User spindle.UserName `cbor:"1,keyasint"`
	// Role is "sequencer" (the first dir host the owner's key record
	// names), "mirror" (another one), "not listed" (the record does not
	// name this node) or "unknown" (the record could not be looked up
	// yet).
	Role string `cbor:"2,keyasint"`
	Seq  int64  `cbor:"3,keyasint"` // The head held here; -1 if the log is damaged.
	// Source is the dir host a mirror last pulled from (the sequencer,
	// unless it was down), and SourceSeq that host's head when it last
	// answered; Lag is SourceSeq less Seq, never negative. All three
	// are empty until a host answers.
	Source    string        `cbor:"4,keyasint,omitempty"`
	SourceSeq int64         `cbor:"5,keyasint,omitempty"`
	Lag       int64         `cbor:"6,keyasint,omitempty"`
	Pulled    *spindle.Time `cbor:"7,keyasint,omitempty"` // When a pull last succeeded.
	Err       string        `cbor:"8,keyasint,omitempty"` // Why the last pull failed; for a damaged log, the damage.
	// Hosts, at the sequencer, are the other dir hosts the record names,
	// in order, with the head each held when it last asked for the log.
	Hosts []LogHost `cbor:"9,keyasint,omitempty"`
}

// A LogHost is what a sequencer knows of another dir host of a log.
type LogHost struct {
	Peer  string        `cbor:"1,keyasint"`
	Seq   int64         `cbor:"2,keyasint"`           // The head it held when it last asked.
	Asked *spindle.Time `cbor:"3,keyasint,omitempty"` // When it last asked; nil if not since the sequencer started or it was listed.
}

// An AuthMsg proves that the client's peer acts for User: the user signs the
// two peer IDs and the time, and the node checks the signature with the key
// cluster's record. The connection's security protocol (TLS or Noise over
// the network, LocalSecurity over the node's socket) has already
// authenticated the client's peer ID, so a copied authMsg is useless to
// any other peer.
type AuthMsg struct {
	User       spindle.UserName  `cbor:"1,keyasint"`
	ClientPeer string            `cbor:"2,keyasint"`
	NodePeer   string            `cbor:"3,keyasint"`
	Time       spindle.Time      `cbor:"4,keyasint"`
	Sig        spindle.Signature `cbor:"5,keyasint"`
	// Req, if set, makes this a signature of one request rather than of
	// a connection: the request's SignedDigest, with NodePeer the node
	// that is to answer it (Request.To). The peers it travels through
	// can delay or drop it but not change it, nor use it for another
	// request. ClientPeer then names the client, for the record only.
	Req []byte `cbor:"6,keyasint,omitempty"`
	// Nonce, with Req, makes two signatures of one request at one time
	// differ: a node refuses to take a signed request twice.
	Nonce []byte `cbor:"7,keyasint,omitempty"`
}

// Digest returns what the user signs.
func (a *AuthMsg) Digest() []byte {
	h := sha256.New()
	if len(a.Req) > 0 {
		h.Write([]byte("spindle.dev signed request v1\x00"))
		h.Write(binary.AppendUvarint(nil, uint64(len(a.Req))))
		h.Write(a.Req)
		h.Write(binary.AppendUvarint(nil, uint64(len(a.Nonce))))
		h.Write(a.Nonce)
	} else {
		h.Write([]byte("spindle.dev client auth v1\x00"))
	}
	for _, s := range []string{string(a.User), a.ClientPeer, a.NodePeer} {
		h.Write(binary.AppendUvarint(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(a.Time)))
	return h.Sum(nil)
}

// The CBOR modes are fixed configurations, made once; they hold no state.
var (
	encMode = must(cbor.CoreDetEncOptions().EncMode())
	decMode = must(cbor.DecOptions{
		MaxArrayElements: 1 << 20,
		MaxMapPairs:      1 << 16,
		MaxNestedLevels:  16,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
	}.DecMode())
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Encode encodes a message canonically.
func Encode(v any) ([]byte, error) { return encMode.Marshal(v) }

// Decode decodes a message, refusing malformed input with an Invalid error.
func Decode(data []byte, v any) error {
	if err := decMode.Unmarshal(data, v); err != nil {
		return spindle.E(spindle.Invalid, "malformed message: "+err.Error())
	}
	return nil
}

// DecodeResponse decodes an encoded answer's envelope, returning with it
// the error it carries, if any.
func DecodeResponse(out []byte) (*Response, error) {
	var resp Response
	if err := Decode(out, &resp); err != nil {
		return nil, err
	}
	if resp.Err != nil {
		return &resp, spindle.UnmarshalError(resp.Err)
	}
	return &resp, nil
}

// ErrBytes encodes err for a response.
func ErrBytes(err error) []byte {
	if err == nil {
		return nil
	}
	e, ok := err.(*spindle.Error)
	if !ok {
		e = spindle.E(err).(*spindle.Error)
	}
	b, _ := e.MarshalBinary()
	return b
}

// DecodeAnswer decodes an encoded answer whose body is a T, returning
// with it the error it carries, if any. The answer is nil only if the
// bytes do not decode; an answer without a body is a zero T.
func DecodeAnswer[T any](out []byte) (*T, error) {
	resp, err := DecodeResponse(out)
	if resp == nil {
		return nil, err
	}
	return DecodeBody[T](resp, err)
}

// DecodeBody decodes resp's body as a T and returns it with err, the
// error resp carries; or, if the body does not decode, nil and the
// decoding error.
func DecodeBody[T any](resp *Response, err error) (*T, error) {
	v := new(T)
	if len(resp.Body) > 0 {
		if derr := Decode(resp.Body, v); derr != nil {
			return nil, derr
		}
	}
	return v, err
}
