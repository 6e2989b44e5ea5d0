package access

import (
	"slices"
	"testing"

	"spindle.dev"
)

// Candidates lists exactly the Access files WhichAccess asks its loader
// for, in the same order, when none exists.
func TestCandidatesMatchWhichAccess(t *testing.T) {
	for _, name := range []spindle.PathName{
		"ann@example.com/",
		"ann@example.com/a",
		"ann@example.com/Access",
		"ann@example.com/a/b/c.txt",
		"ann@example.com/a/b/Access",
		"ann@example.com/a/Access/x", // A name that only looks like one.
		"ann+cam@example.com/x/y/z/w",
	} {
		var asked []spindle.PathName
		_, err := WhichAccess(name, func(file spindle.PathName) (*Access, error) {
			asked = append(asked, file)
			return nil, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := Candidates(name)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, asked) {
			t.Errorf("Candidates(%s) = %v, WhichAccess looked for %v", name, got, asked)
		}
	}
	if _, err := Candidates("not a name"); err == nil {
		t.Error("Candidates of a bad name: no error")
	}
}
