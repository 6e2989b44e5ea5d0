package dirlog

import (
	"spindle.dev"
	"spindle.dev/dirlog/dirlogtest"
)

// The tests' signer (a user and a dir host) and entries, shared with the
// dir host's tests through dirlogtest.
var (
	newSigner = dirlogtest.NewSigner
	file      = dirlogtest.File
	control   = dirlogtest.Control
	wantKind  = dirlogtest.WantKind
)

const (
	ann = spindle.UserName("ann@example.com")
	bob = spindle.UserName("bob@example.com")
	cat = spindle.UserName("cat@example.com")
	dan = spindle.UserName("dan@other.org")
)
