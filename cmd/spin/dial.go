package main

import (
	"context"
	"errors"

	"spindle.dev"
)

// The parts of spin that come from package node are wired here, and only
// here: the network client every client command uses and the peer that
// "spin node" (and "spin demo") runs. main hands dialClient to
// State.NewClient.

// dialClient connects to the network through the peer cfg.Node names, as
// cfg.Username with the keys in cfg.Secrets.
//
// TODO(coordinator): set to node.Dial once package node exists.
var dialClient = func(ctx context.Context, cfg *Config) (spindle.Client, error) {
	return nil, errors.New("no network client built in")
}

// runNode runs "spin node" with the arguments after "node", printing to
// st's streams, until it fails or ctx is cancelled, and returns the exit
// code. It must write the node's addresses to HOME/addr once it is ready,
// and stop cleanly when ctx is cancelled: spin demo relies on both. Nil
// means this binary has no node built in.
//
// TODO(coordinator): set from package node, here in the declaration, so
// that tests see it too.
var runNode func(ctx context.Context, st *State, args []string) int
