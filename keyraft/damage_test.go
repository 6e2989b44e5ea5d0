package keyraft

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
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
	recsFile := filepath.Join(t.TempDir(), "records")
	var enc bytes.Buffer
	for _, u := range recs {
		fmt.Fprintf(&enc, "%x\n", keylog.EncodeRecord(u))
	}
	if err := os.WriteFile(recsFile, enc.Bytes(), 0o600); err != nil {
		t.Fatal(err)
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
			// The open runs in a process of its own: a store that sends
			// bolt into an endless descent is abandoned after a time
			// limit, and the goroutine left behind would take this
			// process's memory with it, case after case.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestDamagedStoreChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "KEYRAFT_DAMAGE_DIR="+dir, "KEYRAFT_DAMAGE_RECS="+recsFile)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("opening the damaged store: %v\n%s", err, out)
			}
			switch {
			case bytes.Contains(out, []byte("\nrefused: ")) || bytes.HasPrefix(out, []byte("refused: ")):
				// Raft may also time out applying a log whose stable
				// store was damaged; an error, not a panic, is what counts.
				refused++
				t.Logf("%s", firstLine(out, "refused: "))
			case bytes.Contains(out, []byte("opened with every record intact")):
				clean++
			default:
				t.Fatalf("the child neither refused nor opened the store:\n%s", out)
			}
		})
	}
	t.Logf("%d cases: %d refused with an error, %d opened with every record intact", len(cases), refused, clean)
	if refused == 0 {
		t.Fatal("no damage was detected: the test damaged nothing that matters")
	}
}

// TestDamagedStoreChild is TestDamagedStore's child process: it opens a
// member on the damaged home KEYRAFT_DAMAGE_DIR and prints "refused: "
// and the error, or checks that every record in KEYRAFT_DAMAGE_RECS is
// served unchanged and prints that it opened.
func TestDamagedStoreChild(t *testing.T) {
	dir := os.Getenv("KEYRAFT_DAMAGE_DIR")
	if dir == "" {
		t.Skip("run by TestDamagedStore")
	}
	data, err := os.ReadFile(os.Getenv("KEYRAFT_DAMAGE_RECS"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := tryOpen(t, dir)
	if err != nil {
		fmt.Printf("\nrefused: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	defer c.Close()
	for _, line := range strings.Fields(string(data)) {
		b, err := hex.DecodeString(line)
		if err != nil {
			t.Fatal(err)
		}
		u, err := keylog.DecodeRecord(b)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Lookup(ctxT(t), u.Name)
		if err != nil {
			t.Fatalf("member started over damage but lost %s: %v", u.Name, err)
		}
		if !bytes.Equal(keylog.EncodeRecord(got), b) {
			t.Fatalf("member started over damage and serves a changed record of %s", u.Name)
		}
	}
	fmt.Println("\nopened with every record intact")
}

// firstLine returns the line of out that starts with prefix.
func firstLine(out []byte, prefix string) string {
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return ""
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
