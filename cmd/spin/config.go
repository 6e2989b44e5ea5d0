package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"spindle.dev/client"

	"spindle.dev"
)

// A Config is the client's configuration, kept in YAML at $HOME/spin/config
// (or wherever -config points):
//
//	username: ann@example.com
//	keyserver:
//	    - /ip4/192.0.2.7/tcp/4242/p2p/12D3KooW...
//	node: /ip4/127.0.0.1/tcp/4242/p2p/12D3KooW...
//	packing: ee
//	secrets: /home/ann/spin/keys
type Config struct {
	// Username is the user the client acts for.
	Username spindle.UserName `yaml:"username"`
	// Keyserver lists addresses of key-cluster members; they are also the
	// peers the client's node bootstraps from.
	Keyserver []spindle.PeerAddr `yaml:"keyserver,omitempty"`
	// Node is the peer the client reaches the network through, and the dir
	// host named at signup.
	Node spindle.PeerAddr `yaml:"node,omitempty"`
	// Packing is the default packing for new files: ee, eeintegrity or plain.
	Packing string `yaml:"packing,omitempty"`
	// Secrets is the directory holding the user's keys (see package pack).
	Secrets string `yaml:"secrets"`
	// Verifier, if set, pins the key cluster's verifier key (spin init
	// -verifier): the client trusts no other, and starts a lost key log
	// again with it.
	Verifier string `yaml:"verifier,omitempty"`
	// PlainForwarding lets the node carry requests for other nodes' trees
	// in plain, reading them, as before tunnels: only for a node or dir
	// host too old to carry them (see client.Config.PlainForwarding).
	PlainForwarding bool `yaml:"plainforwarding,omitempty"`

	// File is the file the configuration was read from.
	File string `yaml:"-"`
	// Log receives the client's log events.
	Log *slog.Logger `yaml:"-"`
	// NewKeyLog lets the client start a missing key log by trusting its
	// node's key cluster; only spin init, which shows the key, sets it.
	NewKeyLog bool `yaml:"-"`
}

// unknownField matches yaml.v3's report of a field Config lacks.
var unknownField = regexp.MustCompile(`field (\S+) not found in type \S+`)

// maxConfigSize bounds the configuration file spin reads.
const maxConfigSize = 1 << 20

// DefaultPacking returns the configured default packing, ee if none is set.
func (c *Config) DefaultPacking() (spindle.Packing, error) {
	if c.Packing == "" {
		return spindle.EEPack, nil
	}
	return spindle.ParsePacking(c.Packing)
}

// ReadConfig reads and checks the configuration in file.
func ReadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("file is larger than %d bytes", maxConfigSize)
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, err
	}
	cfg.File = file
	if cfg.Secrets != "" && !filepath.IsAbs(cfg.Secrets) {
		cfg.Secrets = filepath.Join(filepath.Dir(file), cfg.Secrets)
	}
	return cfg, nil
}

// ParseConfig parses and checks a configuration. Unknown fields are errors,
// so that a misspelt key is not silently ignored.
func ParseConfig(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	cfg := new(Config)
	if err := dec.Decode(cfg); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				msgs[i] = unknownField.ReplaceAllString(m, "unknown field $1")
			}
			return nil, fmt.Errorf("malformed YAML: %s", strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("malformed YAML: %v", err)
	}
	if cfg.Username == "" {
		return nil, errors.New("no username")
	}
	u, err := spindle.CleanUser(cfg.Username)
	if err != nil {
		_, msg := describe(err)
		return nil, fmt.Errorf("username %q: %s", cfg.Username, msg)
	}
	cfg.Username = u
	if _, err := cfg.DefaultPacking(); err != nil {
		_, msg := describe(err)
		return nil, fmt.Errorf("packing: %s", msg)
	}
	if cfg.Secrets == "" {
		return nil, errors.New("no secrets directory")
	}
	return cfg, nil
}

// Marshal returns the configuration as YAML.
func (c *Config) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(4)
	if err := enc.Encode(c); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// home returns the user's home directory.
func (st *State) home() (string, error) {
	if st.Home != "" {
		return st.Home, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find home directory: %v", err)
	}
	return h, nil
}

// configFile returns the configuration file's name.
func (st *State) configFile() (string, error) {
	if st.ConfigFile != "" {
		return st.ConfigFile, nil
	}
	h, err := st.home()
	if err != nil {
		return "", err
	}
	return filepath.Join(h, "spin", "config"), nil
}

// loadConfig returns the configuration, reading it on first use. A failure
// is reported, with a hint to run spin init, and returned as errFailed.
func (st *State) loadConfig() (*Config, error) {
	if st.Config != nil {
		return st.Config, nil
	}
	file, err := st.configFile()
	if err != nil {
		return nil, st.fail("", err)
	}
	cfg, err := ReadConfig(file)
	if err != nil {
		st.mu.Lock()
		fmt.Fprintf(st.Stderr, "spin: cannot read config %s: %s\n", file, err)
		st.mu.Unlock()
		spin := "spin"
		if st.ConfigFile != "" {
			spin = "spin -config " + st.ConfigFile
		}
		if errors.Is(err, fs.ErrNotExist) {
			st.hint("run: %s init USER to create it", spin)
		} else {
			st.hint("fix the file, or run: %s init -force USER to make a new one", spin)
		}
		return nil, errFailed
	}
	// The config's directory is the client's home when the config is
	// the default one's name (spin init's): check its format before any
	// other state in it is read.
	if filepath.Base(file) == "config" {
		if err := client.OpenHome(filepath.Dir(file)); err != nil {
			return nil, st.fail("", err)
		}
	}
	cfg.Log = st.Log
	st.Config = cfg
	return cfg, nil
}
