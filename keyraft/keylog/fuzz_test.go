package keylog

import (
	"golang.org/x/mod/sumdb/tlog"

	"bytes"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// The seed corpora are in testdata/fuzz; each holds valid encodings made by
// the code above and a few damaged ones. Run each fuzzer with
//
//	go test -run=NONE -fuzz=FuzzDecodeRecord -fuzztime=60s -parallel=1 ./keyraft/keylog

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(recordMagic))
	f.Add([]byte(recordMagicDirSeq))
	f.Add([]byte(recordMagicDirQuorum))
	f.Add([]byte(recordMagicKeep))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := DecodeRecord(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("DecodeRecord error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(EncodeRecord(u), data) {
			t.Fatalf("decoded record re-encodes differently")
		}
		if n := encodedLen(u); n != len(data) {
			t.Fatalf("encodedLen = %d, want %d", n, len(data))
		}
		if err := CheckRecord(u); err != nil {
			t.Fatalf("decoded record fails CheckRecord: %v", err)
		}
	})
}

// fuzzVerifierKey is the verifier key of the note key that signed the heads
// in the seed corpus of FuzzUnmarshalProof.
const fuzzVerifierKey = "spindle-keyraft/m0+bf1f695a+AbJt5oSwufR3oqTbN+7S9M96rhy7Y1HtR1ZlWWcRzzgI"

func FuzzUnmarshalProof(f *testing.F) {
	f.Add([]byte(proofMagic))
	v, err := note.NewVerifier(fuzzVerifierKey)
	if err != nil {
		f.Fatal(err)
	}
	verifiers := note.VerifierList(v)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := UnmarshalProof(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("UnmarshalProof error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		b, _ := p.MarshalBinary()
		if !bytes.Equal(b, data) {
			t.Fatalf("decoded proof re-encodes differently")
		}
		u, tree, err := VerifyLookup(p, "user0@example.com", verifiers)
		if err != nil {
			switch spindle.KindOf(err) {
			case spindle.Invalid, spindle.Integrity:
			default:
				t.Fatalf("VerifyLookup error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if u.Name != "user0@example.com" || p.Index >= tree.N {
			t.Fatalf("VerifyLookup accepted record %s at %d of %d", u.Name, p.Index, tree.N)
		}
	})
}

func FuzzParseHead(f *testing.F) {
	f.Add(headHeader + "3\n" + "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n")
	f.Add(headHeader + "3\n" + "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\nconfig 2\n")
	f.Fuzz(func(t *testing.T, text string) {
		tree, err := parseHead(text)
		if err != nil {
			return
		}
		if string(FormatHead(tree)) != text {
			t.Fatalf("head %q re-formats as %q", text, FormatHead(tree))
		}
	})
}

// A client checks consistency proofs its node sends; they may be hostile.
func FuzzUnmarshalTreeProof(f *testing.F) {
	f.Add([]byte{0})
	f.Add(MarshalTreeProof(tlog.TreeProof{{1}, {2}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := UnmarshalTreeProof(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("UnmarshalTreeProof error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(MarshalTreeProof(p), data) {
			t.Fatalf("decoded tree proof re-encodes differently")
		}
		// Checking it against made-up trees fails cleanly.
		if err := tlog.CheckTree(p, 7, tlog.Hash{1}, 3, tlog.Hash{2}); err == nil {
			t.Fatalf("a fuzzed proof proved made-up trees consistent")
		}
	})
}

func FuzzDecodeChange(f *testing.F) {
	f.Add([]byte(changeMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		ch, err := DecodeChange(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("DecodeChange error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(EncodeChange(ch), data) {
			t.Fatalf("decoded change re-encodes differently")
		}
		// The state's check may refuse it, but only as a policy refusal.
		cfg := NewConfigState()
		if _, err := cfg.Check(ch, true); err != nil {
			switch spindle.KindOf(err) {
			case spindle.Permission, spindle.Invalid, spindle.NotExist:
			default:
				t.Fatalf("check of a decoded change: %v", err)
			}
		}
	})
}

// A client reads its config log back from its key log file at every
// start; the file may be damaged.
func FuzzRestoreConfigLog(f *testing.F) {
	op := newSigner(f, "op@example.com")
	_, vkey, err := note.GenerateKey(bytes.NewReader(make([]byte, 32)), MemberKeyName("12D3KooWFuzz"))
	if err != nil {
		f.Fatal(err)
	}
	ch1 := &Change{Seq: 1, Kind: ChangeInit, Key: op.PublicKey(), Arg: vkey}
	SignChange(ch1, op)
	ch2 := &Change{Seq: 2, Kind: ChangePolicy, Arg: PolicyDomain}
	SignChange(ch2, op)
	e1, e2 := EncodeChange(ch1), EncodeChange(ch2)
	frame := func(idx byte, enc []byte) []byte {
		return append([]byte{idx, byte(len(enc) >> 8), byte(len(enc))}, enc...)
	}
	f.Add(frame(0, e1))
	f.Add(append(frame(0, e1), frame(5, e2)...))
	f.Add(append(frame(5, e1), frame(0, e2)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		var entries []ConfigEntry
		for len(data) >= 3 {
			n := int(data[1])<<8 | int(data[2])
			if len(data) < 3+n {
				break
			}
			entries = append(entries, ConfigEntry{Index: int64(data[0]), Change: data[3 : 3+n]})
			data = data[3+n:]
		}
		l, err := RestoreConfigLog(entries)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("RestoreConfigLog error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if l.Seq() != int64(len(entries)) {
			t.Fatalf("%d entries restore as %d changes", len(entries), l.Seq())
		}
		// Each change checks against the ones before it: the first is
		// an init, signed by its own key.
		if len(entries) > 0 {
			ch, err := DecodeChange(entries[0].Change)
			if err != nil || ch.Kind != ChangeInit || ch.Signer != ch.Key {
				t.Fatalf("first change restored: %+v, %v", ch, err)
			}
		}
	})
}
