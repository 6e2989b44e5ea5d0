package spindle_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
)

func readFormat(t *testing.T, home string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, spindle.FormatFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestOpenHomeMarks: a new (empty) home is marked with the current
// version and runs no step; a home with files and no format file was
// written before format files and is version 1, migrated from there.
func TestOpenHomeMarks(t *testing.T) {
	var ran []int
	f := spindle.HomeFormat{Kind: "test home", Version: 3}
	for _, from := range []int{1, 2} {
		f.Migrations = append(f.Migrations, spindle.Migration{From: from, Migrate: func(string) error { ran = append(ran, from); return nil }})
	}
	fresh := t.TempDir()
	if err := f.OpenHome(fresh); err != nil {
		t.Fatal(err)
	}
	if got := readFormat(t, fresh); got != "spindle home format 3" || len(ran) != 0 {
		t.Fatalf("fresh home: format %q, steps %v", got, ran)
	}
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, "peerkey"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.OpenHome(old); err != nil {
		t.Fatal(err)
	}
	if got := readFormat(t, old); got != "spindle home format 3" || len(ran) != 2 || ran[0] != 1 || ran[1] != 2 {
		t.Fatalf("unmarked home: format %q, steps %v", got, ran)
	}
	if err := f.OpenHome(old); err != nil || len(ran) != 2 {
		t.Fatalf("second open: %v, steps %v", err, ran)
	}
}

// TestOpenHomeCrash: a step that fails (a crash) leaves the format file
// at the last version completed; opening again resumes from there.
func TestOpenHomeCrash(t *testing.T) {
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, spindle.FormatFile), []byte("spindle home format 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	crash := true
	f := spindle.HomeFormat{Kind: "test home", Version: 3, Migrations: []spindle.Migration{
		{From: 1, Migrate: func(string) error { return nil }},
		{From: 2, Migrate: func(string) error {
			if crash {
				return errors.New("crash")
			}
			return nil
		}},
	}}
	if err := f.OpenHome(home); err == nil {
		t.Fatal("a failed step opened the home")
	}
	if got := readFormat(t, home); got != "spindle home format 2" {
		t.Fatalf("after a crash in step 2: %q", got)
	}
	crash = false
	if err := f.OpenHome(home); err != nil {
		t.Fatal(err)
	}
	if got := readFormat(t, home); got != "spindle home format 3" {
		t.Fatalf("resumed: %q", got)
	}
}

// TestOpenHomeRefuses: a newer home, a garbled format file and a version
// with no step are refused.
func TestOpenHomeRefuses(t *testing.T) {
	f := spindle.HomeFormat{Kind: "test home", Version: 2}
	for _, tc := range []struct{ content, want string }{
		{"spindle home format 3\n", "upgrade spin"},
		{"garbage", "want \"spindle home format N\""},
		{"spindle home format 1\n", "no migration from it"},
	} {
		home := t.TempDir()
		file := filepath.Join(home, spindle.FormatFile)
		if err := os.WriteFile(file, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		err := f.OpenHome(home)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), file) {
			t.Errorf("format %q: %v, want an error naming %s and saying %q", tc.content, err, file, tc.want)
		}
		if got, _ := os.ReadFile(file); string(got) != tc.content {
			t.Errorf("format %q rewritten to %q", tc.content, got)
		}
	}
}
