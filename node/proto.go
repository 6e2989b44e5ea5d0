package node

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/fxamacker/cbor/v2"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// The protocols a node serves besides the block exchange.
const (
	// ClientProtocol carries a client's requests: one request and one
	// response per stream, each a CBOR-encoded message.
	ClientProtocol = "/spindle/client/1"
	// WatchProtocol carries one Watch: a request, then a stream of events.
	WatchProtocol = "/spindle/watch/1"
	// RaftProtocol carries the key cluster's Raft traffic.
	RaftProtocol = "/spindle/raft/1"
)

// maxMessage bounds a client request or response: room for the entry of a
// file of some 100 GiB (1 MiB blocks) or a long Glob answer.
const maxMessage = 16 << 20

// Methods of the client protocol.
const (
	mAuth       = "auth"
	mKeyLookup  = "key.lookup"
	mKeyPut     = "key.put"
	mKeyDomain  = "key.domain"
	mKeyHistory = "key.history"
	// Proved lookups, for clients that check the key cluster's
	// transparency log (see ClientConfig.KeyLog).
	mKeyProof       = "key.proof"       // User → Data: a keyraft.Proof of the current record.
	mKeyProofs      = "key.proofs"      // User → Proofs: every version's keyraft.Proof, oldest first.
	mKeyConsistency = "key.consistency" // Seq, Size → Data: a consistency proof between the two tree sizes.
	mKeyVerifier    = "key.verifier"    // → Data: the note verifier key of the cluster's tree heads.
	mDirHead        = "dir.head"
	mDirAppend      = "dir.append"
	mDirBatch       = "dir.appendbatch"
	mDirLookup      = "dir.lookup"
	mDirGlob        = "dir.glob"
	mDirWhich       = "dir.whichaccess"
	mDirWatch       = "dir.watch"
)

// request is a message of the client protocol. Which fields are used depends
// on Method.
type request struct {
	Method  string           `cbor:"1,keyasint"`
	User    spindle.UserName `cbor:"2,keyasint,omitempty"`
	Name    spindle.PathName `cbor:"3,keyasint,omitempty"`
	Pattern string           `cbor:"4,keyasint,omitempty"`
	Seq     int64            `cbor:"5,keyasint,omitempty"`
	Data    []byte           `cbor:"6,keyasint,omitempty"` // An encoded dirlog entry or key record.
	Auth    *authMsg         `cbor:"7,keyasint,omitempty"`
	Batch   [][]byte         `cbor:"8,keyasint,omitempty"` // Encoded dirlog entries, for dir.appendbatch.
	Size    int64            `cbor:"9,keyasint,omitempty"` // The larger tree size, for key.consistency.
}

// response answers a request. Err, if set, is an encoded *spindle.Error;
// it travels beside the other fields because some answers carry both, such
// as a Lookup that stops at a link.
type response struct {
	Entry   *spindle.DirEntry   `cbor:"1,keyasint,omitempty"`
	Users   []spindle.UserName  `cbor:"7,keyasint,omitempty"`
	Keys    []spindle.PublicKey `cbor:"8,keyasint,omitempty"`
	Entries []*spindle.DirEntry `cbor:"2,keyasint,omitempty"`
	Head    *dirlog.Head        `cbor:"3,keyasint,omitempty"`
	Data    []byte              `cbor:"4,keyasint,omitempty"`
	Err     []byte              `cbor:"5,keyasint,omitempty"`
	Delete  bool                `cbor:"6,keyasint,omitempty"` // For watch events.
	Proofs  [][]byte            `cbor:"9,keyasint,omitempty"` // Encoded keyraft.Proofs, for key.proofs.
}

// authMsg proves that the client's peer acts for User: the user signs the
// two peer IDs and the time, and the node checks the signature with the key
// cluster's record. The connection's security protocol (TLS or Noise over
// the network, LocalSecurity over the node's socket) has already
// authenticated the client's peer ID, so a copied authMsg is useless to
// any other peer.
type authMsg struct {
	User       spindle.UserName  `cbor:"1,keyasint"`
	ClientPeer string            `cbor:"2,keyasint"`
	NodePeer   string            `cbor:"3,keyasint"`
	Time       spindle.Time      `cbor:"4,keyasint"`
	Sig        spindle.Signature `cbor:"5,keyasint"`
}

func (a *authMsg) digest() []byte {
	h := sha256.New()
	h.Write([]byte("spindle.dev client auth v1\x00"))
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

func encode(v any) ([]byte, error) { return encMode.Marshal(v) }

func decode(data []byte, v any) error {
	if err := decMode.Unmarshal(data, v); err != nil {
		return spindle.E(spindle.Invalid, "malformed message: "+err.Error())
	}
	return nil
}

// errBytes encodes err for a response.
func errBytes(err error) []byte {
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
