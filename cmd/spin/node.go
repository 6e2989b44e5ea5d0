package main

import (
	"context"
	"errors"
)

const nodeUsage = `Usage:
    spin node -home DIR [-listen MULTIADDR] [-writers LIST] [-keyserver ADDR,...]

Runs a Spindle peer: it stores blocks, hosts directory logs and, on a fresh
home with no -keyserver, bootstraps a key cluster of one. When it is ready it
writes its dialable addresses, one per line, to DIR/addr and prints them.
SIGINT or SIGTERM stops it cleanly.

Options:
    -home DIR            the node's state: blocks/, raft/, dirlogs/, peerkey
    -listen MULTIADDR    address to listen on (default /ip4/0.0.0.0/tcp/0 and QUIC)
    -writers LIST        who may create trees and store blocks here: users,
                         *@domain or all, comma-separated
    -keyserver ADDR,...  join the key cluster at these addresses
    -help                print this text

Example:
    $ spin node -home ~/spin/node -writers ann@example.com,*@example.org
`

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
