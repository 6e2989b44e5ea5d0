package blocks_test

import (
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"spindle.dev"
	"spindle.dev/blocks"
)

func TestRefOfMatchesGoCID(t *testing.T) {
	for _, data := range [][]byte{nil, []byte("a"), make([]byte, 1<<20)} {
		h, err := multihash.Sum(data, multihash.SHA2_256, -1)
		if err != nil {
			t.Fatal(err)
		}
		want := cid.NewCidV1(cid.Raw, h).String()
		if got := blocks.RefOf(data); string(got) != want {
			t.Errorf("RefOf(%d bytes) = %s, want %s", len(data), got, want)
		}
	}
	// The empty block has a well-known address.
	if got := blocks.RefOf(nil); got != "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku" {
		t.Errorf("RefOf(nil) = %s", got)
	}
}

func TestCheck(t *testing.T) {
	data := []byte("some block")
	ref := blocks.RefOf(data)
	if err := blocks.Check(ref, data); err != nil {
		t.Fatalf("Check of a good block: %v", err)
	}
	// Another multibase encoding of the same CID names the same block.
	c, _ := cid.Decode(string(ref))
	b58, err := c.StringOfBase('z')
	if err != nil {
		t.Fatal(err)
	}
	if err := blocks.Check(spindle.Ref(b58), data); err != nil {
		t.Fatalf("Check with a base58 ref: %v", err)
	}
	bad := append([]byte(nil), data...)
	bad[0] ^= 1
	err = blocks.Check(ref, bad)
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("Check of altered bytes: %v, want Integrity", err)
	}
	if !spindle.Match(spindle.E(spindle.Op("blocks.Check"), spindle.Integrity), err) {
		t.Errorf("Check error %v lacks its op", err)
	}
	if err := blocks.Check("bafkqaaa", data); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Check with an identity CID: %v, want Invalid", err)
	}
	big := make([]byte, spindle.MaxStoredBlockSize+1)
	if err := blocks.Check(blocks.RefOf(big), big); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Check of an oversized block: %v, want Invalid", err)
	}
}

func TestReceive(t *testing.T) {
	data := []byte("x")
	ref, d, err := blocks.Receive(data)
	if err != nil || ref != blocks.RefOf(data) || d != blocks.Digest(sha256.Sum256(data)) {
		t.Fatalf("Receive = %s, %x, %v", ref, d, err)
	}
	if _, _, err := blocks.Receive(make([]byte, spindle.MaxStoredBlockSize+1)); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Receive of an oversized block: %v, want Invalid", err)
	}
}

func TestParseRefRoundTrip(t *testing.T) {
	ref := blocks.RefOf([]byte("y"))
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	if d.Ref() != ref {
		t.Fatalf("ParseRef(%s).Ref() = %s", ref, d.Ref())
	}
}

func FuzzParseRef(f *testing.F) {
	f.Add(string(blocks.RefOf([]byte("seed"))))
	f.Add("bafkqaaa")
	f.Add("QmYwAPJzv5CZsnA625s3Xf2nemtYgPpHdWEz79ojWnPbdG")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := blocks.ParseRef(spindle.Ref(s))
		if err != nil {
			if !errors.Is(err, spindle.Invalid) {
				t.Fatalf("ParseRef(%q): %v, want Invalid", s, err)
			}
			return
		}
		// A ref that parses names the same digest in canonical form.
		d2, err := blocks.ParseRef(d.Ref())
		if err != nil || d2 != d {
			t.Fatalf("canonical form of %q does not round-trip: %v", s, err)
		}
	})
}

func BenchmarkRefOf(b *testing.B) {
	data := make([]byte, spindle.MaxBlockSize)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		blocks.RefOf(data)
	}
}
