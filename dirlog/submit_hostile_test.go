package dirlog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"spindle.dev"
)

// A liar is a dir host whose answers to a writer are made up: Head and
// the appends answer what the test says; nothing else is called.
type liar struct {
	Service
	head   func() (*Head, error)
	append func(es []*Entry) ([]*spindle.DirEntry, error)
}

func (l *liar) Head(context.Context, spindle.UserName) (*Head, error) { return l.head() }

func (l *liar) Append(ctx context.Context, e *Entry) (*spindle.DirEntry, error) {
	out, err := l.append([]*Entry{e})
	if len(out) == 0 {
		return nil, err
	}
	return out[0], err
}

func (l *liar) AppendBatch(_ context.Context, es []*Entry) ([]*spindle.DirEntry, error) {
	return l.append(es)
}

// Whatever a dir host answers a writer, the writer's client does not
// panic: every entry of a batch gets an entry or an error (issue 26: a
// fake head made ann's append collide and her client panic in
// submitBatch).
func TestWriterSurvivesLyingDirHost(t *testing.T) {
	ok := func() (*Head, error) { return &Head{User: ann, Seq: 3, Hash: Hash{1}}, nil }
	all := func(es []*Entry) []*spindle.DirEntry {
		out := make([]*spindle.DirEntry, len(es))
		for i, e := range es {
			out[i] = CloneEntry(&e.Entry)
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		head   func() (*Head, error)
		append func(es []*Entry) ([]*spindle.DirEntry, error)
	}{
		{"every entry appended, and a refusal", ok, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return all(es), spindle.E(spindle.Invalid, "no")
		}},
		{"every entry appended, and a moved head", ok, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return all(es), spindle.E(spindle.Transient, "moved")
		}},
		{"more entries than sent", ok, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return append(all(es), all(es)...), nil
		}},
		{"empty entries", ok, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return make([]*spindle.DirEntry, len(es)), nil
		}},
		{"no head and no error", func() (*Head, error) { return nil, nil }, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return all(es), nil
		}},
		{"a head at the end of time", func() (*Head, error) { return &Head{User: ann, Seq: math.MaxInt64}, nil }, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return nil, spindle.E(spindle.Invalid, "no")
		}},
		{"a head that never holds", ok, func(es []*Entry) ([]*spindle.DirEntry, error) {
			return nil, spindle.E(spindle.Transient, "moved")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClient(&liar{head: tc.head, append: tc.append}, newSigner(t, ann))
			ctx := context.Background()
			var ds []*spindle.DirEntry
			for i := range 3 {
				ds = append(ds, &spindle.DirEntry{Name: spindle.PathName(fmt.Sprintf("%s/f%d", ann, i)), Packing: spindle.EEPack})
			}
			outs, errs := c.PutBatch(ctx, ds)
			for i := range ds {
				if (outs[i] == nil) == (errs[i] == nil) {
					t.Errorf("entry %d: %v and %v; want an entry or an error", i, outs[i], errs[i])
				}
			}
			out, err := c.Put(ctx, ds[0])
			if (out == nil) == (err == nil) {
				t.Errorf("put: %v and %v; want an entry or an error", out, err)
			}
			if err != nil && errors.Is(err, spindle.Other) {
				t.Errorf("put: %v, of no kind", err)
			}
		})
	}
}

// FuzzWriterAgainstLiar lets the fuzzer be the dir host: it picks the
// head, how many of a batch's entries the host says it appended, which
// of those come back empty, and the error besides. The writer never
// panics, and gives every entry an entry or an error.
func FuzzWriterAgainstLiar(f *testing.F) {
	f.Add(int64(3), false, uint8(3), int8(-1), uint8(0), uint8(3))
	f.Add(int64(3), false, uint8(3), int8(-1), uint8(spindle.Invalid), uint8(3))
	f.Add(int64(0), true, uint8(0), int8(-1), uint8(0), uint8(1))
	f.Add(int64(math.MaxInt64), false, uint8(9), int8(2), uint8(spindle.Transient), uint8(8))
	f.Fuzz(func(t *testing.T, seq int64, noHead bool, done uint8, nilAt int8, kind uint8, n uint8) {
		head := func() (*Head, error) {
			if noHead {
				return nil, nil
			}
			return &Head{User: ann, Seq: seq, Hash: Hash{byte(seq)}}, nil
		}
		calls := 0
		appendFn := func(es []*Entry) ([]*spindle.DirEntry, error) {
			calls++
			if calls > 3 {
				return nil, spindle.E(spindle.IO, "gone")
			}
			out := make([]*spindle.DirEntry, int(done)%(2*len(es)+1))
			for i := range out {
				if i != int(nilAt) {
					out[i] = &spindle.DirEntry{Name: es[i%len(es)].Entry.Name}
				}
			}
			var err error
			if kind != 0 {
				err = spindle.E(spindle.Kind(kind%20), "made up")
			}
			return out, err
		}
		c := NewClient(&liar{head: head, append: appendFn}, newSigner(t, ann))
		var ds []*spindle.DirEntry
		for i := range int(n)%10 + 1 {
			ds = append(ds, &spindle.DirEntry{Name: spindle.PathName(fmt.Sprintf("%s/f%d", ann, i)), Packing: spindle.EEPack})
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		outs, errs := c.PutBatch(ctx, ds)
		for i := range ds {
			if (outs[i] == nil) == (errs[i] == nil) {
				t.Fatalf("entry %d: %v and %v; want an entry or an error", i, outs[i], errs[i])
			}
		}
	})
}
