package host

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

var mapSeed = flag.Uint64("mapseed", 0, "seed of TestMapRootProperty's random logs (0: a fresh one)")

// logEntries returns every entry of user's log as the server stored it.
func (e *env) logEntries(user spindle.UserName) []*dirlog.Entry {
	e.t.Helper()
	l := e.s.served(user)
	if l == nil {
		return nil
	}
	l.appendMu.Lock()
	defer l.appendMu.Unlock()
	var out []*dirlog.Entry
	err := l.log.Scan(e.ctx, func(b []byte) error {
		p := dirlog.DecodePending(b)
		if p.Err != nil {
			return p.Err
		}
		out = append(out, p.Entry)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// A treeModel is what a random log has made of ann's tree, to choose the
// next operation from.
type treeModel struct {
	dirs  map[spindle.PathName]bool // Directories, the root included.
	items map[spindle.PathName]bool // Files and links.
	// subtreeMoves counts renames of directories with items below them.
	subtreeMoves int
}

func join(dir spindle.PathName, elem string) spindle.PathName {
	if strings.HasSuffix(string(dir), "/") {
		return dir + spindle.PathName(elem)
	}
	return dir + "/" + spindle.PathName(elem)
}

// pick returns a random name from set, or "" if it is empty.
func pick(rng *rand.Rand, set map[spindle.PathName]bool) spindle.PathName {
	if len(set) == 0 {
		return ""
	}
	names := make([]spindle.PathName, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	return names[rng.IntN(len(names))]
}

// step makes one random operation on ann's tree through c, mostly valid
// ones, and updates the model from the outcome.
func (m *treeModel) step(ctx context.Context, rng *rand.Rand, c *dirlog.Client) {
	root := spindle.PathName("ann@example.com/")
	name := func() spindle.PathName { return join(pick(rng, m.dirs), fmt.Sprintf("n%d", rng.IntN(6))) }
	switch op := rng.IntN(10); {
	case op < 3:
		n := name()
		if _, err := c.Put(ctx, file(n, int64(1+rng.IntN(5000)))); err == nil {
			m.items[n] = true
		}
	case op < 4:
		// A batch of puts, which the server may store with one sync.
		dir := pick(rng, m.dirs)
		var ds []*spindle.DirEntry
		for i := 0; i < 1+rng.IntN(6); i++ {
			ds = append(ds, file(join(dir, fmt.Sprintf("b%d", rng.IntN(20))), 10))
		}
		_, errs := c.PutBatch(ctx, ds)
		for i, err := range errs {
			if err == nil {
				m.items[ds[i].Name] = true
			}
		}
	case op < 5:
		// Directories take names of their own as well as the files'
		// (a tree whose n0…n5 are all files would grow no more).
		n := name()
		if rng.IntN(2) == 0 {
			n = join(pick(rng, m.dirs), fmt.Sprintf("d%d", rng.IntN(4)))
		}
		if _, err := c.MakeDirectory(ctx, n); err == nil {
			m.dirs[n] = true
		}
	case op < 6:
		n := name()
		if _, err := c.PutLink(ctx, join(pick(rng, m.dirs), "x"), n); err == nil {
			m.items[n] = true
		}
	case op < 7:
		var n spindle.PathName
		if rng.IntN(2) == 0 || len(m.dirs) == 1 {
			n = pick(rng, m.items)
		} else {
			n = pick(rng, m.dirs)
		}
		if n == "" {
			return
		}
		if _, err := c.Delete(ctx, n); err == nil {
			delete(m.items, n)
			delete(m.dirs, n)
		}
	default:
		// Rename a file, link or directory with everything below it.
		var from spindle.PathName
		if rng.IntN(3) == 0 {
			from = pick(rng, m.items)
		} else {
			from = pick(rng, m.dirs)
		}
		to := name()
		if from == root || from == "" {
			return
		}
		if _, err := c.Rename(ctx, from, to); err != nil {
			return
		}
		for _, set := range []map[spindle.PathName]bool{m.dirs, m.items} {
			moved := map[spindle.PathName]bool{}
			for n := range set {
				if n == from || strings.HasPrefix(string(n), string(from)+"/") {
					delete(set, n)
					moved[to+n[len(from):]] = true
				}
			}
			if len(moved) > 1 {
				m.subtreeMoves++
			}
			for n := range moved {
				set[n] = true
			}
		}
	}
}

// TestMapRootProperty appends random logs of puts (singly and in
// batches), mkdirs, links, deletes and renames of files and of directories
// with their subtrees, and checks that the root the server signs in its
// head equals MapRoot of the log after every step; that folding the log
// entry by entry gives MapRoot of each prefix at every sequence number;
// that a restart (replay) and Audit give the same root; and that the
// server's map proves every name of the tree, and the absence of others,
// against the signed root.
func TestMapRootProperty(t *testing.T) {
	seed := *mapSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (rerun with -mapseed %d)", seed, seed)
	for _, kind := range []string{"mem", "disk"} {
		t.Run(kind, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0))
			var store Store = &MemStore{}
			if kind == "disk" {
				var err error
				if store, err = DiskStore(filepath.Join(t.TempDir(), "logs")); err != nil {
					t.Fatal(err)
				}
			}
			e := newEnv(t, store)
			c := e.as(ann)
			e.do(c.MakeDirectory(e.ctx, "ann@example.com/"))
			m := &treeModel{dirs: map[spindle.PathName]bool{"ann@example.com/": true}, items: map[spindle.PathName]bool{"ann@example.com/n0": true}}
			e.do(c.Put(e.ctx, file("ann@example.com/n0", 1)))
			// At least 150 steps, and more (within bounds) until a
			// directory has been moved with items below it.
			for i := 0; i < 150 || (m.subtreeMoves == 0 && i < 1500); i++ {
				m.step(e.ctx, rng, c)
				h := e.do2(e.s.Head(e.ctx, ann))
				if err := h.Verify(e.host); err != nil {
					t.Fatal(err)
				}
				es := e.logEntries(ann)
				want, err := dirlog.MapRoot(es)
				if err != nil {
					t.Fatal(err)
				}
				if h.Seq != int64(len(es)) || h.Root != want {
					t.Fatalf("step %d: head at %d signs root %s; MapRoot of the %d entries is %s", i, h.Seq, h.Root, len(es), want)
				}
			}
			es := e.logEntries(ann)
			ops := map[dirlog.Operation]int{}
			for _, en := range es {
				ops[en.Op]++
			}
			if m.subtreeMoves == 0 || ops[dirlog.OpPut] == 0 || ops[dirlog.OpDelete] == 0 || ops[dirlog.OpLink] == 0 || ops[dirlog.OpMkdir] < 2 || ops[dirlog.OpRename] == 0 {
				t.Fatalf("the random log lacks some operation: %v, %d renames of non-empty directories", ops, m.subtreeMoves)
			}
			fold := dirlog.NewTree(ann)
			for i, en := range es {
				fold.Apply(en)
				want, err := dirlog.MapRoot(es[:i+1])
				if err != nil {
					t.Fatal(err)
				}
				if got := fold.MapRoot(); got != want {
					t.Fatalf("sequence %d (%s): fold gives root %s, MapRoot %s", i+1, en.Op, got, want)
				}
			}
			h := e.do2(e.s.Head(e.ctx, ann))
			checkProofs(t, e, h, m)

			e.reopen()
			if h2 := e.do2(e.s.Head(e.ctx, ann)); h2.Seq != h.Seq || h2.Root != h.Root {
				t.Fatalf("after restart: head %d root %s, want %d root %s", h2.Seq, h2.Root, h.Seq, h.Root)
			}
			if kind == "mem" {
				data := store.(*MemStore).Bytes(ann)
				reps, err := dirlog.Audit(e.ctx, map[spindle.UserName][]byte{ann: data}, e.keys, nil)
				if err != nil || reps[0].Err != nil || reps[0].Root != h.Root {
					t.Fatalf("audit: %+v, %v; want root %s", reps, err, h.Root)
				}
			}
			t.Logf("%d entries, %d directories, %d files and links", len(es), len(m.dirs), len(m.items))
		})
	}
}

// checkProofs checks that the server's map proves every name in the model
// present, with the hash of the entry that last put or moved it, and a few
// other names absent, against h.
func checkProofs(t *testing.T, e *env, h *dirlog.Head, m *treeModel) {
	t.Helper()
	v := e.s.view()
	defer v.release()
	tm := v.served(ann).t.Map
	if tm.Len() != len(m.dirs)+len(m.items) {
		t.Fatalf("map holds %d items, tree %d", tm.Len(), len(m.dirs)+len(m.items))
	}
	for _, set := range []map[spindle.PathName]bool{m.dirs, m.items} {
		for n := range set {
			k := dirlog.MapKey(n)
			v, ok := tm.Get(k)
			if !ok {
				t.Fatalf("%s is not in the map", n)
			}
			p, err := dirlog.UnmarshalMapProof(tm.Prove(k).Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if err := p.VerifyIncluded(h.Root, k, v); err != nil {
				t.Fatalf("%s: %v", n, err)
			}
		}
	}
	for i := 0; i < 50; i++ {
		n := spindle.PathName(fmt.Sprintf("ann@example.com/absent%d", i))
		k := dirlog.MapKey(n)
		if err := tm.Prove(k).VerifyAbsent(h.Root, k); err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
}
