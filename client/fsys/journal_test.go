package fsys

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
)

// A journal entry reads back as it was written.
func TestJournalRoundTrip(t *testing.T) {
	for _, j := range []journal{
		{Name: "ann@example.com/a.txt", Base: 0},
		{Name: "ann@example.com/dir/with space", Base: 1234567},
	} {
		got, err := parseJournal(j.marshal())
		if err != nil || got != j {
			t.Errorf("parseJournal(%q) = %+v, %v; want %+v", j.marshal(), got, err, j)
		}
	}
	for _, bad := range []string{"", "ann@example.com/a\n", "ann@example.com/a\n1", "ann@example.com/a\n-1\n", "ann@example.com/../a\n1\n", "a\n1\n", "ann@example.com/a\n1\nmore\n"} {
		if j, err := parseJournal([]byte(bad)); err == nil {
			t.Errorf("parseJournal(%q) = %+v, want an error", bad, j)
		}
	}
}

// A journal entry, however cut short or damaged, is read back as one
// that encodes to the same bytes, or refused.
func FuzzParseJournal(f *testing.F) {
	f.Add([]byte("ann@example.com/a.txt\n0\n"))
	f.Add([]byte("ann@example.com/d/e\n42\n"))
	f.Add([]byte("ann@example.com/d/e\n4"))
	f.Fuzz(func(t *testing.T, data []byte) {
		j, err := parseJournal(data)
		if err != nil {
			return
		}
		if string(j.marshal()) != string(data) {
			t.Fatalf("%q reads as %+v, which writes as %q", data, j, j.marshal())
		}
		if _, err := spindle.Clean(j.Name); err != nil {
			t.Fatalf("%q reads as an unclean name %q", data, j.Name)
		}
	})
}

// A journal entry is written and replaced in one step, as a link or, too
// long for one, as a file, and reads back.
func TestJournalFile(t *testing.T) {
	dir := t.TempDir()
	for _, j := range []journal{
		{Name: "ann@example.com/a", Base: 1},
		{Name: "ann@example.com/b", Base: 2},
		{Name: spindle.PathName("ann@example.com/" + strings.Repeat("long/", 1000) + "end"), Base: 3},
		{Name: "ann@example.com/c", Base: 4},
	} {
		path := filepath.Join(dir, "file-1"+journalSuffix)
		if err := writeJournal(path, j); err != nil {
			t.Fatal(err)
		}
		got, err := readJournal(path)
		if err != nil || got != j {
			t.Fatalf("read back %+v, %v; want %+v", got, err, j)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("the directory holds %d entries, want 1", len(ents))
	}
}
