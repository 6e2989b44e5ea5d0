package host

import (
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestAppendPlaceInLog checks each half of an entry's place in the log on
// its own, through Append and through AppendBatch (alone and after a good
// entry): an entry must carry the next sequence number and name the
// current head as Prev. Either check missing would store a broken chain,
// which replay cuts at the next start, losing what came after.
func TestAppendPlaceInLog(t *testing.T) {
	cases := []struct {
		name string
		bend func(seq *int64, prev *dirlog.Hash, head dirlog.Hash)
	}{
		{"sequence number skips one", func(seq *int64, prev *dirlog.Hash, head dirlog.Hash) { *seq++ }},
		{"sequence number repeats the head's", func(seq *int64, prev *dirlog.Hash, head dirlog.Hash) { *seq-- }},
		{"prev is not the head", func(seq *int64, prev *dirlog.Hash, head dirlog.Hash) { prev[0] ^= 1 }},
		{"prev is the zero hash", func(seq *int64, prev *dirlog.Hash, head dirlog.Hash) { *prev = dirlog.Hash{} }},
	}
	ways := []struct {
		name   string
		append func(e *env, good, bad *dirlog.Entry) (int, error) // Returns how many entries were appended.
	}{
		{"Append", func(e *env, _, bad *dirlog.Entry) (int, error) {
			d, err := e.s.Append(e.ctx, bad)
			if d != nil {
				return 1, err
			}
			return 0, err
		}},
		{"AppendBatch alone", func(e *env, _, bad *dirlog.Entry) (int, error) {
			out, err := e.s.AppendBatch(e.ctx, []*dirlog.Entry{bad})
			return len(out), err
		}},
		{"AppendBatch after a good entry", func(e *env, good, bad *dirlog.Entry) (int, error) {
			out, err := e.s.AppendBatch(e.ctx, []*dirlog.Entry{good, bad})
			return len(out) - 1, err
		}},
	}
	for _, w := range ways {
		for _, c := range cases {
			t.Run(w.name+"/"+c.name, func(t *testing.T) {
				e := newEnv(t, &MemStore{})
				e.setup()
				h := e.do2head(e.s.Head(e.ctx, ann))
				signer := e.signers[ann]
				sign := func(name spindle.PathName, seq int64, prev dirlog.Hash) *dirlog.Entry {
					en := &dirlog.Entry{Seq: seq, Prev: prev, Time: spindle.Now(), Op: dirlog.OpPut, Writer: ann, Entry: *file(name, 1)}
					en.Entry.Sequence = seq
					if err := en.Sign(signer); err != nil {
						t.Fatal(err)
					}
					return en
				}
				good := sign("ann@example.com/docs/good", h.Seq+1, h.Hash)
				seq, prev := h.Seq+1, h.Hash
				if w.name == "AppendBatch after a good entry" {
					seq, prev = good.Seq+1, good.Hash()
				}
				head := prev
				c.bend(&seq, &prev, head)
				bad := sign("ann@example.com/docs/bad", seq, prev)

				n, err := w.append(e, good, bad)
				wantKind(t, err, spindle.Transient, c.name)
				if n != 0 {
					t.Fatalf("%d misplaced entries appended", n)
				}
				if _, err := e.s.Lookup(e.ctx, ann, "ann@example.com/docs/bad"); !spindle.Match(spindle.E(spindle.NotExist), err) {
					t.Fatalf("misplaced entry visible: lookup says %v", err)
				}
				// The stored chain is whole: it replays without a cut.
				e.reopen()
				if d := e.s.Damage(); len(d) > 0 {
					t.Fatalf("log damaged after a refused entry: %v", d)
				}
				if w.name == "AppendBatch after a good entry" {
					e.do(e.s.Lookup(e.ctx, ann, "ann@example.com/docs/good"))
				}
			})
		}
	}
}
