package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/node"
	"spindle.dev/pack"
)

// The parts of spin that come from package node are wired here, and only
// here: the network client every client command uses, the peer that "spin
// node" runs. main hands dialClient to State.NewClient.

// dialClient connects to the network through the peer cfg.Node names, as
// cfg.Username with the keys in cfg.Secrets.
var dialClient = func(ctx context.Context, cfg *Config) (spindle.Client, error) {
	keys, err := pack.Load(cfg.Secrets)
	if err != nil {
		return nil, err
	}
	if keys.UserName() != cfg.Username {
		return nil, fmt.Errorf("keys in %s are for %s, not %s", cfg.Secrets, keys.UserName(), cfg.Username)
	}
	var packing spindle.Packing
	if cfg.Packing != "" {
		packing, err = spindle.ParsePacking(cfg.Packing)
		if err != nil {
			return nil, err
		}
	}
	return node.Dial(ctx, node.ClientConfig{Keys: keys, Node: cfg.Node, Packing: packing, KeyLog: keyLogFile(cfg.File)})
}

// keyLogFile returns the file, beside the config file, that holds what the
// client has seen of the key cluster's transparency log: "keylog" for the
// default config, NAME.keylog for a config NAME.EXT.
func keyLogFile(config string) string {
	dir, base := filepath.Split(config)
	if base == "config" {
		return filepath.Join(dir, "keylog")
	}
	return filepath.Join(dir, strings.TrimSuffix(base, filepath.Ext(base))+".keylog")
}

// runNode runs "spin node" with the arguments after "node".
var runNode = func(ctx context.Context, st *State, args []string) int {
	return node.RunCommand(ctx, args, st.Stdout, st.Stderr, st.Log)
}
