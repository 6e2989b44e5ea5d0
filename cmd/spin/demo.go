package main

import (
	"context"
	"errors"
)

const demoUsage = `Usage:
    spin demo

Starts a node in a temporary home, creates two users, stores a file as one,
shares it with the other through an Access file, reads it back as the other,
and prints each step with the command that does it. Everything is removed
when it ends.

Options:
    -help   print this text

Example:
    $ go run ./cmd/spin demo
`

// runDemoCmd runs "spin demo" through runDemo (see dial.go).
func runDemoCmd(ctx context.Context, st *State, args []string) error {
	if wantsHelp(args) {
		return errHelp
	}
	if runDemo == nil {
		return errors.New("spin demo is not built in")
	}
	switch runDemo(ctx, st, args) {
	case exitOK:
		return nil
	case exitUsage:
		return errUsageReported
	}
	return errFailed
}
