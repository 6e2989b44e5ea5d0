package keylog

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// memberKey returns a new note verifier key for member id.
func memberKey(t *testing.T, id string) string {
	t.Helper()
	_, vkey, err := note.GenerateKey(rand.Reader, MemberKeyName(id))
	if err != nil {
		t.Fatal(err)
	}
	return vkey
}

// signed signs ch with s.
func signed(t *testing.T, s spindle.Signer, ch *Change) *Change {
	t.Helper()
	if err := SignChange(ch, s); err != nil {
		t.Fatal(err)
	}
	return ch
}

// The attack of issue 26: an operator admits a node operator's key, and
// that one key adds two members of its own to a cluster of one, which
// then make a majority that signs any head, with a forged key record in
// it. One admitted key now holds one membership; the members refuse the
// second (Check) and so does a client that follows the configuration
// (ConfigLog), whatever a node tells it. An operator still adds members
// at will, and a member's key cannot be recorded twice under two names.
func TestOneOperatorOneVote(t *testing.T) {
	op, nodeOp := newSigner(t, "op@example.com"), newSigner(t, "mallory@example.com")
	first, m1, m2 := memberKey(t, "12D3KooWFirst"), memberKey(t, "12D3KooWEvilOne"), memberKey(t, "12D3KooWEvilTwo")
	changes := []*Change{
		signed(t, op, &Change{Seq: 1, Kind: ChangeInit, Key: op.PublicKey(), Arg: first}),
		signed(t, op, &Change{Seq: 2, Kind: ChangeAdmit, Key: nodeOp.PublicKey()}),
		signed(t, nodeOp, &Change{Seq: 3, Kind: ChangeAddMember, Key: nodeOp.PublicKey(), Arg: m1}),
	}
	second := signed(t, nodeOp, &Change{Seq: 4, Kind: ChangeAddMember, Key: nodeOp.PublicKey(), Arg: m2})

	// The members' check.
	cfg := NewConfigState()
	for _, ch := range changes {
		if _, err := cfg.Check(ch, true); err != nil {
			t.Fatalf("change %d (%s): %v", ch.Seq, ch.Kind, err)
		}
		cfg.Apply(ch, EncodeChange(ch))
	}
	if _, err := cfg.Check(second, true); !errors.Is(err, spindle.Permission) {
		t.Fatalf("a second member vouched for by the same admitted key: %v, want Permission", err)
	}
	// A client following the configuration refuses a log that has it.
	l := NewConfigLog()
	for i, ch := range append(changes, second) {
		err := l.add(int64(i), EncodeChange(ch))
		switch {
		case i < len(changes) && err != nil:
			t.Fatalf("following change %d: %v", ch.Seq, err)
		case i == len(changes) && !errors.Is(err, spindle.Permission):
			t.Fatalf("following a log with a second member vouched for by one admitted key: %v, want Permission", err)
		}
	}
	if n := len(l.cfg.Members()); n != 2 {
		t.Fatalf("the follower counts %d members, want 2: a majority still needs the first", n)
	}

	// The vouching key, once its member has left, may vouch again.
	leave := signed(t, nodeOp, &Change{Seq: 4, Kind: ChangeRemoveMember, Arg: "12D3KooWEvilOne"})
	if _, err := cfg.Check(leave, true); err != nil {
		t.Fatal(err)
	}
	cfg.Apply(leave, EncodeChange(leave))
	again := signed(t, nodeOp, &Change{Seq: 5, Kind: ChangeAddMember, Key: nodeOp.PublicKey(), Arg: m2})
	if _, err := cfg.Check(again, true); err != nil {
		t.Fatalf("the admitted key, its member gone, vouching again: %v", err)
	}
	cfg.Apply(again, EncodeChange(again))

	// An operator adds as many as it likes; but never one key twice.
	byOp := signed(t, op, &Change{Seq: 6, Kind: ChangeAddMember, Key: op.PublicKey(), Arg: m1})
	if _, err := cfg.Check(byOp, true); err != nil {
		t.Fatalf("an operator adding a member: %v", err)
	}
	cfg.Apply(byOp, EncodeChange(byOp))
	twin := renamed(t, m2, MemberKeyName("12D3KooWTwin"))
	if _, err := MemberOfVerifierKey(twin); err != nil {
		t.Fatalf("the same key under another name: %v", err)
	}
	sameKey := signed(t, op, &Change{Seq: 7, Kind: ChangeAddMember, Key: op.PublicKey(), Arg: twin})
	if _, err := cfg.Check(sameKey, true); !errors.Is(err, spindle.Exist) {
		t.Fatalf("a second member with the signing key of another: %v, want Exist", err)
	}
}

// renamed returns note verifier key vkey under another name: the same
// key, with the hash that covers the new name.
func renamed(t *testing.T, vkey, name string) string {
	t.Helper()
	parts := strings.SplitN(vkey, "+", 3)
	key, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(append([]byte(name+"\n"), key...))
	return fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(h[:4]), parts[2])
}

// The network's member nodes are the key cluster's members and the nodes
// operators admit; only an operator admits or removes a node or closes
// the network, and a follower of the log refuses a log where anyone else
// did. A log that never sets the network policy stays open.
func TestNetworkMembers(t *testing.T) {
	op, nodeOp := newSigner(t, "op@example.com"), newSigner(t, "mallory@example.com")
	first := memberKey(t, "12D3KooWFirst")
	cfg := NewConfigState()
	apply := func(ch *Change) {
		t.Helper()
		if _, err := cfg.Check(ch, true); err != nil {
			t.Fatalf("change %d (%s %s): %v", ch.Seq, ch.Kind, ch.Arg, err)
		}
		cfg.Apply(ch, EncodeChange(ch))
	}
	apply(signed(t, op, &Change{Seq: 1, Kind: ChangeInit, Key: op.PublicKey(), Arg: first}))
	apply(signed(t, op, &Change{Seq: 2, Kind: ChangeAdmit, Key: nodeOp.PublicKey()}))
	if cfg.Network() != NetworkOpen {
		t.Fatalf("a log that sets no network policy: %q, want %q", cfg.Network(), NetworkOpen)
	}
	apply(signed(t, op, &Change{Seq: 3, Kind: ChangeAddNode, Arg: "12D3KooWNode"}))
	apply(signed(t, op, &Change{Seq: 4, Kind: ChangeNetwork, Arg: NetworkMembers}))
	if got := strings.Join(cfg.NetworkMembers(), " "); cfg.Network() != NetworkMembers || got != "12D3KooWFirst 12D3KooWNode" {
		t.Fatalf("network %q of %q, want %q of the key member and the admitted node", cfg.Network(), got, NetworkMembers)
	}
	// An admitted node operator is no operator: it admits no node, and
	// opens no network.
	for _, ch := range []*Change{
		{Seq: 5, Kind: ChangeAddNode, Arg: "12D3KooWSybil"},
		{Seq: 5, Kind: ChangeRemoveNode, Arg: "12D3KooWNode"},
		{Seq: 5, Kind: ChangeNetwork, Arg: NetworkOpen},
	} {
		bad := signed(t, nodeOp, ch)
		if _, err := cfg.Check(bad, true); !errors.Is(err, spindle.Permission) {
			t.Errorf("%s %s signed by a node operator: %v, want Permission", ch.Kind, ch.Arg, err)
		}
		early := signed(t, nodeOp, &Change{Seq: 3, Kind: ch.Kind, Arg: ch.Arg})
		l := NewConfigLog()
		for i, e := range append(logOf(t, op, first), early) {
			err := l.add(int64(i), EncodeChange(e))
			if e == early && !errors.Is(err, spindle.Permission) {
				t.Errorf("a follower given %s signed by a node operator: %v, want Permission", ch.Kind, err)
			}
		}
	}
	if _, err := cfg.Check(signed(t, op, &Change{Seq: 5, Kind: ChangeRemoveNode, Arg: "12D3KooWOther"}), true); !errors.Is(err, spindle.NotExist) {
		t.Errorf("removing a node never admitted: %v, want NotExist", err)
	}
	apply(signed(t, op, &Change{Seq: 5, Kind: ChangeRemoveNode, Arg: "12D3KooWNode"}))
	if got := cfg.NetworkMembers(); len(got) != 1 || got[0] != "12D3KooWFirst" {
		t.Fatalf("after removing the node: %v, want the key member only", got)
	}
	for _, ch := range []*Change{
		{Seq: 6, Kind: ChangeAddNode, Arg: "two words"},
		{Seq: 6, Kind: ChangeAddNode, Arg: strings.Repeat("x", 200)},
		{Seq: 6, Kind: ChangeAddNode, Arg: "12D3KooWNode", Key: op.PublicKey()},
		{Seq: 6, Kind: ChangeNetwork, Arg: "closed"},
	} {
		if _, err := cfg.Check(signed(t, op, ch), true); !errors.Is(err, spindle.Invalid) {
			t.Errorf("malformed %s %q: %v, want Invalid", ch.Kind, ch.Arg, err)
		}
	}
}

// logOf returns the first two changes of TestNetworkMembers' log.
func logOf(t *testing.T, op spindle.Signer, first string) []*Change {
	return []*Change{
		signed(t, op, &Change{Seq: 1, Kind: ChangeInit, Key: op.PublicKey(), Arg: first}),
		signed(t, op, &Change{Seq: 2, Kind: ChangeAdmit, Key: newSigner(t, "mallory@example.com").PublicKey()}),
	}
}
