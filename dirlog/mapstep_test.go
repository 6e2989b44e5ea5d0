package dirlog

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"spindle.dev"
)

// stepTree builds a tree of ann's from n random entries (mkdirs, puts,
// puts over files, deletes, renames of files and of directories with
// items in them) and returns it with its entries and the head after each.
func stepTree(t *testing.T, seed uint64, n int) (*Tree, []*Entry, []*Head) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	tr := NewTree(ann)
	var all []*Entry
	heads := []*Head{{User: ann, Root: tr.MapRoot()}}
	add := func(op Operation, d spindle.DirEntry, to spindle.PathName) {
		t.Helper()
		d.Writer, d.Sequence = ann, tr.Seq+1
		e := &Entry{Seq: tr.Seq + 1, Prev: tr.Head, Op: op, Writer: ann, Entry: d, NewName: to}
		if _, err := tr.Apply(e); err != nil {
			t.Fatalf("entry %d (%s of %s): %v", e.Seq, op, d.Name, err)
		}
		all = append(all, e)
		heads = append(heads, &Head{User: ann, Seq: tr.Seq, Hash: tr.Head, Root: tr.MapRoot()})
	}
	add(OpMkdir, spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory}, "")
	dirs := []spindle.PathName{"ann@example.com"}
	var files []spindle.PathName
	for len(all) < n {
		k := r.IntN(10)
		if k >= 6 && len(files) == 0 {
			k = 2 // Nothing to change yet: a new file.
		}
		switch {
		case k < 2:
			d := spindle.PathName(fmt.Sprintf("%s/d%d", dirs[r.IntN(len(dirs))], len(all)))
			add(OpMkdir, spindle.DirEntry{Name: d, Attr: spindle.AttrDirectory}, "")
			dirs = append(dirs, d)
		case k < 6:
			f := spindle.PathName(fmt.Sprintf("%s/f%d", dirs[r.IntN(len(dirs))], len(all)))
			add(OpPut, *file(f, int64(len(all))), "")
			files = append(files, f)
		case k < 7:
			add(OpPut, *file(files[r.IntN(len(files))], int64(len(all))), "")
		case k < 8:
			i := r.IntN(len(files))
			add(OpDelete, spindle.DirEntry{Name: files[i]}, "")
			files = append(files[:i], files[i+1:]...)
		case k < 9:
			i := r.IntN(len(files))
			to := spindle.PathName(fmt.Sprintf("%s/m%d", dirs[r.IntN(len(dirs))], len(all)))
			add(OpRename, spindle.DirEntry{Name: files[i]}, to)
			files[i] = to
		default:
			if len(dirs) < 3 {
				continue
			}
			i := 1 + r.IntN(len(dirs)-1)
			from := dirs[i]
			to := spindle.PathName(fmt.Sprintf("ann@example.com/r%d", len(all)))
			add(OpRename, spindle.DirEntry{Name: from}, to)
			moved := func(p spindle.PathName) spindle.PathName {
				if p == from || strings.HasPrefix(string(p), string(from)+"/") {
					return to + p[len(from):]
				}
				return p
			}
			for j := range dirs {
				dirs[j] = moved(dirs[j])
			}
			for j := range files {
				files[j] = moved(files[j])
			}
		}
	}
	return tr, all, heads
}

// roundTrip returns st encoded and decoded again.
func roundTrip(t *testing.T, st *MapStep) *MapStep {
	t.Helper()
	got, err := UnmarshalMapStep(st.Marshal())
	if err != nil {
		t.Fatalf("map step does not decode: %v", err)
	}
	return got
}

// Every step of an honest log checks, from any head to any later one,
// with the host's tree at its head or moved on since.
func TestMapStep(t *testing.T) {
	for seed := range uint64(4) {
		tr, all, heads := stepTree(t, seed, 300)
		ops := make(map[Operation]int)
		for _, e := range all {
			ops[e.Op]++
		}
		if ops[OpMkdir] == 0 || ops[OpPut] == 0 || ops[OpDelete] == 0 || ops[OpRename] == 0 {
			t.Fatalf("seed %d: a log without every operation: %v", seed, ops)
		}
		r := rand.New(rand.NewPCG(seed, 2))
		for range 40 {
			from := r.IntN(len(all))
			to := from + 1 + r.IntN(len(all)-from)
			st, err := tr.MapStep(int64(from))
			if err != nil {
				t.Fatal(err)
			}
			if err := CheckMapStep(heads[from], heads[to], all[from:to], roundTrip(t, st)); err != nil {
				t.Fatalf("seed %d, step from %d to %d (host at %d): %v", seed, from, to, tr.Seq, err)
			}
		}
	}
}

// What a lying host may try, each caught: the genuine next entry under the
// older map root, changes that are not the entry's, a wrong old value, a
// path or a leaf left out.
func TestMapStepLies(t *testing.T) {
	tr, all, heads := stepTree(t, 7, 200)
	from, to := int64(140), int64(190)
	honest, err := tr.MapStep(from)
	if err != nil {
		t.Fatal(err)
	}
	entries := all[from:to]
	if err := CheckMapStep(heads[from], heads[to], entries, roundTrip(t, honest)); err != nil {
		t.Fatal(err)
	}
	type lie struct {
		name string
		got  func() *Head
		st   func(st *MapStep)
	}
	var deleteAt int
	for i, cs := range honest.Changes {
		if len(cs) == 1 && !cs[0].HasNew {
			deleteAt = i
		}
	}
	lies := []lie{
		{"genuine next entry over the older map", func() *Head {
			h := *heads[from+1]
			h.Root = heads[from].Root
			return &h
		}, nil},
		{"a map root from no state", func() *Head {
			h := *heads[to]
			h.Root[5] ^= 1
			return &h
		}, nil},
		{"a put's change sets another value", nil, func(st *MapStep) {
			for _, cs := range st.Changes {
				if cs[0].HasNew && cs[0].Name == "" {
					cs[0].New[0] ^= 1
					return
				}
			}
		}},
		{"a change claims another old value", nil, func(st *MapStep) {
			for _, cs := range st.Changes[:to-from] {
				if cs[0].HadOld {
					cs[0].Old[0] ^= 1
					return
				}
			}
			t.Fatal("no change with an old value")
		}},
		{"a change of a later entry claims another old value", nil, func(st *MapStep) {
			cs := st.Changes[len(st.Changes)-1]
			cs[0].HadOld = !cs[0].HadOld
		}},
		{"a path left out", nil, func(st *MapStep) { st.Paths = st.Paths[1:] }},
		{"a path's value changed", nil, func(st *MapStep) {
			for i := range st.Paths {
				if st.Paths[i].Present {
					st.Paths[i].Val[0] ^= 1
					return
				}
			}
		}},
		{"an entry's changes left out", nil, func(st *MapStep) { st.Changes[0] = nil }},
		{"changes of too few entries", nil, func(st *MapStep) { st.Changes = st.Changes[:len(st.Changes)-1] }},
	}
	for _, l := range lies {
		t.Run(l.name, func(t *testing.T) {
			st := roundTrip(t, honest) // A deep copy to change.
			got := heads[to]
			if l.got != nil {
				got = l.got()
			}
			if l.st != nil {
				l.st(st)
			}
			n := got.Seq - from
			if err := CheckMapStep(heads[from], got, entries[:n], st); !errors.Is(err, spindle.Integrity) {
				t.Fatalf("lie not caught: %v", err)
			}
		})
	}
	_ = deleteAt
}

// Deleting a key whose neighbour is a lone leaf raises the leaf: without
// the leaf, a reader cannot undo the delete, and the step fails rather
// than pass.
func TestMapStepNeedsLeaves(t *testing.T) {
	tr, all, heads := stepTree(t, 3, 120)
	for from := int64(100); from < int64(len(all)); from++ {
		st, err := tr.MapStep(from)
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Leaves) == 0 {
			continue
		}
		st.Leaves = nil
		if err := CheckMapStep(heads[from], heads[len(all)], all[from:], st); err == nil {
			continue // No change here needed a leaf raised.
		} else if !errors.Is(err, spindle.Integrity) {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no step needed the leaves beside its paths")
}

// A host keeps the changes of its latest MapStepWindow entries, and none
// from before a fold: older steps are NotExist.
func TestMapStepWindow(t *testing.T) {
	tr, _, _ := stepTree(t, 1, 50)
	if _, err := tr.MapStep(0); err != nil {
		t.Fatalf("step from the start of a short log: %v", err)
	}
	if _, err := tr.MapStep(tr.Seq + 1); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("step from past the head: %v", err)
	}
	ft, err := tr.Checkpoint().Fold()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ft.MapStep(10); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("step from before a fold: %v", err)
	}
	g := *file("ann@example.com/after", 1)
	g.Writer, g.Sequence = ann, ft.Seq+1
	if _, err := ft.Apply(&Entry{Seq: ft.Seq + 1, Prev: ft.Head, Op: OpPut, Writer: ann, Entry: g}); err != nil {
		t.Fatal(err)
	}
	if _, err := ft.MapStep(ft.Seq - 1); err != nil {
		t.Fatalf("step after a fold: %v", err)
	}
	big, _, _ := stepTree(t, 2, MapStepWindow+20)
	if _, err := big.MapStep(10); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("step from before the window: %v", err)
	}
	if _, err := big.MapStep(big.Seq - MapStepWindow); err != nil {
		t.Fatalf("step of the whole window: %v", err)
	}
}

func FuzzMapStep(f *testing.F) {
	tr := NewTree(ann)
	f.Add([]byte(mapStepMagic))
	for i, op := range []Operation{OpMkdir, OpPut, OpPut, OpRename, OpDelete} {
		d := spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory}
		var to spindle.PathName
		switch op {
		case OpPut:
			d = *file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 1)
		case OpRename:
			d, to = spindle.DirEntry{Name: "ann@example.com/f1"}, "ann@example.com/g"
		case OpDelete:
			d = spindle.DirEntry{Name: "ann@example.com/g"}
		}
		d.Writer, d.Sequence = ann, tr.Seq+1
		if _, err := tr.Apply(&Entry{Seq: tr.Seq + 1, Prev: tr.Head, Op: op, Writer: ann, Entry: d, NewName: to}); err != nil {
			f.Fatal(err)
		}
		st, err := tr.MapStep(0)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(st.Marshal())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := UnmarshalMapStep(b)
		if err != nil {
			return
		}
		again := st.Marshal()
		if string(again) != string(b) {
			t.Fatalf("decoded and encoded again differs")
		}
		// With no entries to check, the paths are grafted and every
		// change undone: none of it may panic.
		floor := &Head{User: ann, Seq: st.From}
		CheckMapStep(floor, &Head{User: ann, Seq: st.From, Root: st.Root}, nil, st)
	})
}

// A host that builds its whole step around a map of its own making, so
// that every path, change and root in it agrees with the head it signs,
// is caught by what it cannot make agree: the map root the older head
// signs, and the entries' own hashes.
func TestMapStepLiesConsistent(t *testing.T) {
	const from, to = 140, 190
	_, all, heads := stepTree(t, 7, to)
	for _, tc := range []struct {
		name string
		// fake changes the liar's tree (built from the same entries)
		// and returns the map root it then signs at to.
		fake func(t *testing.T, tr *Tree) Hash
	}{
		{"a file that was never put, or was deleted, is in the map", func(t *testing.T, tr *Tree) Hash {
			tr.Map.Set(MapKey("ann@example.com/resurrected"), testHash("an old entry"))
			return tr.MapRoot()
		}},
		{"an entry's change sets another value", func(t *testing.T, tr *Tree) Hash {
			for i := len(tr.steps.list) - 1; i >= 0; i-- {
				cs := tr.steps.list[i]
				if len(cs) != 1 || !cs[0].HasNew || int64(i)+tr.steps.from+1 > to {
					continue
				}
				later := false
				for _, ls := range tr.steps.list[i+1:] {
					for _, c := range ls {
						later = later || c.Key == cs[0].Key
					}
				}
				if later {
					continue
				}
				cs[0].New = testHash("not the entry")
				tr.Map.Set(cs[0].Key, cs[0].New)
				return tr.MapRoot()
			}
			t.Fatal("no entry to fake")
			return Hash{}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			liar, _, _ := stepTree(t, 7, to)
			got := *heads[to]
			got.Root = tc.fake(t, liar)
			st, err := liar.MapStep(from)
			if err != nil {
				t.Fatal(err)
			}
			err = CheckMapStep(heads[from], &got, all[from:to], roundTrip(t, st))
			if !errors.Is(err, spindle.Integrity) {
				t.Fatalf("lie not caught: %v", err)
			}
			t.Log(err)
		})
	}
}

// The size of a one-entry map step grows with the log of the map's size:
// a path of about log2(n) hashes and the leaves beside it.
func TestMapStepSize(t *testing.T) {
	for _, n := range []int{100, 10000} {
		tr := NewTree(ann)
		apply := func(op Operation, d spindle.DirEntry) {
			d.Writer, d.Sequence = ann, tr.Seq+1
			if _, err := tr.Apply(&Entry{Seq: tr.Seq + 1, Prev: tr.Head, Op: op, Writer: ann, Entry: d}); err != nil {
				t.Fatal(err)
			}
		}
		apply(OpMkdir, spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory})
		for i := range n {
			apply(OpPut, *file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), 1))
		}
		st, err := tr.MapStep(tr.Seq - 1)
		if err != nil {
			t.Fatal(err)
		}
		size := len(st.Marshal())
		t.Logf("a one-entry map step in a map of %d items: %d bytes", n+1, size)
		// 64 bytes of change and header, one path of at most 2*log2(n)
		// hashes, and a few leaves beside it.
		if limit := 200 + 64*int(2*math.Log2(float64(n))); size > limit {
			t.Errorf("%d bytes, more than %d", size, limit)
		}
	}
}
