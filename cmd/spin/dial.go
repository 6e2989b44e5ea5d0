package main

import (
	"context"
	"errors"

	"spindle.dev"
)

// The parts of spin that come from package node are wired here, and only
// here: the network client every client command uses, the peer that "spin
// node" runs, and "spin demo". main hands dialClient to State.NewClient.

// dialClient connects to the network through the peer cfg.Node names, as
// cfg.Username with the keys in cfg.Secrets.
//
// TODO(coordinator): set to node.Dial once package node exists.
var dialClient = func(ctx context.Context, cfg *Config) (spindle.Client, error) {
	return nil, errors.New("no network client built in")
}

// runNode runs "spin node" with the arguments after "node"; nil means this
// binary has no node built in.
//
// TODO(coordinator): set from package node.
var runNode func(ctx context.Context, st *State, args []string) int

// runDemo runs "spin demo"; nil means this binary has no demo built in.
//
// TODO(coordinator): set from package node.
var runDemo func(ctx context.Context, st *State, args []string) int
