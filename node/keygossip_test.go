package node

import (
	"crypto/rand"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev/keyraft/keylog"
)

// A DHT node keeps, of the gossip records of one size, the one with more
// heads: once a fork is published, one side of it alone (in either byte
// order) does not replace it, so both sides find it. Records that are not
// gossip of the key's size are refused.
func TestKeyGossipRecordWithMoreHeadsWins(t *testing.T) {
	head := func(seed string) []byte {
		skey, _, err := note.GenerateKey(rand.Reader, keylog.MemberKeyName("m"))
		if err != nil {
			t.Fatal(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			t.Fatal(err)
		}
		h, err := note.Sign(&note.Note{Text: string(keylog.FormatHead(keylog.HeadInfo{Tree: tlog.Tree{N: 7, Hash: tlog.RecordHash([]byte(seed))}}))}, s)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	rec := func(hs ...[]byte) []byte {
		b, err := keylog.EncodeGossip(7, hs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := head("a"), head("b")
	both := rec(a, b)
	v := keyGossipValidator{}
	key := KeyGossipKey(7)
	for _, one := range [][]byte{rec(a), rec(b)} {
		for _, vals := range [][][]byte{{one, both}, {both, one}} {
			i, err := v.Select(key, vals)
			if err != nil || string(vals[i]) != string(both) {
				t.Errorf("Select chose record %d (%v), not the one with both heads", i, err)
			}
		}
	}
	if err := v.Validate(key, both); err != nil {
		t.Errorf("Validate(both heads) = %v", err)
	}
	for _, bad := range []struct {
		key string
		val []byte
	}{
		{KeyGossipKey(8), both},
		{"/" + KeyGossipNamespace + "/07", both},
		{key, []byte("spindle.dev key log\n7\n")},
		{key, both[:len(both)-1]},
	} {
		if err := v.Validate(bad.key, bad.val); err == nil {
			t.Errorf("Validate(%q, %d bytes) took a bad record", bad.key, len(bad.val))
		}
	}
}
