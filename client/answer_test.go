package client

import (
	"crypto/rand"
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
)

// The cost of binding an answer to its request, per forwarded answer:
// the dir host's digest and Ed25519 signature (sign), and the client's
// digest, key from the peer ID and verification (verify), for an answer
// of 2 KiB, about the size of a lookup's entry, head and proof.
func BenchmarkAnswerSignature(b *testing.B) {
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	to, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		b.Fatal(err)
	}
	req := &wire.Request{Method: wire.DirLookup, To: to.String(), Auth: &wire.AuthMsg{User: "ann@example.com", NodePeer: to.String(), Req: make([]byte, 32), Nonce: make([]byte, 12)}}
	resp := &wire.Response{Body: make([]byte, 2<<10)}
	rand.Read(resp.Body)
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			if resp.Sig, err = priv.Sign(wire.AnswerDigest(req.Auth, resp)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if err := verifyAnswer(to, req, resp); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An answer verifies only as the answer of the peer the request named,
// to that request: with the key an Ed25519 peer ID embeds, or with the
// key the answer names if it is the peer's (an ECDSA peer ID, as
// mocknet's, embeds none).
func TestVerifyAnswer(t *testing.T) {
	newPeer := func(typ int) (crypto.PrivKey, peer.ID) {
		priv, _, err := crypto.GenerateKeyPair(typ, 0)
		if err != nil {
			t.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		return priv, id
	}
	request := func(to peer.ID) *wire.Request {
		nonce := make([]byte, 12)
		rand.Read(nonce)
		return &wire.Request{Method: wire.DirWhich, To: to.String(), Auth: &wire.AuthMsg{User: "carol@example.com", NodePeer: to.String(), Req: make([]byte, 32), Nonce: nonce}}
	}
	sign := func(priv crypto.PrivKey, req *wire.Request, withKey bool) *wire.Response {
		resp := &wire.Response{Body: []byte("answer")}
		var err error
		if resp.Sig, err = priv.Sign(wire.AnswerDigest(req.Auth, resp)); err != nil {
			t.Fatal(err)
		}
		if withKey {
			if resp.Key, err = crypto.MarshalPublicKey(priv.GetPublic()); err != nil {
				t.Fatal(err)
			}
		}
		return resp
	}
	for _, typ := range []int{crypto.Ed25519, crypto.ECDSA} {
		host, to := newPeer(typ)
		relay, _ := newPeer(typ)
		ecdsa := typ == crypto.ECDSA
		req, other := request(to), request(to)
		for _, tc := range []struct {
			name string
			resp *wire.Response
			ok   bool
		}{
			{"the host's answer", sign(host, req, ecdsa), true},
			{"the host's answer with its key", sign(host, req, true), true},
			{"the host's answer to another request", sign(host, other, ecdsa), false},
			{"signed by another peer, with its key", sign(relay, req, true), false},
			{"signed by another peer", sign(relay, req, false), false},
		} {
			err := verifyAnswer(to, req, tc.resp)
			if (err == nil) != tc.ok {
				t.Errorf("key type %d, %s: %v, want ok=%v", typ, tc.name, err, tc.ok)
			}
		}
		err := checkAnswer(to, "via", req, &wire.Response{Body: []byte("answer")}, nil)
		if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), to.String()) {
			t.Errorf("unsigned answer: %v, want an Integrity error naming %s", err, to)
		}
		for _, relayErr := range []error{spindle.E(spindle.IO, "cannot reach"), spindle.E(spindle.Transient, "busy"), spindle.E(wire.SessionOp, spindle.Permission, "sign in")} {
			if err := checkAnswer(to, "via", req, &wire.Response{}, relayErr); err != nil {
				t.Errorf("the carrier's own error %v refused: %v", relayErr, err)
			}
		}
		if err := checkAnswer(to, "via", req, &wire.Response{}, spindle.E(spindle.Permission, "no")); !errors.Is(err, spindle.Integrity) {
			t.Errorf("unsigned refusal: %v, want an Integrity error", err)
		}
	}
}
