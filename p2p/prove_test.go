package p2p_test

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

// A holder proves it holds a block; a peer that holds none, or answers
// with anything but the proof the block gives, does not.
func TestProveHolding(t *testing.T) {
	ctx := context.Background()
	data := []byte("a block worth keeping")
	ref := blocks.RefOf(data)

	t.Run("holder", func(t *testing.T) {
		net := p2ptest.NewNet(t, 2)
		serve(t, net.Hosts[0], p2p.BlockServerConfig{CanPut: allowAll})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		if err := r.Prove(ctx, ref, blocks.NewChallenge(data)); !errors.Is(err, spindle.NotExist) {
			t.Fatalf("Prove of a block not held: %v, want NotExist", err)
		}
		if _, err := r.Put(ctx, data); err != nil {
			t.Fatal(err)
		}
		for range 3 { // A fresh nonce each time.
			if err := r.Prove(ctx, ref, blocks.NewChallenge(data)); err != nil {
				t.Fatalf("Prove by a holder: %v", err)
			}
		}
		// The challenger's own copy decides: other bytes fail.
		if err := r.Prove(ctx, ref, blocks.NewChallenge([]byte("another block"))); !errors.Is(err, p2p.ErrProofFailed) || !errors.Is(err, spindle.Integrity) {
			t.Fatalf("Prove against other bytes: %v, want Integrity, ErrProofFailed", err)
		}
	})

	t.Run("held hook", func(t *testing.T) {
		// Held answers for the copy kept, not what Get would fetch.
		net := p2ptest.NewNet(t, 2)
		serve(t, net.Hosts[0], p2p.BlockServerConfig{
			CanPut: allowAll,
			Held: func(context.Context, spindle.Ref) ([]byte, error) {
				return nil, spindle.E(spindle.NotExist, "not kept here")
			},
		})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		if _, err := r.Put(ctx, data); err != nil {
			t.Fatal(err)
		}
		if err := r.Prove(ctx, ref, blocks.NewChallenge(data)); !errors.Is(err, spindle.NotExist) {
			t.Fatalf("Prove with Held saying no copy: %v, want NotExist", err)
		}
	})

	liars := map[string]func(self, other []byte) func(op byte, id, body []byte) []byte{
		"random answer": func(_, _ []byte) func(op byte, id, body []byte) []byte {
			return func(op byte, id, body []byte) []byte {
				p := make([]byte, blocks.ProofSize)
				rand.Read(p)
				return frame([]byte{0}, id, p)
			}
		},
		// A sybil that passes the challenge on to an honest holder hands
		// back an answer bound to the honest holder's ID.
		"relayed answer": func(_, honest []byte) func(op byte, id, body []byte) []byte {
			return func(op byte, id, body []byte) []byte {
				p := blocks.ChallengeWith([blocks.NonceSize]byte(body), data).Answer(string(honest))
				return frame([]byte{0}, id, p[:])
			}
		},
		"answer without the nonce": func(self, _ []byte) func(op byte, id, body []byte) []byte {
			return func(op byte, id, body []byte) []byte {
				p := blocks.ChallengeWith([blocks.NonceSize]byte{}, data).Answer(string(self))
				return frame([]byte{0}, id, p[:])
			}
		},
		"short answer": func(_, _ []byte) func(op byte, id, body []byte) []byte {
			return func(op byte, id, body []byte) []byte { return frame([]byte{0}, id, []byte{1}) }
		},
	}
	for name, liar := range liars {
		t.Run(name, func(t *testing.T) {
			net := p2ptest.NewNet(t, 3)
			hostileServer(net.Hosts[0], liar([]byte(net.Hosts[0].ID()), []byte(net.Hosts[2].ID())))
			err := remote(t, net.Hosts[1], net.Hosts[0].ID()).Prove(ctx, ref, blocks.NewChallenge(data))
			if err == nil {
				t.Fatal("Prove passed a peer that does not hold the block")
			}
			if name == "short answer" {
				if !errors.Is(err, spindle.Invalid) {
					t.Fatalf("Prove answered with one byte: %v, want Invalid", err)
				}
				return
			}
			if !errors.Is(err, p2p.ErrProofFailed) || !errors.Is(err, spindle.Integrity) {
				t.Fatalf("Prove of a lying peer: %v, want Integrity, ErrProofFailed", err)
			}
		})
	}
}

// A peer that speaks only version 1 of the block protocol still serves
// gets, and Prove says it cannot prove anything, without taking it for
// unreachable.
func TestProveOldPeer(t *testing.T) {
	ctx := context.Background()
	data := []byte("old block")
	ref := blocks.RefOf(data)
	net := p2ptest.NewNet(t, 2)
	hostileServerOn(net.Hosts[0], p2p.BlockProtocolV1, func(op byte, id, body []byte) []byte {
		if op == 4 {
			t.Errorf("a prove request reached a version 1 server")
		}
		return frame([]byte{0}, id, data)
	})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	if got, err := r.Get(ctx, ref); err != nil || string(got) != string(data) {
		t.Fatalf("Get from a version 1 peer = %q, %v", got, err)
	}
	err := r.Prove(ctx, ref, blocks.NewChallenge(data))
	if !errors.Is(err, p2p.ErrNoProofs) || !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Prove of a version 1 peer: %v, want Invalid, ErrNoProofs", err)
	}
}

// A server refuses a prove request on a version 1 stream, as a version 1
// server does, and a malformed one on version 2.
func TestProveRequestChecked(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, evil := net.Hosts[0], net.Hosts[1]
	serve(t, srv, p2p.BlockServerConfig{CanPut: allowAll})
	nonce := make([]byte, blocks.NonceSize)
	ref := []byte(blocks.RefOf([]byte("x")))
	s, err := evil.NewStream(ctx, srv.ID(), p2p.BlockProtocolV1)
	if err != nil {
		t.Fatal(err)
	}
	s.Write(frame([]byte{4}, make([]byte, 8), nonce, ref))
	s.CloseWrite() // A server that answered would then end the stream cleanly.
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(s); err == nil {
		t.Errorf("server did not reset a version 1 stream carrying a prove request")
	}
	s.Close()

	r := remote(t, evil, srv.ID())
	if err := r.Prove(ctx, "bafkqaaa", blocks.NewChallenge(nil)); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Prove of a malformed ref: %v, want Invalid", err)
	}
}
