package keylog

import (
	"bytes"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// fuzzHeadKey is a note key made from a fixed seed, which signed the heads
// in the seed corpus of FuzzVerifyHead.
func fuzzHeadKey(tb testing.TB) (note.Signer, note.Verifiers) {
	skey, vkey, err := note.GenerateKey(bytes.NewReader(make([]byte, 32)), MemberKeyName("fuzz"))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	v, err := NewVerifiers(vkey)
	if err != nil {
		tb.Fatal(err)
	}
	return s, v
}

// A client checks every signed tree head its node hands it, in lookup
// proofs and on its own; a head may be hostile.
func FuzzVerifyHead(f *testing.F) {
	s, v := fuzzHeadKey(f)
	for _, n := range []int64{0, 1, 7} {
		h, err := signHead(s, HeadInfo{Tree: tlog.Tree{N: n, Hash: tlog.Hash{byte(n)}}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		tree, err := VerifyHead(head, v)
		if err != nil {
			switch spindle.KindOf(err) {
			case spindle.Invalid, spindle.Integrity:
			default:
				t.Fatalf("VerifyHead error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if tree.N < 0 {
			t.Fatalf("head of %d records verifies", tree.N)
		}
		// What verifies is a note of the canonical head text, signed by
		// the key: signing the text again makes a head that verifies
		// as the same tree.
		n, err := note.Open(head, v)
		if err != nil {
			t.Fatalf("verified head does not open: %v", err)
		}
		hi, err := parseHead(n.Text)
		if err != nil || hi.Tree != tree || n.Text != string(FormatHead(hi)) {
			t.Fatalf("verified head's text %q is not the canonical form of tree %v: %v", n.Text, tree, err)
		}
	})
}

// A client that trusts its node on first use takes the key cluster's
// verifier key from the node's answer; it may be hostile.
func FuzzNewVerifiers(f *testing.F) {
	_, vkey, err := note.GenerateKey(bytes.NewReader(make([]byte, 32)), MemberKeyName("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(vkey)
	f.Add("spindle-keyraft/m0+bf1f695a+AbJt5oSwufR3oqTbN+7S9M96rhy7Y1HtR1ZlWWcRzzgI")
	f.Add("not a key")
	s, _ := fuzzHeadKey(f)
	head, err := signHead(s, HeadInfo{Tree: tlog.Tree{N: 3, Hash: tlog.Hash{3}}, Config: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, vkey string) {
		c, err := NewChecker(vkey)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("NewChecker error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		// A head signed by another key does not verify with it, unless
		// it is that key.
		_, err = c.Update(t.Context(), head, nil)
		if err == nil && vkey != fuzzVKey(t) {
			t.Fatalf("a head signed by another key verifies with %q", vkey)
		}
	})
}

// fuzzVKey returns the verifier key of fuzzHeadKey.
func fuzzVKey(tb testing.TB) string {
	_, vkey, err := note.GenerateKey(bytes.NewReader(make([]byte, 32)), MemberKeyName("fuzz"))
	if err != nil {
		tb.Fatal(err)
	}
	return vkey
}

// A client checks the signatures on every head its node hands it against
// the members its config log names; the head may be hostile.
func FuzzVerifyQuorum(f *testing.F) {
	s, v := fuzzHeadKey(f)
	members := map[string]string{"fuzz": fuzzVKey(f)}
	for _, hi := range []HeadInfo{{}, {Tree: tlog.Tree{N: 3, Hash: tlog.Hash{3}}, Config: 1}} {
		h, err := signHead(s, hi)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, head []byte) {
		hi, signers, err := VerifyQuorum(head, members)
		if err != nil {
			switch spindle.KindOf(err) {
			case spindle.Invalid, spindle.Integrity:
			default:
				t.Fatalf("VerifyQuorum error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if len(signers) != 1 || hi.Config > hi.N || hi.N < 0 {
			t.Fatalf("head %+v passes with signers %v", hi, signers)
		}
		// What passes is signed by the one member: VerifyHead agrees.
		if tree, err := VerifyHead(head, v); err != nil || tree != hi.Tree {
			t.Fatalf("VerifyHead disagrees: %v, %v", tree, err)
		}
	})
}
