package keyraft

import (
	"golang.org/x/mod/sumdb/tlog"

	"bytes"
	"testing"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
)

// The seed corpora are in testdata/fuzz; each holds valid encodings made by
// the code above and a few damaged ones. Run each fuzzer with
//
//	go test -run=NONE -fuzz=FuzzDecodeRecord -fuzztime=60s -parallel=1 ./keyraft

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(recordMagic))
	f.Add([]byte(recordMagicDirSeq))
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
		// A record that decodes may still be refused by the policy, but the
		// check must not fail in any other way.
		st := newState()
		if _, err := st.check(u, nil, true); err != nil {
			switch spindle.KindOf(err) {
			case spindle.Permission, spindle.NotExist:
			default:
				t.Fatalf("check of a decoded record: %v", err)
			}
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

func FuzzRestore(f *testing.F) {
	f.Add([]byte(snapshotMagic + "\x00" + string(make([]byte, 32))))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := newFSM()
		if err := m.Restore(readCloser(data)); err != nil {
			switch spindle.KindOf(err) {
			case spindle.Invalid, spindle.Integrity:
			default:
				t.Fatalf("Restore error of kind %v: %v", spindle.KindOf(err), err)
			}
			if m.st.size() != 0 {
				t.Fatal("failed Restore changed the state")
			}
			return
		}
		if got := snapshotBytes(t, m); !bytes.Equal(got, data) {
			t.Fatalf("restored state snapshots differently")
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
		if string(formatHead(tree)) != text {
			t.Fatalf("head %q re-formats as %q", text, formatHead(tree))
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

func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte{cmdBatch, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		its, err := decodeBatch(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("decodeBatch error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if len(its) == 0 || len(its) > MaxBatch {
			t.Fatalf("decoded a batch of %d items", len(its))
		}
		recs := make([]batchItem, len(its))
		for i, it := range its {
			switch {
			case it.u != nil && it.ch == nil:
				recs[i] = batchItem{enc: EncodeRecord(it.u), grant: it.grant}
			case it.ch != nil && it.u == nil && it.grant == nil:
				recs[i] = batchItem{enc: EncodeChange(it.ch)}
			default:
				t.Fatalf("decoded item %d is neither a record nor a change: %+v", i, it)
			}
		}
		if !bytes.Equal(encodeBatch(recs), data) {
			t.Fatalf("decoded batch re-encodes differently")
		}
		// Applying it must give one outcome per record and never panic.
		res, ok := newFSM().Apply(&raft.Log{Index: 1, Data: data}).(batchResult)
		if !ok || len(res) != len(its) {
			t.Fatalf("Apply of a decoded batch answered %#v", res)
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
		st := newState()
		if _, err := st.checkChange(ch, true); err != nil {
			switch spindle.KindOf(err) {
			case spindle.Permission, spindle.Invalid, spindle.NotExist:
			default:
				t.Fatalf("check of a decoded change: %v", err)
			}
		}
	})
}
