package client

import (
	"errors"

	"spindle.dev"
)

// Causes of the client's errors that a program may want to tell apart,
// with errors.Is. What to do about them is the program's to say (spin
// prints its hints); the errors say only what is so.
var (
	// ErrNoDirHost is the cause of a NotExist error for a tree whose
	// owner's key record names no dir host: no node hosts the tree,
	// whatever a node says about it.
	ErrNoDirHost = errors.New("the key record names no dir host")
	// ErrNotAdmitted is the cause of Signup's Permission error when the
	// node does not host the user's tree: its operator has not admitted
	// the user as a writer.
	ErrNotAdmitted = errors.New("its operator has not admitted you as a writer")
	// ErrKeyLogMissing is the cause of Dial's NotExist error when
	// Config.RequireKeyLog is set and the key log is not there: what the
	// client trusted of the key cluster is not taken from the node again
	// silently.
	ErrKeyLogMissing = errors.New("the key log is missing")
	// ErrOtherCluster is the cause of an Integrity error for a node whose
	// key cluster signs with a key the client's key log does not trust.
	ErrOtherCluster = errors.New("the node's key cluster is not the one this client trusts")
	// ErrOpenWildcard is the cause of Put's warning for an Access file
	// that grants a right to *@domain under the key cluster's open
	// policy, which lets anyone register a name in any domain.
	ErrOpenWildcard = errors.New("under the key cluster's open policy anyone can register a name in a domain, so a wildcard grants to whoever does, now or later")
)

// A ReshareError is one of Put's warnings for an Access or Group file:
// the put took effect, but the file keys of what it governs were not all
// wrapped again for the readers it now names. Share with fix set, on
// Path (and below it if Tree), finishes the work.
type ReshareError struct {
	Path spindle.PathName
	Tree bool  // The re-sharing of the tree under Path stopped.
	Err  error // Why.
}

func (e *ReshareError) Error() string {
	if e.Tree {
		return "re-sharing stopped: " + e.Err.Error()
	}
	return "keys not re-wrapped: " + e.Err.Error()
}

func (e *ReshareError) Unwrap() error { return e.Err }
