package fsys_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %v after 30s", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Two users: bob is refused with the right errno until ann shares a
// directory by saving its Access file as an editor does (a temporary file
// renamed over it), which re-shares the files it governs.
func TestShareByEditorSave(t *testing.T) {
	env := inproc(t, ann, bob)
	annTop, annRoot := mount(t, env, ann, 10*time.Second)
	bobTop, _ := mount(t, env, bob, 10*time.Second)
	_ = annTop
	docs := filepath.Join(annRoot, "docs")
	check(t, os.Mkdir(docs, 0o755))
	check(t, os.WriteFile(filepath.Join(docs, "notes.txt"), []byte("Meet at noon.\n"), 0o644))
	check(t, os.WriteFile(filepath.Join(docs, "Access"), []byte("*: ann@example.com\n"), 0o644))

	bobNotes := filepath.Join(bobTop, string(ann), "docs/notes.txt")
	if _, err := os.ReadFile(bobNotes); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("bob reads ann's private file: %v, want ENOENT", err)
	}
	if _, err := os.ReadDir(filepath.Join(bobTop, string(ann), "docs")); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("bob lists ann's private directory: %v, want ENOENT", err)
	}

	// The editor's save.
	tmp := filepath.Join(docs, ".Access.swp")
	rules := "*: ann@example.com\nread, list: bob@example.com\n"
	check(t, os.WriteFile(tmp, []byte(rules), 0o644))
	check(t, os.Rename(tmp, filepath.Join(docs, "Access")))
	got, err := os.ReadFile(filepath.Join(docs, "Access"))
	check(t, err)
	if string(got) != rules {
		t.Fatalf("Access after the save: %q", got)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("temporary file after the save: %v", err)
	}
	c, _ := env.Client(ann)
	e, err := c.Lookup(context.Background(), "ann@example.com/docs/Access", false)
	check(t, err)
	if string(e.Inline) != rules {
		t.Fatalf("stored Access: %q", e.Inline)
	}

	// bob can read now: the file's key was re-wrapped for him.
	waitFor(t, "bob reading the shared file", func() error {
		data, err := os.ReadFile(bobNotes)
		if err == nil && !bytes.Equal(data, []byte("Meet at noon.\n")) {
			t.Fatalf("bob reads %q", data)
		}
		return err
	})
	// But he may not write.
	if err := os.Mkdir(filepath.Join(bobTop, string(ann), "docs/sub"), 0o755); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("bob's mkdir in ann's directory: %v, want EACCES", err)
	}
	// Closing does not wait for the put; fsync does, and says why not.
	if err := writeSync(filepath.Join(bobTop, string(ann), "docs/bob.txt"), []byte("hi")); !errors.Is(err, syscall.EACCES) {
		t.Fatalf("bob's write in ann's directory: %v, want EACCES", err)
	}
}

// Another client's change shows in the mount by itself.
func TestOtherClientChange(t *testing.T) {
	env := inproc(t)
	_, root := mount(t, env, ann, 10*time.Second)
	check(t, os.WriteFile(filepath.Join(root, "a.txt"), []byte("one"), 0o644))
	// Cache the listing and the file's attributes.
	if _, err := os.ReadDir(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "a.txt")); err != nil {
		t.Fatal(err)
	}
	c, _ := env.Client(ann)
	ctx := context.Background()
	if _, err := c.Put(ctx, "ann@example.com/a.txt", bytes.NewReader([]byte("two, longer")), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "ann@example.com/b.txt", bytes.NewReader([]byte("new")), 0, nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitFor(t, "the other client's put", func() error {
		data, err := os.ReadFile(filepath.Join(root, "a.txt"))
		if err != nil {
			return err
		}
		if string(data) != "two, longer" {
			return errors.New("old contents " + string(data))
		}
		if _, err := os.Stat(filepath.Join(root, "b.txt")); err != nil {
			return err
		}
		return nil
	})
	t.Logf("the change showed after %v", time.Since(start))
	if err := c.Delete(ctx, "ann@example.com/b.txt"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the other client's delete", func() error {
		_, err := os.Stat(filepath.Join(root, "b.txt"))
		if errors.Is(err, syscall.ENOENT) {
			return nil
		}
		return errors.New("b.txt still there")
	})
}
