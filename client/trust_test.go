package client

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
	"spindle.dev/pack"
)

// Trust in the key cluster is established once, visibly: TrustKeyCluster
// starts the key log with the node's key or a pinned one, a pin that does
// not match is refused, and afterwards a missing key log is an error, not
// a fresh first use, unless the key is pinned.
func TestKeyLogTrust(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "keylog")
	cfg := Config{Keys: keys, Node: n.DialAddr(), KeyLog: file, RequireKeyLog: true}

	// Missing and required: refused, and nothing is written.
	if _, err := Dial(ctx, cfg); !errors.Is(err, spindle.NotExist) || !errors.Is(err, ErrKeyLogMissing) || !strings.Contains(err.Error(), file) {
		t.Fatalf("dial without a key log: %v, want NotExist, ErrKeyLogMissing, naming the file", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("key log created although required to exist")
	}

	// A malformed pin, and a pin for another cluster: refused, nothing
	// written.
	pinned := cfg
	pinned.Verifier = "spindle-keyraft/x+0badc0de+AbJt5oSwufR3oqTbN+7S9M96rhy7Y1HtR1ZlWWcRzzgI"
	if _, err := TrustKeyCluster(ctx, pinned); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("trust with a malformed pin: %v, want Invalid", err)
	}
	_, other, err := note.GenerateKey(rand.Reader, "spindle-keyraft/12D3KooWOtherCluster")
	if err != nil {
		t.Fatal(err)
	}
	pinned.Verifier = other
	if _, err := TrustKeyCluster(ctx, pinned); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("trust with a wrong pin: %v, want Integrity", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("key log created with a wrong pin")
	}

	// First use: the node's key, which is the cluster's.
	vkey, err := TrustKeyCluster(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if vkey != n.VerifierKey() {
		t.Fatalf("trusted %s, the cluster's key is %s", vkey, n.VerifierKey())
	}
	if fp := VerifierFingerprint(vkey); !strings.HasPrefix(fp, "SHA256:") || len(fp) != len("SHA256:")+43 {
		t.Errorf("fingerprint %q", fp)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("dial with the key log: %v", err)
	}
	c.Close()
	// The key log now names the key: a pin for another is refused.
	if _, err := Dial(ctx, pinned); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("dial with a key log and a pin that differ: %v, want Integrity", err)
	}

	// Lost again, with the right key pinned: started again from the pin.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	pinned.Verifier = vkey
	c, err = Dial(ctx, pinned)
	if err != nil {
		t.Fatalf("dial with a pinned key and no key log: %v", err)
	}
	c.Close()
	if data, err := os.ReadFile(file); err != nil || !strings.HasPrefix(string(data), keyLogHeader+"\nboot "+vkey+"\n") {
		t.Fatalf("key log after a pinned start: %q, %v", data, err)
	}
}
