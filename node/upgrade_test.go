package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

var update = flag.Bool("update", false, "write testdata/home-v1, the homes today's code writes")

// The homes in testdata/home-v1 were written by the code of home format
// version 1 (go test ./node -run TestHomeV1 -update). Later versions must
// open them and serve the file in them; never regenerate them after a
// format bump: add the homes of the new version beside them instead.
const (
	v1Dir    = "testdata/home-v1"
	v1File   = "ann@example.com/hello.txt"
	v1Data   = "hello from a version 1 home\n"
	v1Secret = "spindle home format 1 test secret"
)

func v1Keys(t *testing.T) *pack.Keys {
	t.Helper()
	var s pack.Secret
	copy(s[:], v1Secret)
	k, err := pack.FromSecret("ann@example.com", s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writeV1Homes writes a node home and a client home with today's code:
// ann signs up on the node and puts one file through it.
func writeV1Homes(t *testing.T, dir string) {
	t.Helper()
	ctx := context.Background()
	nodeHome, clientHome := filepath.Join(dir, "node"), filepath.Join(dir, "client")
	if err := os.MkdirAll(clientHome, 0o700); err != nil {
		t.Fatal(err)
	}
	keys := v1Keys(t)
	if err := keys.Save(filepath.Join(clientHome, "keys")); err != nil {
		t.Fatal(err)
	}
	n, err := New(ctx, Config{Home: nodeHome, NoSocket: true, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := v1Client(t, n, clientHome, keys)
	defer c.Close()
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, v1File, strings.NewReader(v1Data), spindle.UnknownPack, nil); err != nil {
		t.Fatal(err)
	}
}

func v1Client(t *testing.T, n *Node, home string, keys *pack.Keys) *client.Client {
	t.Helper()
	c, err := client.Dial(context.Background(), client.Config{Keys: keys, Node: n.DialAddr(), Home: home,
		KeyLog: filepath.Join(home, "keylog"), DirHeads: filepath.Join(home, "dirheads"), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// copyV1Homes copies testdata/home-v1 to a temporary directory (opening
// a home may write to it) and returns the node home and the client home.
func copyV1Homes(t *testing.T) (nodeHome, clientHome string) {
	t.Helper()
	if *update {
		os.RemoveAll(v1Dir)
		writeV1Homes(t, v1Dir)
	}
	dir := t.TempDir()
	copyHome(t, v1Dir, dir)
	return filepath.Join(dir, "node"), filepath.Join(dir, "client")
}

// TestHomeV1 opens the node home and the client home of format version 1
// kept in testdata and reads the file in them through the node.
func TestHomeV1(t *testing.T) {
	nodeHome, clientHome := copyV1Homes(t)
	n := startNode(t, nodeHome)
	defer n.Close()
	keys, err := pack.Load(filepath.Join(clientHome, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	c := v1Client(t, n, clientHome, keys)
	defer c.Close()
	mustRead(t, c, v1File, []byte(v1Data))
}

// TestHomeMigration bumps the node home format to a version 3 with two
// test steps, each writing a file crash-safely. A crash in the second
// step (before the format file moves on) leaves a home that the program
// opens again: at version 2, then migrated on to 3; and the node serves
// the file in it throughout.
func TestHomeMigration(t *testing.T) {
	nodeHome, clientHome := copyV1Homes(t)
	keys, err := pack.Load(filepath.Join(clientHome, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	crash := true
	f := homeFormat()
	f.Version = f.Version + 2
	step := func(name string) func(string) error {
		return func(home string) error {
			return spindle.ReplaceFile(filepath.Join(home, name), []byte(name), 0o600, true)
		}
	}
	f.Migrations = append(f.Migrations,
		spindle.Migration{From: 1, Migrate: step("step2")},
		spindle.Migration{From: 2, Migrate: func(home string) error {
			if err := step("step3")(home); err != nil {
				return err
			}
			if crash {
				return errors.New("simulated crash")
			}
			return nil
		}})
	ctx := context.Background()
	_, err = New(ctx, Config{Home: nodeHome, NoSocket: true, Writers: []string{"all"}, Logger: testLogger(t), format: &f})
	if err == nil || !strings.Contains(err.Error(), "simulated crash") {
		t.Fatalf("migration with a crash: %v", err)
	}
	if got := formatOf(t, nodeHome); got != 2 {
		t.Fatalf("after a crash in step 2→3 the home is at version %d, want 2", got)
	}
	crash = false
	n, err := New(ctx, Config{Home: nodeHome, NoSocket: true, Writers: []string{"all"}, Logger: testLogger(t), format: &f})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := formatOf(t, nodeHome); got != 3 {
		t.Fatalf("migrated home at version %d, want 3", got)
	}
	c := v1Client(t, n, clientHome, keys)
	defer c.Close()
	mustRead(t, c, v1File, []byte(v1Data))
}

// TestHomeNewerRefused: a node home and a client home written by a newer
// spin are refused with an error that names the file, both versions and
// what to do, and are left as they were.
func TestHomeNewerRefused(t *testing.T) {
	nodeHome, clientHome := copyV1Homes(t)
	newer := homeFormat().Version + 1
	for _, h := range []string{nodeHome, clientHome} {
		if err := os.WriteFile(filepath.Join(h, spindle.FormatFile), []byte(fmt.Sprintf("spindle home format %d\n", newer)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := New(context.Background(), Config{Home: nodeHome, NoSocket: true, Writers: []string{"all"}, Logger: testLogger(t)})
	checkNewer(t, err, nodeHome, newer)
	checkNewer(t, client.OpenHome(clientHome), clientHome, newer)
	for _, h := range []string{nodeHome, clientHome} {
		if got := formatOf(t, h); got != newer {
			t.Fatalf("refused home %s rewritten to version %d", h, got)
		}
	}
}

func checkNewer(t *testing.T, err error, home string, newer int) {
	t.Helper()
	if err == nil {
		t.Fatalf("home %s of version %d opened", home, newer)
	}
	for _, want := range []string{filepath.Join(home, spindle.FormatFile), fmt.Sprintf("version %d", newer), fmt.Sprintf("up to %d", newer-1), "upgrade spin"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, spindle.Invalid) {
		t.Errorf("error %v is not Invalid", err)
	}
}

func formatOf(t *testing.T, home string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, spindle.FormatFile))
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if _, err := fmt.Sscanf(string(b), "spindle home format %d", &v); err != nil {
		t.Fatal(err)
	}
	return v
}
