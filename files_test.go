package spindle_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"spindle.dev"
)

func TestReplaceFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "state")
	for i, durable := range []bool{true, false} {
		data := []byte(fmt.Sprintf("version %d\n", i))
		if err := spindle.ReplaceFile(name, data, 0o640, durable); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(name)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %q, %v; want %q", got, err, data)
		}
		if fi, _ := os.Stat(name); fi.Mode().Perm() != 0o640 {
			t.Errorf("mode %v, want 0640", fi.Mode().Perm())
		}
	}
	if err := spindle.ReplaceFile(filepath.Join(dir, "missing", "x"), nil, 0o600, true); !errors.Is(err, spindle.IO) {
		t.Errorf("replace in a missing directory: %v, want IO", err)
	}
	assertOnly(t, dir, "state")
}

// Writers running at once leave one of their versions whole.
func TestReplaceFileConcurrent(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "state")
	versions := make(map[string]bool)
	var wg sync.WaitGroup
	for i := range 8 {
		data := bytes.Repeat([]byte{byte('a' + i)}, 64<<10)
		versions[string(data)] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if err := spindle.ReplaceFile(name, data, 0o600, false); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(name)
	if err != nil || !versions[string(got)] {
		t.Fatalf("after concurrent replaces: %d bytes, %v; not one writer's version", len(got), err)
	}
	assertOnly(t, dir, "state")
}

func TestCreateFile(t *testing.T) {
	dir := t.TempDir()
	name := filepath.Join(dir, "key")
	if err := spindle.CreateFile(name, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := spindle.CreateFile(name, []byte("second"), 0o600); !errors.Is(err, spindle.Exist) {
		t.Fatalf("second create: %v, want Exist", err)
	}
	if got, _ := os.ReadFile(name); string(got) != "first" {
		t.Fatalf("file holds %q after a refused create, want %q", got, "first")
	}
	assertOnly(t, dir, "key")
}

// assertOnly fails unless dir holds exactly the file want: no temporary
// file is left behind.
func assertOnly(t *testing.T, dir, want string) {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(des) != 1 || des[0].Name() != want {
		var names []string
		for _, de := range des {
			names = append(names, de.Name())
		}
		t.Errorf("directory holds %q, want only %q", names, want)
	}
}
