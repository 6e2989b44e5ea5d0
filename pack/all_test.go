package pack

import (
	"bytes"
	"errors"
	"testing"

	"spindle.dev"
)

// The all users key is part of the format: every client must derive the
// same one, so a change to its derivation must fail this test.
func TestAllKeyIsFixed(t *testing.T) {
	const want = "p256:BCBpqpTYgG94RoieLbJFkvLZ8ctjTITzqYqQlydOHKXUAWgYf08p6bhrpeNctWU1y7IsyY6Ifmz8tOkjovYPPdI"
	got := AllKey()
	if got != AllKey() {
		t.Fatal("AllKey differs between calls")
	}
	if got != want {
		t.Fatalf("AllKey() = %s, want %s", got, want)
	}
}

func TestShareWithAll(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	s := newMemBlocks()
	data := testData(2*spindle.MaxBlockSize+5, 7)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)
	writer := []spindle.PublicKey{ak.PublicKey()}

	for _, tc := range []struct {
		name    string
		readers []spindle.PublicKey // nil: the entry as written.
		all     bool                // Wrapped for all afterwards.
	}{
		{"written for alice", nil, false},
		{"opened to all", []spindle.PublicKey{ak.PublicKey(), AllKey()}, true},
		{"all again keeps the wrap", []spindle.PublicKey{AllKey(), ak.PublicKey(), AllKey()}, true},
		{"all revoked", []spindle.PublicKey{ak.PublicKey()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := unmarshalPackdata(e.Packdata)
			if tc.readers != nil {
				pd, err := Share(e, ak, tc.readers)
				if err != nil {
					t.Fatal(err)
				}
				e.Packdata = pd
			}
			if err := Verify(e, writer); err != nil {
				t.Fatalf("the writer's signature after sharing: %v", err)
			}
			if got, err := IsWrappedForAll(e); err != nil || got != tc.all {
				t.Fatalf("IsWrappedForAll = %v, %v; want %v", got, err, tc.all)
			}
			if got, err := readAll(e, s, ak, writer...); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("alice reading: %v", err)
			}
			// bob holds no wrap of his own; a reader with no keys at all neither.
			for _, keys := range []*Keys{bk, nil} {
				got, err := readAll(e, s, keys, writer...)
				switch {
				case tc.all && (err != nil || !bytes.Equal(got, data)):
					t.Errorf("reader %v of a file wrapped for all: %v", keys != nil, err)
				case !tc.all && !errors.Is(err, spindle.CannotDecrypt):
					t.Errorf("reader %v of a file not wrapped for all: %v, want CannotDecrypt", keys != nil, err)
				}
			}
			after, _ := unmarshalPackdata(e.Packdata)
			for _, w := range before.wraps {
				for _, v := range after.wraps {
					if v.keyHash == w.keyHash && v != w {
						t.Errorf("wrap for %x was made anew, not kept", w.keyHash[:4])
					}
				}
			}
		})
	}

	// Anyone may re-share from the wrap for all; a reader with no keys may not.
	pd, err := Share(e, ak, []spindle.PublicKey{ak.PublicKey(), AllKey()})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	if _, err := Share(e, bk, []spindle.PublicKey{ak.PublicKey(), bk.PublicKey()}); err != nil {
		t.Errorf("bob sharing through the wrap for all: %v", err)
	}
	if _, err := Share(e, nil, []spindle.PublicKey{ak.PublicKey()}); err != nil {
		t.Errorf("sharing with no keys through the wrap for all: %v", err)
	}

	// A wrap for all that holds another file's key is an Integrity failure.
	p, _ := unmarshalPackdata(e.Packdata)
	other := bytes.Repeat([]byte{9}, fileKeySize)
	r, _ := parseReaderKey(AllKey())
	bad, err := newWrap(other, p.commitment, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := range p.wraps {
		if p.wraps[i].keyHash == r.hash {
			p.wraps[i] = bad
		}
	}
	e.Packdata = p.marshal()
	if _, err := readAll(e, s, bk, writer...); !errors.Is(err, spindle.Integrity) {
		t.Errorf("bob reading through a wrap for all holding another key: %v, want Integrity", err)
	}
	if got, err := readAll(e, s, ak, writer...); err != nil || !bytes.Equal(got, data) {
		t.Errorf("alice, whose own wrap is sound: %v", err)
	}
}
