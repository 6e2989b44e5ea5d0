// Package wiretest helps tests of the client protocol write a request of
// any method in one literal, and read or alter any answer, as tests that
// play a misbehaving node do.
//
// It relies on a rule of package wire: a field keeps one CBOR key in the
// body of every method. So the union of the bodies' fields, each under
// its key, encodes the body of any method, and decodes from it.
package wiretest

import (
	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// A Request is a request of any method: the envelope's fields and the
// union of the bodies' fields. Encoded (it implements cbor.Marshaler), it
// is a wire.Request whose body holds the fields that are set.
type Request struct {
	Method string
	Auth   *wire.AuthMsg
	To     string

	User    spindle.UserName
	Name    spindle.PathName
	Pattern string
	Seq     int64
	Data    []byte
	Batch   [][]byte
	Size    int64
	Grant   []byte
	At      int64 // A read of the past (DirLookupRequest.At).

	Blocks     [][]byte // Blocks with entries (DirBatchRequest.Blocks).
	WithBlocks bool     // DirLookupRequest.WithBlocks.
	Gossip     bool     // KeyProofRequest.Gossip.
	StepFrom   int64    // DirLookupRequest.StepFrom.
	WithKeys   bool     // DirWhichRequest.WithKeys.
}

// body is the union of the request bodies' fields.
type body struct {
	User    spindle.UserName `cbor:"2,keyasint,omitempty"`
	Name    spindle.PathName `cbor:"3,keyasint,omitempty"`
	Pattern string           `cbor:"4,keyasint,omitempty"`
	Seq     int64            `cbor:"5,keyasint,omitempty"`
	Data    []byte           `cbor:"6,keyasint,omitempty"`
	Batch   [][]byte         `cbor:"8,keyasint,omitempty"`
	Size    int64            `cbor:"9,keyasint,omitempty"`
	Grant   []byte           `cbor:"11,keyasint,omitempty"`
	At      int64            `cbor:"20,keyasint,omitempty"`

	Blocks     [][]byte `cbor:"22,keyasint,omitempty"`
	WithBlocks bool     `cbor:"23,keyasint,omitempty"`
	Gossip     bool     `cbor:"25,keyasint,omitempty"`
	StepFrom   int64    `cbor:"28,keyasint,omitempty"`
	WithKeys   bool     `cbor:"29,keyasint,omitempty"`
}

// Envelope returns r as the wire.Request it encodes as.
func (r Request) Envelope() *wire.Request {
	b, err := wire.Encode(&body{r.User, r.Name, r.Pattern, r.Seq, r.Data, r.Batch, r.Size, r.Grant, r.At, r.Blocks, r.WithBlocks, r.Gossip, r.StepFrom, r.WithKeys})
	if err != nil {
		panic(err)
	}
	return &wire.Request{Method: r.Method, Auth: r.Auth, To: r.To, Body: b}
}

// MarshalCBOR encodes r as a wire.Request.
func (r Request) MarshalCBOR() ([]byte, error) { return wire.Encode(r.Envelope()) }

// UnmarshalCBOR decodes a wire.Request into r.
func (r *Request) UnmarshalCBOR(data []byte) error {
	var env wire.Request
	if err := wire.Decode(data, &env); err != nil {
		return err
	}
	var b body
	if len(env.Body) > 0 {
		if err := wire.Decode(env.Body, &b); err != nil {
			return err
		}
	}
	*r = Request{env.Method, env.Auth, env.To, b.User, b.Name, b.Pattern, b.Seq, b.Data, b.Batch, b.Size, b.Grant, b.At, b.Blocks, b.WithBlocks, b.Gossip, b.StepFrom, b.WithKeys}
	return nil
}

// SignedDigest returns wire.SignedDigest of r's envelope.
func SignedDigest(r *Request) ([]byte, error) { return wire.SignedDigest(r.Envelope()) }

// A Response is an answer of any method: the union of the response
// bodies' fields, and the envelope's. Encoded (it implements
// cbor.Marshaler), it is a wire.Response whose body holds the fields that
// are set.
type Response struct {
	Entry     *spindle.DirEntry   `cbor:"1,keyasint,omitempty"`
	Entries   []*spindle.DirEntry `cbor:"2,keyasint,omitempty"`
	Head      *dirlog.Head        `cbor:"3,keyasint,omitempty"`
	Data      []byte              `cbor:"4,keyasint,omitempty"`
	Users     []spindle.UserName  `cbor:"7,keyasint,omitempty"`
	Keys      []spindle.PublicKey `cbor:"8,keyasint,omitempty"`
	Proofs    [][]byte            `cbor:"9,keyasint,omitempty"`
	DirProofs [][]byte            `cbor:"10,keyasint,omitempty"`
	Status    *wire.Status        `cbor:"11,keyasint,omitempty"`
	Log       [][]byte            `cbor:"12,keyasint,omitempty"`
	KeyStatus *wire.ClusterStatus `cbor:"13,keyasint,omitempty"`

	Blocks      [][]byte          `cbor:"22,keyasint,omitempty"` // DirLookupResponse.Blocks.
	TakesBlocks bool              `cbor:"24,keyasint,omitempty"` // AuthResponse.TakesBlocks.
	Gossiped    bool              `cbor:"26,keyasint,omitempty"` // KeyProofResponse.Gossiped.
	Step        *wire.StepAnswers `cbor:"27,keyasint,omitempty"` // DirLookupResponse.Step.
	KeyProofs   [][]byte          `cbor:"29,keyasint,omitempty"` // DirWhichResponse.KeyProofs.
	BlockErr    []byte            `cbor:"30,keyasint,omitempty"` // DirLookupResponse.BlockErr.

	Err       []byte `cbor:"-"` // An encoded *spindle.Error.
	NotLeader bool   `cbor:"-"`
	// Key and Sig are the answering node's signature of the answer to a
	// request signed for it (wire.Response.Sig), kept as they came: a
	// test that alters the answer leaves them, and the client catches it.
	Key []byte `cbor:"-"`
	Sig []byte `cbor:"-"`
}

// respBody is Response without its methods, to encode its body.
type respBody Response

// MarshalCBOR encodes r as a wire.Response.
func (r Response) MarshalCBOR() ([]byte, error) {
	b, err := wire.Encode((*respBody)(&r))
	if err != nil {
		return nil, err
	}
	return wire.Encode(&wire.Response{Body: b, Err: r.Err, NotLeader: r.NotLeader, Key: r.Key, Sig: r.Sig})
}

// UnmarshalCBOR decodes a wire.Response into r.
func (r *Response) UnmarshalCBOR(data []byte) error {
	var env wire.Response
	if err := wire.Decode(data, &env); err != nil {
		return err
	}
	var b respBody
	if len(env.Body) > 0 {
		if err := wire.Decode(env.Body, &b); err != nil {
			return err
		}
	}
	*r = Response(b)
	r.Err, r.NotLeader, r.Key, r.Sig = env.Err, env.NotLeader, env.Key, env.Sig
	return nil
}

// DecodeResponse decodes an encoded answer, returning with it the error
// it carries, if any.
func DecodeResponse(out []byte) (*Response, error) {
	var resp Response
	if err := wire.Decode(out, &resp); err != nil {
		return nil, err
	}
	if resp.Err != nil {
		return &resp, spindle.UnmarshalError(resp.Err)
	}
	return &resp, nil
}
