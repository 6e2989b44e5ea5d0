package fsys_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

// TestSnapshots reads the tree's past through .snapshots: a day lists
// the tree at its end, seq-N the tree after entry N, byte for byte; every
// change there is EROFS; and .snapshots is listed neither by the mount
// nor by the client, nor found in another user's tree.
func TestSnapshots(t *testing.T) {
	env := inproc(t, ann, bob)
	_, root := mount(t, env, ann, 10*time.Second)
	c, err := env.Client(ann)
	check(t, err)
	ctx := context.Background()
	put := func(name spindle.PathName, data string) {
		t.Helper()
		if _, err := c.Put(ctx, name, strings.NewReader(data), spindle.UnknownPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.MakeDirectory(ctx, "ann@example.com/docs")
	check(t, err)
	put("ann@example.com/docs/a.txt", "the first draft")
	put("ann@example.com/docs/a.txt", "the second draft")
	_, err = c.MakeDirectory(ctx, "ann@example.com/album")
	check(t, err)
	photo := strings.Repeat("not really a photo ", 200000) // Four blocks.
	put("ann@example.com/album/p.jpg", photo)
	hs, err := c.(*client.Client).History(ctx, "ann@example.com/docs/a.txt")
	check(t, err)
	ha, err := c.(*client.Client).History(ctx, "ann@example.com/album/p.jpg")
	check(t, err)
	check(t, c.Delete(ctx, "ann@example.com/album/p.jpg"))
	check(t, c.Delete(ctx, "ann@example.com/album"))

	snaps := filepath.Join(root, ".snapshots")
	today := time.Now().UTC().Format(time.DateOnly)
	ents, err := os.ReadDir(snaps)
	check(t, err)
	if len(ents) != 1 || ents[0].Name() != today || !ents[0].IsDir() {
		t.Fatalf(".snapshots lists %v, want only %s", ents, today)
	}
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(snaps, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read(today + "/docs/a.txt"); got != "the second draft" {
		t.Errorf("%s/docs/a.txt holds %q, want the second draft", today, got)
	}
	if _, err := os.Stat(filepath.Join(snaps, today, "album")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the album, deleted today, in today's snapshot: %v", err)
	}
	first := fmt.Sprintf("seq-%d", hs[0].Seq)
	if got := read(first + "/docs/a.txt"); got != "the first draft" {
		t.Errorf("%s/docs/a.txt holds %q, want the first draft", first, got)
	}
	withPhoto := fmt.Sprintf("seq-%d", ha[0].Seq)
	if got := read(withPhoto + "/album/p.jpg"); got != photo {
		t.Errorf("%s/album/p.jpg: %d bytes, want the %d put", withPhoto, len(got), len(photo))
	}
	var walked []string
	check(t, filepath.WalkDir(filepath.Join(snaps, withPhoto), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(snaps, withPhoto), p)
		walked = append(walked, rel)
		return nil
	}))
	if want := []string{".", "album", "album/p.jpg", "docs", "docs/a.txt"}; !slices.Equal(walked, want) {
		t.Errorf("walking %s: %v, want %v", withPhoto, walked, want)
	}
	if info, err := os.Stat(filepath.Join(snaps, first, "docs/a.txt")); err != nil || info.Mode().Perm()&0o222 != 0 {
		t.Errorf("a snapshot's file: %v, %v, want no write permission", info.Mode(), err)
	}

	// Read-only, all of it.
	a := filepath.Join(snaps, first, "docs/a.txt")
	openRW := func() error {
		f, err := os.OpenFile(a, os.O_RDWR, 0)
		if err == nil {
			f.Close()
		}
		return err
	}
	for what, err := range map[string]error{
		"write a file":       os.WriteFile(a, []byte("x"), 0o644),
		"open for writing":   openRW(),
		"create a file":      os.WriteFile(filepath.Join(snaps, first, "docs/new.txt"), []byte("x"), 0o644),
		"remove a file":      os.Remove(a),
		"make a folder":      os.Mkdir(filepath.Join(snaps, first, "new"), 0o755),
		"make a snapshot":    os.Mkdir(filepath.Join(snaps, "mine"), 0o755),
		"remove a folder":    os.Remove(filepath.Join(snaps, first, "docs")),
		"rename in one":      os.Rename(a, filepath.Join(snaps, first, "docs/b.txt")),
		"move a file into":   os.Rename(filepath.Join(root, "docs/a.txt"), filepath.Join(snaps, first, "docs/b.txt")),
		"move .snapshots":    os.Rename(snaps, filepath.Join(root, "snaps")),
		"truncate":           os.Truncate(a, 0),
		"remove .snapshots":  os.Remove(snaps),
		"link in a snapshot": os.Symlink("docs", filepath.Join(snaps, first, "l")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", what, err)
		}
	}
	if got := read(first + "/docs/a.txt"); got != "the first draft" {
		t.Errorf("after the refused changes %s/docs/a.txt holds %q", first, got)
	}
	if b, err := os.ReadFile(filepath.Join(root, "docs/a.txt")); err != nil || string(b) != "the second draft" {
		t.Errorf("after the refused changes docs/a.txt holds %q, %v", b, err)
	}

	// Only in the mount, only in one's own tree, only by a good name.
	ents, err = os.ReadDir(root)
	check(t, err)
	for _, e := range ents {
		if e.Name() == ".snapshots" {
			t.Errorf("the root lists .snapshots")
		}
	}
	es, err := c.Glob(ctx, "ann@example.com/*")
	check(t, err)
	for _, e := range es {
		if strings.Contains(string(e.Name), ".snapshots") {
			t.Errorf("the client lists %s", e.Name)
		}
	}
	for _, p := range []string{
		filepath.Join(snaps, "seq-99999"),
		filepath.Join(snaps, "seq-01"),
		filepath.Join(snaps, "yesterday"),
		filepath.Join(snaps, "1999-01-01"),
		filepath.Join(root, "..", string(bob), ".snapshots"),
		filepath.Join(root, "docs", ".snapshots"),
	} {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stat %s: %v, want not found", p, err)
		}
	}
}
