package dirlog

import (
	"testing"

	"spindle.dev"
)

// A re-wrap of a moved file made before hosts refused signed names set by
// writers keeps the renames that moved the file it replaces, so that its
// signed name is still proved.
func TestSignedRecordsOfOldRewrap(t *testing.T) {
	rename := []byte("rename record")
	old := &Node{Entry: spindle.DirEntry{Name: "ann@example.com/b", SignedName: "ann@example.com/a", Signed: [][]byte{rename}}}
	put := &Entry{Op: OpPut, Entry: spindle.DirEntry{Name: "ann@example.com/b", SignedName: "ann@example.com/a"}}
	if got := signedRecords(put, old); len(got) != 1 || string(got[0]) != string(rename) {
		t.Errorf("re-wrap of a moved file: records %q", got)
	}
	put.Entry.SignedName = "ann@example.com/c"
	if got := signedRecords(put, old); got != nil {
		t.Errorf("put naming another signed name: records %q", got)
	}
}
