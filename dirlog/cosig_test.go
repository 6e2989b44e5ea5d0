package dirlog

import (
	"bytes"
	"fmt"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog/dirlogtest"
)

// hostsVerifier accepts the heads and cosignatures of any of its hosts, as
// a reader that knows them all as the user's dir hosts would.
type hostsVerifier []*dirlogtest.Signer

func (v hostsVerifier) VerifyHead(user spindle.UserName, host string, key, digest, sig []byte) error {
	for _, s := range v {
		if s.HostID() == host {
			return s.VerifyHead(user, host, key, digest, sig)
		}
	}
	return fmt.Errorf("%s is not a dir host of %s", host, user)
}

// cosignVector is the cosign digest of a fixed head.
const cosignVector = "df4d771e0fdb6883b5152129aa5cf6abed62f737f8e568ec08a62efe9b4ac954"

// asSigned returns a copy of h as s would sign it.
func asSigned(h *Head, s *dirlogtest.Signer) *Head {
	c := *h
	c.Host = s.HostID()
	return &c
}

// A head's cosignatures are counted only when valid, by distinct hosts of
// the user other than its signer; they survive the encoding (version 4),
// leave the head's digest and signature alone, and are never a head's
// signature.
func TestHeadCosigs(t *testing.T) {
	a, b, c := newSigner(t, "a.host"), newSigner(t, "b.host"), newSigner(t, "c.host")
	stranger := newSigner(t, "d.host")
	v := hostsVerifier{a, b, c}
	h := &Head{User: ann, Seq: 3, Time: 9}
	h.Hash[0], h.Root[0], h.LogRoot[0] = 1, 2, 3
	if err := h.Sign(a); err != nil {
		t.Fatal(err)
	}
	digest := h.Digest()
	v3 := h.Marshal()
	if err := h.VerifyCosigs(v, 0); err != nil {
		t.Fatalf("quorum 0: %v", err)
	}
	wantKind(t, h.VerifyCosigs(v, 1), spindle.Integrity, "no cosignature for a quorum of 1")

	cosign := func(s *dirlogtest.Signer) Cosig {
		cs, err := h.Cosign(s)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	self, byB, byC, byD := cosign(a), cosign(b), cosign(c), cosign(stranger)
	h.Cosigs = []Cosig{self, byD, byB, byB}
	wantKind(t, h.VerifyCosigs(v, 2), spindle.Integrity, "the signer, a stranger and one host twice for a quorum of 2")
	if err := h.VerifyCosigs(v, 1); err != nil {
		t.Fatalf("one other host for a quorum of 1: %v", err)
	}
	forged := byC
	forged.Sig = h.Sig // The head's signature is no cosignature.
	h.Cosigs = []Cosig{byB, forged}
	wantKind(t, h.VerifyCosigs(v, 2), spindle.Integrity, "a head signature as a cosignature")
	for _, s := range v {
		if d := h.CosignDigest(s.HostID()); bytes.HasPrefix(d, digest) || bytes.Equal(d, asSigned(h, s).Digest()) {
			t.Fatalf("%s cosigns the digest of a head", s.HostID())
		}
	}
	// The digest is pinned: a change of its context or layout would
	// make every cosignature made before it invalid.
	pinned := &Head{User: ann, Seq: 1, Host: "a.host"}
	if got := fmt.Sprintf("%x", pinned.CosignDigest("b.host")); got != cosignVector {
		t.Errorf("CosignDigest = %s, want %s", got, cosignVector)
	}
	asHead := *h
	asHead.Host, asHead.HostKey, asHead.Sig = byB.Host, byB.HostKey, byB.Sig
	wantKind(t, asHead.Verify(v), spindle.Integrity, "a cosignature as a head signature")
	h.Cosigs = []Cosig{byB, byC}
	if err := h.VerifyCosigs(v, 2); err != nil {
		t.Fatalf("two other hosts for a quorum of 2: %v", err)
	}
	if !bytes.Equal(h.Digest(), digest) || h.Verify(v) != nil {
		t.Fatal("cosignatures changed the head's digest or signature")
	}

	enc := h.Marshal()
	if !bytes.HasPrefix(enc, []byte("SPDLH4")) || !bytes.HasPrefix(v3, []byte("SPDLH3")) {
		t.Fatalf("encoded as %q with cosignatures, %q without", enc[:6], v3[:6])
	}
	dec, err := UnmarshalHead(enc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dec.Marshal(), enc) || dec.Verify(v) != nil || dec.VerifyCosigs(v, 2) != nil {
		t.Fatalf("round trip: %+v", dec)
	}
	// Version 4 with no cosignatures is not canonical.
	empty := append([]byte("SPDLH4"), v3[6:]...)
	_, err = UnmarshalHead(append(empty, 0))
	wantKind(t, err, spindle.Invalid, "version 4 with no cosignatures")
}
