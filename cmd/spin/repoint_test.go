package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/pack"
)

// spin init -node on an existing config re-points it at another node and
// keeps its keys, key log and heads; it refuses flags that would change
// anything else, another user's name, and a node it cannot use.
func TestInitRepoints(t *testing.T) {
	home := t.TempDir()
	var dialed []spindle.PeerAddr
	var dialErr error
	initRun := func(args ...string) (string, string, int) {
		var out, errs strings.Builder
		st := &State{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errs, Home: home}
		if len(args) > 0 && args[0] == "init" && slices.Contains(args, "-node") {
			st.NewClient = func(ctx context.Context, cfg *Config) (spindle.Client, error) {
				dialed = append(dialed, cfg.Node)
				if dialErr != nil {
					return nil, dialErr
				}
				return newFakeClient(cfg.Username), nil
			}
		}
		code := run(args, st)
		return out.String(), errs.String(), code
	}
	const a, b = "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWa", "/ip4/127.0.0.1/tcp/2/p2p/12D3KooWb"
	file := filepath.Join(home, "spin", "config")
	if _, errs, code := initRun("init", "-node", a, "-packing", "plain", "ann@example.com"); code != 0 {
		t.Fatalf("init: exit %d\n%s", code, errs)
	}
	keys, err := pack.Load(filepath.Join(home, "spin", "keys"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"keylog", "dirheads"} {
		os.WriteFile(filepath.Join(home, "spin", f), []byte("kept\n"), 0o600)
	}

	out, errs, code := initRun("init", "-node", b, "ann@example.com")
	if code != 0 || errs != "" || strings.Contains(out, "recovery secret") || !strings.Contains(out, "now reaches the network through "+b) {
		t.Fatalf("init -node on an existing config: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	cfg, err := ReadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node != b || len(cfg.Keyserver) != 1 || cfg.Keyserver[0] != a || cfg.Packing != "plain" {
		t.Errorf("config after init -node: %+v", cfg)
	}
	if again, err := pack.Load(cfg.Secrets); err != nil || again.PublicKey() != keys.PublicKey() {
		t.Errorf("keys after init -node: %v, %v; want the same key", again, err)
	}
	for _, f := range []string{"keylog", "dirheads"} {
		if data, _ := os.ReadFile(filepath.Join(home, "spin", f)); string(data) != "kept\n" {
			t.Errorf("%s after init -node: %q, want it kept", f, data)
		}
	}
	if len(dialed) != 1 || dialed[0] != b {
		t.Errorf("init -node dialed %v, want the new node once", dialed)
	}

	// A node that cannot be used leaves the config as it was.
	dialErr = spindle.E(spindle.IO, errors.New("connection refused"))
	_, errs, code = initRun("init", "-node", a, "ann@example.com")
	if cfg, _ := ReadConfig(file); code != exitFailure || cfg.Node != b || !strings.Contains(errs, "it still names node "+b) {
		t.Errorf("init -node with a node that does not answer: exit %d, config node %s\n%s", code, cfg.Node, errs)
	}
	dialErr = nil

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"init", "-node", a, "-packing", "ee", "ann@example.com"}, "changes only the node"},
		{[]string{"init", "-node", a, "-recover", "ann@example.com"}, "changes only the node"},
		{[]string{"init", "-node", a, "bob@example.com"}, "already exists, for ann@example.com"},
	} {
		_, errs, code := initRun(tc.args...)
		if cfg, _ := ReadConfig(file); code != exitFailure || !strings.Contains(errs, tc.want) || cfg.Node != b {
			t.Errorf("spin %s: exit %d, config node %s, stderr:\n%s\nwant %q", strings.Join(tc.args, " "), code, cfg.Node, errs, tc.want)
		}
	}
}

// When the node does not answer, the hint names the command that moves
// the client to another node without new keys.
func TestDeadNodeHintRepoints(t *testing.T) {
	var errb bytes.Buffer
	cfgFile := filepath.Join(t.TempDir(), "ann.yaml")
	st := &State{
		Stderr: &errb,
		Config: &Config{Username: ann, Node: "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWa", Secrets: "k", File: cfgFile},
		NewClient: func(ctx context.Context, cfg *Config) (spindle.Client, error) {
			return nil, spindle.E(spindle.Op("client.Dial"), spindle.IO, errLibp2pDial)
		},
	}
	if _, err := st.Client(context.Background()); err != errFailed {
		t.Fatalf("Client: %v", err)
	}
	want := "spin: hint: or reach the network through another node, keeping your keys: spin -config " + cfgFile + " init -node ADDR ann@example.com\n"
	if got := errb.String(); !strings.Contains(got, want) || strings.Contains(got, `\n`) {
		t.Errorf("stderr:\n%s\nwant it to hold, on one line each:\n%s", got, want)
	}
}
