package keylog

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// gossipHead returns a head of n records with hash of seed, signed by a
// new key.
func gossipHead(tb testing.TB, n int64, seed string) []byte {
	tb.Helper()
	skey, _, err := note.GenerateKey(rand.Reader, MemberKeyName("fuzz"))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		tb.Fatal(err)
	}
	h, err := note.Sign(&note.Note{Text: string(FormatHead(HeadInfo{Tree: tlog.Tree{N: n, Hash: tlog.RecordHash([]byte(seed))}}))}, s)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// Gossip records come from the DHT: anyone may have written them.
func FuzzDecodeGossip(f *testing.F) {
	a, b := gossipHead(f, 3, "a"), gossipHead(f, 3, "b")
	for _, hs := range [][][]byte{{a}, {a, b}} {
		rec, err := EncodeGossip(3, hs)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(int64(3), rec)
	}
	f.Add(int64(3), []byte{1})
	f.Add(int64(3), []byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, n int64, data []byte) {
		heads, err := DecodeGossip(n, data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("DecodeGossip error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		enc, err := EncodeGossip(n, heads)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		if !bytes.Equal(enc, data) {
			t.Fatalf("decoded record re-encodes differently")
		}
	})
}

// A gossip record keeps the heads it is given, once each, in one order
// whatever order they came in; heads of another size, or too many, are
// refused.
func TestGossipRecordRoundTrip(t *testing.T) {
	a, b := gossipHead(t, 5, "a"), gossipHead(t, 5, "b")
	ab, err := EncodeGossip(5, [][]byte{a, b, a})
	if err != nil {
		t.Fatal(err)
	}
	ba, err := EncodeGossip(5, [][]byte{b, a})
	if err != nil || !bytes.Equal(ab, ba) {
		t.Fatalf("records of one set of heads differ: %v", err)
	}
	hs, err := DecodeGossip(5, ab)
	if err != nil || len(hs) != 2 {
		t.Fatalf("DecodeGossip = %d heads, %v; want 2", len(hs), err)
	}
	if _, err := DecodeGossip(6, ab); err == nil {
		t.Errorf("a record of 5 records decoded as one of 6")
	}
	if _, err := EncodeGossip(5, [][]byte{a, gossipHead(t, 6, "c")}); err == nil {
		t.Errorf("a head of 6 records encoded in a record of 5")
	}
	var many [][]byte
	for i := range MaxGossipHeads + 1 {
		many = append(many, gossipHead(t, 5, string(rune('a'+i))))
	}
	if _, err := EncodeGossip(5, many); err == nil {
		t.Errorf("%d heads encoded, limit %d", len(many), MaxGossipHeads)
	}
	// Out of order: the larger head first, encoded by hand.
	rev := []byte{gossipVersion}
	for _, h := range [][]byte{hs[1], hs[0]} {
		rev = append(binary.AppendUvarint(rev, uint64(len(h))), h...)
	}
	if _, err := DecodeGossip(5, rev); err == nil {
		t.Errorf("a record with heads out of order decoded")
	}
}

// BenchmarkCompare measures the client's check of one published head of
// its own size: the note's signature by the one member (Ed25519) and the
// comparison of the trees.
func BenchmarkCompare(b *testing.B) {
	skey, vkey, err := note.GenerateKey(rand.Reader, MemberKeyName("m"))
	if err != nil {
		b.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		b.Fatal(err)
	}
	sign := func(seed string) []byte {
		h, err := note.Sign(&note.Note{Text: string(FormatHead(HeadInfo{Tree: tlog.Tree{N: 9, Hash: tlog.RecordHash([]byte(seed))}}))}, s)
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	c, err := NewChecker(vkey)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Trust(sign("own")); err != nil {
		b.Fatal(err)
	}
	other := sign("own")
	for b.Loop() {
		if _, err := c.Compare(other); err != nil {
			b.Fatal(err)
		}
	}
}
