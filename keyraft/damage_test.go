package keyraft

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev"
)

// damagedHome makes a member's home with records before and after a
// snapshot, closes it, and returns the directory and the records.
func damagedHome(t *testing.T) (string, []*spindle.User) {
	t.Helper()
	dir := t.TempDir()
	c := diskCluster(t, dir, true)
	var recs []*spindle.User
	for i := 0; i < 12; i++ {
		u := register(t, newSigner(t, spindle.UserName(fmt.Sprintf("user%d@example.com", i))), "12D3KooWHost")
		mustPut(t, c, u)
		recs = append(recs, u)
		if i == 5 {
			if err := c.raft.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, recs
}

// copyDir copies the files of a member's home.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDamagedStore flips bytes all over a member's raft.db and snapshots
// and opens it: each case must end in an error (nearly always Integrity
// wrapping ErrDamaged, naming the file), or in a member that holds every
// record as it was put. A panic fails the whole test binary.
func TestDamagedStore(t *testing.T) {
	if testing.Short() {
		t.Skip("opens many members on disk")
	}
	home, recs := damagedHome(t)
	db := filepath.Join(home, "raft", "raft.db")
	fi, err := os.Stat(db)
	if err != nil {
		t.Fatal(err)
	}
	type damage struct {
		name  string
		file  string // Under raft/.
		off   int64  // Negative: from the end.
		trunc bool   // Cut the file at off instead.
	}
	var cases []damage
	const page = 4096
	for p := int64(0); p*page < fi.Size(); p++ {
		for _, o := range []int64{0, 9, 12, 20, 40, 700, 2000} {
			cases = append(cases, damage{name: fmt.Sprintf("raft.db/page%d+%d", p, o), file: "raft.db", off: p*page + o})
		}
	}
	cases = append(cases,
		damage{name: "raft.db/empty", file: "raft.db", off: 0, trunc: true},
		damage{name: "raft.db/half", file: "raft.db", off: fi.Size() / 2, trunc: true},
		damage{name: "notekey", file: "notekey", off: 20},
	)
	snaps, _ := filepath.Glob(filepath.Join(home, "raft", "snapshots", "*"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot was taken")
	}
	for _, s := range snaps {
		rel, _ := filepath.Rel(filepath.Join(home, "raft"), s)
		cases = append(cases,
			damage{name: rel + "/state.bin", file: filepath.Join(rel, "state.bin"), off: 30},
			damage{name: rel + "/meta.json", file: filepath.Join(rel, "meta.json"), off: 5},
		)
	}
	var refused, clean int
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyDir(t, home, dir)
			name := filepath.Join(dir, "raft", tc.file)
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			if tc.trunc {
				b = b[:tc.off]
			} else {
				b[tc.off%int64(len(b))] ^= 0xFF
			}
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := tryOpen(t, dir)
			if err != nil {
				// Raft may also time out applying a log whose stable
				// store was damaged; an error, not a panic, is what counts.
				if !errors.Is(err, ErrDamaged) {
					t.Logf("open failed with kind %v: %v", spindle.KindOf(err), err)
				}
				refused++
				t.Logf("refused: %v", err)
				return
			}
			defer c.Close()
			clean++
			for _, u := range recs {
				got, err := c.Lookup(ctxT(t), u.Name)
				if err != nil {
					t.Fatalf("member started over damage but lost %s: %v", u.Name, err)
				}
				if string(EncodeRecord(got)) != string(EncodeRecord(u)) {
					t.Fatalf("member started over damage and serves a changed record of %s", u.Name)
				}
			}
		})
	}
	t.Logf("%d cases: %d refused with an error, %d opened with every record intact", len(cases), refused, clean)
	if refused == 0 {
		t.Fatal("no damage was detected: the test damaged nothing that matters")
	}
}

// tryOpen opens a member on dir, returning the error instead of failing.
func tryOpen(t *testing.T, dir string) (*Cluster, error) {
	n := newTCPNet()
	id := "12D3KooWTestMember"
	// A sound member of one leads within a second with fast timeouts; a
	// damaged stable store can keep raft from ever electing it, which
	// must end in an error, not in waiting out the default 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Open(ctx, Config{
		Dir: dir, ID: id, Listener: n.listen(t, id), Dial: n.dial,
		Bootstrap: true, Logger: testLogger(t), tune: fast,
	})
}
