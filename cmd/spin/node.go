package main

import (
	"context"
	"errors"

	"spindle.dev/node"
)

// nodeUsage is the node package's own help text, so that "spin help node"
// and "spin node -help" are one text.
const nodeUsage = node.NodeUsage

// runNodeCmd runs "spin node" through runNode (see dial.go).
func runNodeCmd(ctx context.Context, st *State, args []string) error {
	if wantsHelp(args) {
		return errHelp
	}
	if runNode == nil {
		return errors.New("spin node is not built in")
	}
	if code := runNode(ctx, st, args); code != exitOK {
		if code == exitUsage {
			return errUsageReported
		}
		return errFailed
	}
	return nil
}

// wantsHelp reports whether args, up to the first non-flag, ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "--h":
			return true
		case "--":
			return false
		}
	}
	return false
}
