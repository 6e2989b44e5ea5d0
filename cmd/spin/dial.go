package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/client"
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
		return nil, keysProblem(cfg, err)
	}
	if keys.UserName() != cfg.Username {
		return nil, keysOfOther(cfg, keys.UserName())
	}
	var packing spindle.Packing
	if cfg.Packing != "" {
		packing, err = spindle.ParsePacking(cfg.Packing)
		if err != nil {
			return nil, err
		}
	}
	c, err := client.Dial(ctx, client.Config{
		Keys:          keys,
		Logger:        cfg.Log,
		Node:          cfg.Node,
		Packing:       packing,
		KeyLog:        keyLogFile(cfg.File),
		Verifier:      cfg.Verifier,
		RequireKeyLog: !cfg.NewKeyLog,
		DirHeads:      stateFile(cfg.File, "dirheads"),
		Evidence:      stateFile(cfg.File, "evidence"),

		PlainForwarding: cfg.PlainForwarding,
	})
	var km *client.KeyMismatchError
	if errors.As(err, &km) {
		return nil, keyMismatch(cfg, err, km.Registered)
	}
	return c, err
}

// trustCluster starts the key log of cfg (see client.TrustKeyCluster) and
// returns the key cluster's verifier key and its fingerprint.
var trustCluster = func(ctx context.Context, cfg *Config) (vkey, fingerprint string, err error) {
	keys, err := pack.Load(cfg.Secrets)
	if err != nil {
		return "", "", err
	}
	vkey, err = client.TrustKeyCluster(ctx, client.Config{
		Keys:     keys,
		Logger:   cfg.Log,
		Node:     cfg.Node,
		KeyLog:   keyLogFile(cfg.File),
		Verifier: cfg.Verifier,
	})
	if err != nil {
		return "", "", err
	}
	return vkey, client.VerifierFingerprint(vkey), nil
}

// keyLogFile returns the file that holds what the client has seen of the
// key cluster's transparency log.
func keyLogFile(config string) string { return stateFile(config, "keylog") }

// stateFile returns the file, beside the config file, in which a client
// keeps what it has seen of the network (see client.Config): NAME for
// the default config, CONFIG.NAME for a config CONFIG.EXT.
func stateFile(config, name string) string {
	dir, base := filepath.Split(config)
	if base == "config" {
		return filepath.Join(dir, name)
	}
	return filepath.Join(dir, strings.TrimSuffix(base, filepath.Ext(base))+"."+name)
}

// runNode runs "spin node" with the arguments after "node".
var runNode = func(ctx context.Context, st *State, args []string) int {
	return runNodeCommand(ctx, args, st.Stdout, st.Stderr, st.Log, func(n *node.Node) (node.PublicReader, error) {
		return client.NewAnonymous(client.AnonConfig{Node: n.Host().ID(), Send: n.AnonSend, Get: n.GetBlock, Verifier: n.VerifierKey(), Logger: st.Log})
	})
}
