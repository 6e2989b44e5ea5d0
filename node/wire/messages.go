package wire

import (
	"spindle.dev"
	"spindle.dev/dirlog"
)

// The messages of each method. A field keeps one CBOR key in every
// message (a user name is 2, an entry 1, a log head 3), the key it had
// in the single request and response of version 1 of the protocol.

// An AuthRequest signs the peer in as Request.Auth's user, for the
// connection it came on.
type AuthRequest struct{}

// An AuthResponse carries the key cluster's note verifier key (as
// KeyVerifierResponse), with the error if signing in failed: a client
// checks which key cluster it reached without asking again.
//
// Erasure is the erasure code ("4+2") in which the node asks its users'
// clients to store the blocks they put through it (spin node -ec): each
// block as K data and M parity shards, which the node places apart.
// Empty means whole blocks, replicated; an older node sends none, and an
// older client ignores it and puts whole blocks, which any node takes.
//
// TakesBlocks says that the node takes the blocks of a small file with
// its entry, in DirBatchRequest.Blocks, and hands them back with the
// entry, in DirLookupResponse.Blocks: a put and a get each save a round
// trip. An older node sends false, and its clients send blocks apart.
type AuthResponse struct {
	Verifier    []byte `cbor:"4,keyasint,omitempty"`
	Erasure     string `cbor:"5,keyasint,omitempty"`
	TakesBlocks bool   `cbor:"24,keyasint,omitempty"`
}

// A KeyLookupRequest asks for User's key record (KeyLookup), or for the
// record as the key cluster's leader holds it (KeyLookupLeader), for a
// read after a write: a member that is not the leader, and a node that is
// no member, carry it to the leader.
type KeyLookupRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A KeyLookupResponse carries the record, as keylog.EncodeRecord.
type KeyLookupResponse struct {
	Record []byte `cbor:"4,keyasint,omitempty"`
}

// A KeyPutRequest asks the key cluster to record Record (encoded with
// keylog.EncodeRecord). Request.Auth proves possession of the record's
// key; Grant, for a new name under the domain policy, is the
// countersignature of the domain's admin key (keylog.GrantDigest).
type KeyPutRequest struct {
	Record []byte `cbor:"6,keyasint,omitempty"`
	Grant  []byte `cbor:"11,keyasint,omitempty"`
}

// A KeyPutResponse says the record was taken; it carries nothing.
type KeyPutResponse struct{}

// A KeyDomainRequest asks for the users whose names match Domain.
type KeyDomainRequest struct {
	Domain string `cbor:"4,keyasint,omitempty"`
}

// A KeyDomainResponse lists the users a KeyDomainRequest asked for.
type KeyDomainResponse struct {
	Users []spindle.UserName `cbor:"7,keyasint,omitempty"`
}

// A KeyHistoryRequest asks for the keys User has held.
type KeyHistoryRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A KeyHistoryResponse lists the keys, oldest first.
type KeyHistoryResponse struct {
	Keys []spindle.PublicKey `cbor:"8,keyasint,omitempty"`
}

// A KeyProofRequest asks for the proof of User's current record in the
// key cluster's transparency log, for clients that check it (see
// client.Config.KeyLog).
//
// Gossip asks the node to gossip the signed tree head of the proof, as a
// KeyGossipRequest of that head would, and to answer with what that
// would answer (KeyProofResponse.Heads): a client that has not gossiped
// the head it is about to see saves the round trip. A node that predates
// it answers Gossiped false, and the client gossips apart.
type KeyProofRequest struct {
	User   spindle.UserName `cbor:"2,keyasint,omitempty"`
	Gossip bool             `cbor:"25,keyasint,omitempty"`
}

// A KeyProofResponse carries a keylog.Proof, encoded, and if the request
// asked for Gossip and the node gossiped the proof's head, Gossiped and
// the heads a KeyGossipResponse would carry, which the client checks as
// it checks those.
type KeyProofResponse struct {
	Proof    []byte   `cbor:"4,keyasint,omitempty"`
	Heads    [][]byte `cbor:"12,keyasint,omitempty"`
	Gossiped bool     `cbor:"26,keyasint,omitempty"`
}

// A KeyProofsRequest asks for the proofs of every version of User's
// record.
type KeyProofsRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A KeyProofsResponse carries encoded keyraft.Proofs, oldest first.
type KeyProofsResponse struct {
	Proofs [][]byte `cbor:"9,keyasint,omitempty"`
}

// A KeyConsistencyRequest asks for a proof that the key log's tree of
// size Old is a prefix of its tree of size New.
type KeyConsistencyRequest struct {
	Old int64 `cbor:"5,keyasint,omitempty"`
	New int64 `cbor:"9,keyasint,omitempty"`
}

// A KeyConsistencyResponse carries the proof, as
// keylog.MarshalTreeProof, and Prefix, the hash of the answering member's
// tree of Old records: a client whose head of Old records differs keeps
// the two, with the proof, as evidence of a fork (keylog.Fork).
type KeyConsistencyResponse struct {
	Proof  []byte `cbor:"4,keyasint,omitempty"`
	Prefix []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyVerifierRequest asks for the note verifier key of the member's
// signatures on tree heads.
type KeyVerifierRequest struct{}

// A KeyVerifierResponse carries the verifier key.
type KeyVerifierResponse struct {
	Verifier []byte `cbor:"4,keyasint,omitempty"`
}

// A KeyHeadRequest asks for the key cluster's current tree head, signed
// by a majority of its members.
type KeyHeadRequest struct{}

// A KeyHeadResponse carries the signed tree head, a note.
type KeyHeadResponse struct {
	Head []byte `cbor:"4,keyasint,omitempty"`
}

// A KeyGossipRequest publishes Head, a signed tree head of the key log
// the client has verified, in the node's DHT among the heads of its size
// others published (see keylog.DecodeGossip), and asks for those.
type KeyGossipRequest struct {
	Head []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyGossipResponse carries the heads of Head's size published, as the
// DHT held them before Head joined them; the client checks their
// signatures.
type KeyGossipResponse struct {
	Heads [][]byte `cbor:"12,keyasint,omitempty"`
}

// A KeyConfigRequest asks for the key cluster's configuration changes
// after the first After, up to the configuration the signed tree head
// Head names.
type KeyConfigRequest struct {
	After int64  `cbor:"5,keyasint,omitempty"`
	Head  []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyConfigResponse carries the changes, each an encoded
// keylog.Proof in the head's tree, at most 256; a client following the
// members asks again for the rest.
type KeyConfigResponse struct {
	Proofs [][]byte `cbor:"9,keyasint,omitempty"`
}

// A KeyCosignRequest asks a key cluster member to sign Head, the text of
// a tree head of its log. Members ask each other, to gather a majority's
// signatures; a member signs only a tree and configuration its own log
// has, and only for another member.
type KeyCosignRequest struct {
	Head []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyCosignResponse carries the signed note.
type KeyCosignResponse struct {
	Signed []byte `cbor:"4,keyasint,omitempty"`
}

// A WitnessCosignRequest asks a witness (spin node -witness) to cosign
// Head, a tree head of the key cluster's log, with what the witness needs
// to check it (see package keyraft/witness): OldSize, the size of the
// tree the requester believes the witness cosigned last, and Proof
// (keylog.MarshalTreeProof) from it to Head's; the configuration changes
// after the first ConfigAfter up to the one Head names, each with its
// proof in Head's tree (keylog.MarshalProofs), if the witness lacks them.
type WitnessCosignRequest struct {
	Head        []byte   `cbor:"6,keyasint,omitempty"`
	OldSize     int64    `cbor:"1,keyasint,omitempty"`
	Proof       []byte   `cbor:"2,keyasint,omitempty"`
	ConfigAfter int64    `cbor:"3,keyasint,omitempty"`
	Config      [][]byte `cbor:"4,keyasint,omitempty"`
}

// A WitnessCosignResponse carries the witness's cosignature, one note
// signature line to add to the head. With an error of kind Stale, Head
// and Config say what the witness has: the newest head it cosigned and
// the configuration changes it knows; the requester asks again from them.
type WitnessCosignResponse struct {
	Sig    []byte `cbor:"1,keyasint,omitempty"`
	Head   []byte `cbor:"6,keyasint,omitempty"`
	Config int64  `cbor:"3,keyasint,omitempty"`
}

// A WitnessHeadRequest asks a witness what it has cosigned.
type WitnessHeadRequest struct{}

// A WitnessHeadResponse carries the newest head the witness cosigned (nil
// for none), the configuration changes it knows, and the note verifier
// key of its cosignatures.
type WitnessHeadResponse struct {
	Head     []byte `cbor:"6,keyasint,omitempty"`
	Config   int64  `cbor:"3,keyasint,omitempty"`
	Verifier []byte `cbor:"5,keyasint,omitempty"`
}

// A KeyStatusRequest asks for the key cluster as the member that answers
// sees it. A node that is no member carries it to a member.
type KeyStatusRequest struct{}

// A KeyStatusResponse carries the cluster's status.
type KeyStatusResponse struct {
	Status *ClusterStatus `cbor:"13,keyasint,omitempty"`
}

// A KeyChangeRequest asks the key cluster to apply Change, a
// keylog.EncodeChange signed by an operator (or the vouching node
// operator). A node that is no member carries it to a member, and a
// member to the leader.
type KeyChangeRequest struct {
	Change []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyChangeResponse says the change was applied; it carries nothing.
type KeyChangeResponse struct{}

// A KeyJoinRequest, of the operator protocol, without Change prepares
// the node to join its key cluster; with Change, an add-member change for
// the verifier key the first answer named, the node asks the cluster to
// add it and becomes a member.
type KeyJoinRequest struct {
	Change []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyJoinResponse carries the cluster's status and the verifier key
// the node signs tree heads with.
type KeyJoinResponse struct {
	Status   *ClusterStatus `cbor:"13,keyasint,omitempty"`
	Verifier []byte         `cbor:"4,keyasint,omitempty"`
}

// A KeyLeaveRequest, of the operator protocol, asks the node to leave its
// key cluster: Change is a remove-member change for the node.
type KeyLeaveRequest struct {
	Change []byte `cbor:"6,keyasint,omitempty"`
}

// A KeyLeaveResponse says the node left; it carries nothing.
type KeyLeaveResponse struct{}

// A NodeStatusRequest asks for the node's state. A node answers it on
// OperatorProtocol, to its operator, and on ClientProtocol only to a
// signed-in user it admits as a writer: what it holds, and when that
// grows, is its users' business, not a stranger's.
type NodeStatusRequest struct{}

// A NodeStatusResponse carries the node's state. Status.Logs, the
// directory logs the node hosts, travels only on OperatorProtocol.
type NodeStatusResponse struct {
	Status *Status `cbor:"11,keyasint,omitempty"`
}

// A DirHeadRequest asks for the head of User's directory log. Only users
// with a right in the tree get it (writers need it to sign their next
// entry).
type DirHeadRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A DirHeadResponse carries the head.
type DirHeadResponse struct {
	Head *dirlog.Head `cbor:"3,keyasint,omitempty"`
}

// A DirStepRequest asks for the consistency proof that User's log at
// sequence From (the head a client saw) is a prefix of the log at To (a
// head it was just given): see dirlog.CheckStep.
type DirStepRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
	From int64            `cbor:"5,keyasint,omitempty"`
	To   int64            `cbor:"9,keyasint,omitempty"`
}

// A DirStepResponse carries the proof, as dirlog.ConsistencyProof.Marshal
// encodes it.
type DirStepResponse struct {
	Proof []byte `cbor:"4,keyasint,omitempty"`
}

// A DirMapStepRequest asks, for User, the owner, the map step of User's
// log from sequence From to the host's head: see dirlog.CheckMapStep.
type DirMapStepRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
	From int64            `cbor:"5,keyasint,omitempty"`
}

// A DirMapStepResponse carries the step, as dirlog.MapStep.Marshal
// encodes it.
type DirMapStepResponse struct {
	Step []byte `cbor:"4,keyasint,omitempty"`
}

// A DirAppendRequest asks the sequencer of a tree to append Entry, a
// dirlog entry its writer signed, encoded.
type DirAppendRequest struct {
	Entry []byte `cbor:"6,keyasint,omitempty"`
}

// A DirAppendResponse carries the entry as appended.
type DirAppendResponse struct {
	Entry *spindle.DirEntry `cbor:"1,keyasint,omitempty"`
}

// A DirBatchRequest (dir.appendbatch) asks the sequencer to append
// Entries, at most dirlog.MaxBatch encoded entries of one tree, in
// order. A node that does not know the method answers with an error of
// Op UnknownOp, and the client appends one at a time.
//
// Blocks, sent only to a node whose AuthResponse.TakesBlocks is set and
// only to the client's own node (never with Request.To), are blocks the
// entries name, at most MaxInlineBlocks of at most MaxInlineBlock bytes:
// the node stores them, as a block put through it would, before it
// appends, and appends nothing if one fails.
type DirBatchRequest struct {
	Entries [][]byte `cbor:"8,keyasint,omitempty"`
	Blocks  [][]byte `cbor:"22,keyasint,omitempty"`
}

// The bounds of the blocks a request or an answer of the client protocol
// carries with entries (DirBatchRequest.Blocks, DirLookupResponse.Blocks):
// the blocks of a small file, which would cost a round trip of their own.
const (
	MaxInlineBlocks = 4
	MaxInlineBlock  = 64 << 10
)

// A DirBatchResponse carries the entries appended, those before the
// first that failed, whose error the Response carries.
type DirBatchResponse struct {
	Entries []*spindle.DirEntry `cbor:"2,keyasint,omitempty"`
}

// A DirLookupRequest asks for the entry of Name: in the tree's current
// state, or, if At or AtTime is set, in the state after entry At (At
// entries before the head if negative) or at AtTime (Unix nanoseconds),
// proved against a head of that state (see dirlog/host's LookupProvedAt).
// A node that predates them answers with the current state, under a head
// of another sequence, which the client refuses.
//
// WithBlocks asks for the blocks of the file found too, if it has at
// most MaxInlineBlocks of at most MaxInlineBlock bytes (see
// DirLookupResponse.Blocks); a node that predates it sends none.
//
// StepFrom, if positive, is the sequence of the newest head of the tree
// the client has seen (or the one it checks steps from): if the answer's
// head is past it, the host adds the answers to the requests the client
// would make next to check the step (see StepAnswers).
type DirLookupRequest struct {
	Name       spindle.PathName `cbor:"3,keyasint,omitempty"`
	At         int64            `cbor:"20,keyasint,omitempty"`
	AtTime     int64            `cbor:"21,keyasint,omitempty"`
	WithBlocks bool             `cbor:"23,keyasint,omitempty"`
	StepFrom   int64            `cbor:"28,keyasint,omitempty"`
}

// StepAnswers are the answers, added to an answer whose head is past the
// head the client has seen (StepFrom), to the requests the client makes
// to check that step (dir.step, and for the tree's owner dir.mapstep and
// the first dir.entries), each as that method's answer would carry it,
// for From to the answer's head; a part the host cannot give is left out,
// and the client asks for it. The client checks them as it checks those
// answers: nothing is taken on trust that was not before.
type StepAnswers struct {
	From    int64    `cbor:"1,keyasint,omitempty"`
	Proof   []byte   `cbor:"2,keyasint,omitempty"` // DirStepResponse.Proof, From to the head.
	MapStep []byte   `cbor:"3,keyasint,omitempty"` // DirMapStepResponse.Step from From.
	Log     [][]byte `cbor:"4,keyasint,omitempty"` // DirEntriesResponse.Log from From+1.
}

// A StepAnswering answer may carry StepAnswers.
type StepAnswering interface {
	StepAnswers() *StepAnswers
}

// StepAnswers returns r.Step.
func (r *DirLookupResponse) StepAnswers() *StepAnswers { return r.Step }

// StepAnswers returns r.Step.
func (r *DirWhichResponse) StepAnswers() *StepAnswers { return r.Step }

// A DirLookupResponse carries the entry, with Head and Proofs: the proof
// (a dirlog.Proved, encoded) of the answer against Head, followed for
// NotExist by its Above, root first. A lookup that stops at a link
// carries the link's entry and the error together.
//
// Blocks, if WithBlocks asked for them, are blocks the entry names that
// the node holds, in the entry's order, from the first; the node may
// leave out any. The client checks each as it checks a block it fetches:
// its hash against the entry's reference, which the writer signed.
// BlockErr, an encoded *spindle.Error, is what a block get of the client
// from its node would have answered for the block after those, if the
// node found its copy damaged and could get no other: the node's check
// moved the copy aside, and a get now would not say why. Step
// answers the check of the step to Head if StepFrom asked for it.
type DirLookupResponse struct {
	Entry    *spindle.DirEntry `cbor:"1,keyasint,omitempty"`
	Head     *dirlog.Head      `cbor:"3,keyasint,omitempty"`
	Proofs   [][]byte          `cbor:"10,keyasint,omitempty"`
	Blocks   [][]byte          `cbor:"22,keyasint,omitempty"`
	Step     *StepAnswers      `cbor:"27,keyasint,omitempty"`
	BlockErr []byte            `cbor:"30,keyasint,omitempty"`
}

// A DirGlobRequest asks for the entries that match Pattern, in the
// current state or one before, as a DirLookupRequest names it.
type DirGlobRequest struct {
	Pattern string `cbor:"4,keyasint,omitempty"`
	At      int64  `cbor:"20,keyasint,omitempty"`
	AtTime  int64  `cbor:"21,keyasint,omitempty"`
}

// A DirGlobResponse carries the entries with Head and a proof of each
// against it, in order.
type DirGlobResponse struct {
	Entries []*spindle.DirEntry `cbor:"2,keyasint,omitempty"`
	Head    *dirlog.Head        `cbor:"3,keyasint,omitempty"`
	Proofs  [][]byte            `cbor:"10,keyasint,omitempty"`
}

// A DirWhichRequest (dir.whichaccess) asks for the Access file that
// governs Name.
//
// StepFrom is as a DirLookupRequest's. WithKeys asks for the proofs of
// the key records of the users the Access file found names as readers
// (DirWhichResponse.KeyProofs), which a writer wraps a new file's key
// for; a node that predates it sends none.
type DirWhichRequest struct {
	Name     spindle.PathName `cbor:"3,keyasint,omitempty"`
	StepFrom int64            `cbor:"28,keyasint,omitempty"`
	WithKeys bool             `cbor:"29,keyasint,omitempty"`
}

// MaxKeyProofs bounds the key proofs a DirWhichResponse carries.
const MaxKeyProofs = 8

// A DirWhichResponse carries the Access file's entry (nil if none
// governs), with Head and Proofs: the governing file's proof (empty if
// none governs) and then the absence of each nearer one, nearest first;
// and Step, as a DirLookupResponse's.
//
// KeyProofs, if WithKeys asked for them, are, for at most MaxKeyProofs
// of the users the Access file names as readers (by name: not through
// groups or wildcards, nor the requester), the proofs a KeyProofResponse
// would carry; the client checks each as it checks those.
type DirWhichResponse struct {
	Entry     *spindle.DirEntry `cbor:"1,keyasint,omitempty"`
	Head      *dirlog.Head      `cbor:"3,keyasint,omitempty"`
	Proofs    [][]byte          `cbor:"10,keyasint,omitempty"`
	Step      *StepAnswers      `cbor:"27,keyasint,omitempty"`
	KeyProofs [][]byte          `cbor:"29,keyasint,omitempty"`
}

// A WatchRequest, the first message on WatchProtocol, asks for the events
// under Name from sequence Seq of its log.
type WatchRequest struct {
	Name spindle.PathName `cbor:"3,keyasint,omitempty"`
	Seq  int64            `cbor:"5,keyasint,omitempty"`
}

// A WatchEvent is each message that follows a WatchRequest. Err, if set,
// is an encoded *spindle.Error.
type WatchEvent struct {
	Entry  *spindle.DirEntry `cbor:"1,keyasint,omitempty"`
	Err    []byte            `cbor:"5,keyasint,omitempty"`
	Delete bool              `cbor:"6,keyasint,omitempty"`
}

// A DirEntriesRequest asks for User's log entries from sequence From, at
// most Max of them.
type DirEntriesRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
	From int64            `cbor:"5,keyasint,omitempty"`
	Max  int64            `cbor:"9,keyasint,omitempty"`
}

// A DirEntriesResponse carries the entries, each an encoded dirlog
// entry.
type DirEntriesResponse struct {
	Log [][]byte `cbor:"12,keyasint,omitempty"`
}

// A DirMirrorRequest is a DirEntriesRequest from another dir host of the
// user (a mirror), which a node answers only to a peer that the user's key
// record names as a dir host.
type DirMirrorRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
	From int64            `cbor:"5,keyasint,omitempty"`
	Max  int64            `cbor:"9,keyasint,omitempty"`
}

// A DirMirrorResponse carries the entries from From and Head; or, if the
// entries from From were compacted, Checkpoint (the dirlog.Checkpoint the
// log starts with, encoded) and Head, and the mirror asks again after it.
type DirMirrorResponse struct {
	Log        [][]byte     `cbor:"12,keyasint,omitempty"`
	Head       *dirlog.Head `cbor:"3,keyasint,omitempty"`
	Checkpoint []byte       `cbor:"4,keyasint,omitempty"`
}

// A DirNudgeRequest tells a node that User's log or key record changed,
// so that a node mirroring it pulls now. Anyone may send it; the node
// checks the record itself.
type DirNudgeRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A DirNudgeResponse carries nothing.
type DirNudgeResponse struct{}

// A DirCosignRequest asks another dir host of Head's user to cosign Head
// (see dirlog.Head.Cosign): the host that signed it asks, so that the
// heads it serves carry as many cosignatures as the user's key record
// asks for (spindle.User.DirQuorum). A node cosigns only for a peer the
// record names as a dir host, and only a head whose sequence, hash, map
// root and log root are those of its own replay of the log.
type DirCosignRequest struct {
	Head *dirlog.Head `cbor:"3,keyasint,omitempty"`
}

// A DirCosignResponse carries the cosignature.
type DirCosignResponse struct {
	Cosig *dirlog.Cosig `cbor:"1,keyasint,omitempty"`
}

// A DirCheckpointRequest asks for the checkpoint User's log starts with
// once compacted; its entries follow it from its Seq+1 (see
// DirEntriesRequest).
type DirCheckpointRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A DirCheckpointResponse carries the dirlog.Checkpoint, encoded; empty
// if the log is whole.
type DirCheckpointResponse struct {
	Checkpoint []byte `cbor:"4,keyasint,omitempty"`
}

// A DirPublishedRequest asks for the newest head of User's log published
// in the node's DHT, for a reader to compare with the heads hosts serve.
type DirPublishedRequest struct {
	User spindle.UserName `cbor:"2,keyasint,omitempty"`
}

// A DirPublishedResponse carries the head. The client checks its signer
// against the key record.
type DirPublishedResponse struct {
	Head *dirlog.Head `cbor:"3,keyasint,omitempty"`
}

// A LogAnswer is an answer that carries the head of a directory log,
// which a client checks against the newest head it has seen.
type LogAnswer interface {
	LogHead() *dirlog.Head
}

// LogHead returns r.Head.
func (r *DirHeadResponse) LogHead() *dirlog.Head { return r.Head }

// LogHead returns r.Head.
func (r *DirLookupResponse) LogHead() *dirlog.Head { return r.Head }

// LogHead returns r.Head.
func (r *DirGlobResponse) LogHead() *dirlog.Head { return r.Head }

// LogHead returns r.Head.
func (r *DirWhichResponse) LogHead() *dirlog.Head { return r.Head }

// A NodeBackupRequest, of the operator protocol, asks the node to write a
// backup of its state to Dest, an absolute path on its machine that does
// not exist yet.
type NodeBackupRequest struct {
	Dest string `cbor:"1,keyasint"`
}

// A NodeBackupResponse says what the backup holds: the node's peer ID,
// whether its key cluster replica, and the directory logs it copied and
// those it left out as damaged.
type NodeBackupResponse struct {
	Peer       string             `cbor:"1,keyasint"`
	KeyCluster bool               `cbor:"2,keyasint,omitempty"`
	Logs       []spindle.UserName `cbor:"3,keyasint,omitempty"`
	Damaged    []spindle.UserName `cbor:"4,keyasint,omitempty"`
}
