package p2p

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
)

// A PeerSigner signs with a host's identity key, as the peer a key record
// names: a node signs the heads of the logs it hosts with it (it has the
// methods of dirlog.HeadSigner), so that a reader who knows the node's
// peer ID from the owner's key record needs no other key to check them.
type PeerSigner struct {
	id   peer.ID
	priv crypto.PrivKey
	pub  []byte
}

// NewPeerSigner returns the signer of h's identity.
func NewPeerSigner(h host.Host) (*PeerSigner, error) {
	const op spindle.Op = "p2p.NewPeerSigner"
	priv := h.Peerstore().PrivKey(h.ID())
	if priv == nil {
		return nil, spindle.E(op, spindle.Internal, "host has no private key for its peer ID")
	}
	pub, err := crypto.MarshalPublicKey(priv.GetPublic())
	if err != nil {
		return nil, spindle.E(op, spindle.Internal, err)
	}
	return &PeerSigner{id: h.ID(), priv: priv, pub: pub}, nil
}

// HostID returns the signer's peer ID.
func (s *PeerSigner) HostID() string { return s.id.String() }

// HostKey returns the signer's public key in libp2p's encoding.
func (s *PeerSigner) HostKey() []byte { return s.pub }

// Sign signs digest.
func (s *PeerSigner) Sign(digest []byte) (spindle.Signature, error) {
	sig, err := s.priv.Sign(digest)
	if err != nil {
		return nil, spindle.E(spindle.Op("p2p.PeerSigner.Sign"), spindle.Internal, err)
	}
	return sig, nil
}

// VerifyPeerSig checks that key, a public key in libp2p's encoding, is the
// key of the peer whose ID is id, and that sig is its signature of digest.
func VerifyPeerSig(id string, key, digest, sig []byte) error {
	pid, err := peer.Decode(id)
	if err != nil {
		return fmt.Errorf("bad peer ID %q: %v", id, err)
	}
	pk, err := crypto.UnmarshalPublicKey(key)
	if err != nil {
		return fmt.Errorf("bad public key of %s: %v", id, err)
	}
	if !pid.MatchesPublicKey(pk) {
		return fmt.Errorf("the key offered is not the key of %s", id)
	}
	ok, err := pk.Verify(digest, sig)
	if err != nil || !ok {
		return fmt.Errorf("signature of %s does not verify", id)
	}
	return nil
}
