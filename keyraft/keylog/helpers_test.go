package keylog

import (
	"testing"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev/pack"

	"spindle.dev"
)

// newSigner returns new keys of user name: a spindle.Signer.
func newSigner(t testing.TB, name spindle.UserName) *pack.Keys {
	t.Helper()
	k, _, err := pack.Generate(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signHead returns the signed note of tree head h.
func signHead(s note.Signer, h HeadInfo) ([]byte, error) {
	return note.Sign(&note.Note{Text: string(FormatHead(h))}, s)
}
