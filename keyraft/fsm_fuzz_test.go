package keyraft

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// The seed corpora are in testdata/fuzz; each holds valid encodings made by
// the code above and a few damaged ones. Run each fuzzer with
//
//	go test -run=NONE -fuzz=FuzzDecodeBatch -fuzztime=60s -parallel=1 ./keyraft
//
// The fuzzers of records, changes, proofs and heads are in package keylog.

// FuzzCheckRecord: a record that decodes may still be refused by the
// policy, but the check must not fail in any other way.
func FuzzCheckRecord(f *testing.F) {
	ann := newSigner(f, "ann@example.com")
	v1 := register(f, ann, "12D3KooWHost")
	f.Add(keylog.EncodeRecord(v1))
	f.Add(keylog.EncodeRecord(update(f, v1, newSigner(f, "ann@example.com").pub, ann)))
	f.Add(keylog.EncodeRecord(register(f, newSigner(f, "ann+camera@example.com"))))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, err := keylog.DecodeRecord(data)
		if err != nil {
			return
		}
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
				recs[i] = batchItem{enc: keylog.EncodeRecord(it.u), grant: it.grant}
			case it.ch != nil && it.u == nil && it.grant == nil:
				recs[i] = batchItem{enc: keylog.EncodeChange(it.ch)}
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
