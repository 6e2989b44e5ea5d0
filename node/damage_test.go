package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/disk"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// damageHome makes a node home holding ann's tree with a small, a medium
// and a large file, and returns it with ann's keys and the files.
func damageHome(t *testing.T) (string, *pack.Keys, map[spindle.PathName][]byte) {
	t.Helper()
	home := t.TempDir()
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, home)
	c := dialKeys(t, n, keys)
	ctx := context.Background()
	files := map[spindle.PathName][]byte{
		ann("small"):       bytes.Repeat([]byte("s"), 100),
		ann("docs/medium"): bytes.Repeat([]byte("medium "), 3000),
		ann("docs/large"):  bytes.Repeat([]byte("large file "), 30000),
	}
	for _, p := range []spindle.PathName{ann("docs")} { // Signup made the root.
		if _, err := c.MakeDirectory(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		if _, err := c.Put(ctx, name, bytes.NewReader(data), spindle.UnknownPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return home, keys, files
}

func dialKeys(t *testing.T, n *Node, keys *pack.Keys) *client.Client {
	t.Helper()
	c, err := dial(n, keys)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dial(n *Node, keys *pack.Keys) (*client.Client, error) {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: n.DialAddr(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := c.Signup(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// copyHome copies the regular files of a node home.
func copyHome(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		switch {
		case d.IsDir():
			return os.MkdirAll(filepath.Join(to, rel), 0o700)
		case !d.Type().IsRegular():
			return nil
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

// TestDamagedHome is the crash-and-damage test: it flips bytes in every
// file under a node home (the key cluster's store and note key, the
// directory log, block segments and block files, the peer key) and
// starts the node on each copy. Every case must end in a one-line error
// that names the file, or in a node that starts and serves every file
// either exactly as it was put or with an error that reports the damage
// (Damaged or Integrity); a damaged tree must refuse a fresh root. A
// panic fails the test binary.
func TestDamagedHome(t *testing.T) {
	if testing.Short() {
		t.Skip("starts many nodes on disk")
	}
	home, keys, files := damageHome(t)
	type damage struct {
		rel string
		off int64
	}
	var cases []damage
	err := filepath.WalkDir(home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(home, p)
		fi, err := d.Info()
		if err != nil || fi.Size() == 0 {
			return err
		}
		offs := []int64{fi.Size() / 2}
		if strings.HasPrefix(rel, "dirlogs") || strings.HasSuffix(rel, "raft.db") {
			offs = []int64{3, 20, fi.Size() / 3, fi.Size() / 2, fi.Size() - 40}
		}
		for _, o := range offs {
			cases = append(cases, damage{rel, o})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, c := range cases {
		kinds[strings.SplitN(c.rel, string(filepath.Separator), 2)[0]] = true
	}
	for _, k := range []string{"blocks", "raft", "dirlogs", "peerkey"} {
		if !kinds[k] {
			t.Fatalf("the home holds no %s to damage: %v", k, kinds)
		}
	}
	var refused, reported, clean int
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s@%d", tc.rel, tc.off), func(t *testing.T) {
			dir := t.TempDir()
			copyHome(t, home, dir)
			name := filepath.Join(dir, tc.rel)
			b, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			b[tc.off] ^= 0xFF
			if err := os.WriteFile(name, b, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			n, err := newRecovering(ctx, Config{Home: dir, Writers: []string{"all"}, Logger: slog.New(slog.DiscardHandler), NoSocket: true})
			if err != nil {
				msg := err.Error()
				if strings.Contains(msg, "\n") || !strings.Contains(msg, filepath.Base(tc.rel)) {
					t.Fatalf("start-up error is not one line naming %s: %q", tc.rel, msg)
				}
				refused++
				t.Logf("refused: %v", err)
				return
			}
			defer n.Close()
			for _, d := range n.store.(*disk.Store).Damage() {
				t.Logf("block store reported: %v", d)
			}
			c, err := dial(n, keys)
			if errors.Is(err, spindle.Damaged) {
				reported++ // Signup reads the head of ann's tree.
				t.Logf("reported: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			damaged := false
			for name, want := range files {
				got, err := readFile(c, name)
				switch {
				case err == nil && !bytes.Equal(got, want):
					t.Fatalf("%s served wrong data after damage to %s", name, tc.rel)
				case err == nil:
				case errors.Is(err, spindle.Damaged), errors.Is(err, spindle.Integrity),
					strings.HasPrefix(tc.rel, "blocks") && errors.Is(err, spindle.NotExist) && strings.Contains(err.Error(), "disk.Get"):
					// A block lost to damage in the store (reported at
					// start-up, or in a segment header's digest, which
					// only the block's hash covers) is missing, never
					// wrong; its other holders serve it.
					damaged = true
					t.Logf("reported: %v", err)
				default:
					t.Fatalf("%s: %v; want the data or a report of damage", name, err)
				}
			}
			if _, err := c.Lookup(context.Background(), ann(""), false); errors.Is(err, spindle.Damaged) {
				if _, err := c.MakeDirectory(context.Background(), ann("")); !errors.Is(err, spindle.Damaged) {
					t.Fatalf("mkdir of a fresh root over a damaged tree: %v, want Damaged", err)
				}
			}
			if damaged {
				reported++
			} else {
				clean++
			}
		})
	}
	t.Logf("%d cases: %d refused to start with one line, %d started and reported the damage, %d started and served everything intact", len(cases), refused, reported, clean)
}

func readFile(c *client.Client, name spindle.PathName) ([]byte, error) {
	f, err := c.Open(context.Background(), name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// TestDamagedRaftStoreBinary runs the real spin binary on a home whose
// raft.db is damaged: the operator must see one line naming the file, and
// no stack trace.
func TestDamagedRaftStoreBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs spin")
	}
	home, _, _ := damageHome(t)
	db := filepath.Join(home, "raft", "raft.db")
	b, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	for off := 4096 * 2; off < len(b); off += 4096 {
		b[off+9] ^= 0xFF // The page type of every page after the meta pages.
	}
	if err := os.WriteFile(db, b, 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "spin")
	if out, err := exec.Command("go", "build", "-o", bin, "spindle.dev/cmd/spin").CombinedOutput(); err != nil {
		t.Fatalf("build spin: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "node", "-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "all")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("spin node on a damaged raft.db: %v, want exit status 1\n%s", err, stderr.String())
	}
	var diag []string
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(line, "spin: ") {
			diag = append(diag, line)
		}
	}
	if s := stderr.String(); strings.Contains(s, "goroutine ") || strings.Contains(s, "panic") || len(diag) != 1 || !strings.Contains(diag[0], db) {
		t.Fatalf("want one line naming %s, got:\n%s", db, s)
	}
	t.Logf("spin node printed: %s", diag[0])
}

// TestRepairDirLog is the operator's path for a damaged directory log: a
// byte flipped in the middle of ann's log makes the node refuse ann's
// tree, with an error that says so (never a rollback, never a fresh
// root), until it is restarted with Repair, which restores the byte and
// serves every file again; the log as it was is kept aside.
func TestRepairDirLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nodes on disk")
	}
	home, keys, files := damageHome(t)
	log := filepath.Join(home, "dirlogs", "ann@example.com.log")
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xFF
	if err := os.WriteFile(log, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := startNode(t, home)
	if len(n.dir.Damage()) != 1 {
		t.Fatalf("damage not reported: %v", n.dir.Damage())
	}
	_, err = dial(n, keys)
	if !errors.Is(err, spindle.Damaged) || !strings.Contains(err.Error(), "at entry") {
		t.Fatalf("signup against a damaged tree: %v, want Damaged naming the entry", err)
	}
	if got, _ := os.ReadFile(log); !bytes.Equal(got, b) {
		t.Fatal("the damaged log was changed before the operator decided")
	}
	n.Close()

	n, err = New(ctx, Config{Home: home, Writers: []string{"all"}, Logger: testLogger(t), Repair: []spindle.UserName{"ann@example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := dialKeys(t, n, keys)
	defer c.Close()
	for name, want := range files {
		mustRead(t, c, name, want)
	}
	if m, _ := filepath.Glob(log + ".damaged-*"); len(m) != 1 {
		t.Fatalf("the damaged log was not kept aside: %v", m)
	}
	if _, err := c.Put(ctx, ann("after-repair"), strings.NewReader("x"), spindle.UnknownPack, nil); err != nil {
		t.Fatal(err)
	}
}

// newRecovering is New with a panic turned into an error, as spin node
// does, so that a damaged file that makes a library panic fails the
// check of a one-line error naming it rather than the whole test binary.
func newRecovering(ctx context.Context, cfg Config) (n *Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("a file under %s made the node fail as it started: %v", cfg.Home, r)
		}
	}()
	return New(ctx, cfg)
}
