package node

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/pack"
)

// After a user rotates keys, the node still replays the user's log at
// restart, and the user still reads files written with the old key.
func TestKeyRotationAcrossRestart(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := startNode(t, home)
	addr := orderAddrs(n.Addrs())[0]
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	oldKeys, err := pack.FromSecret("ann@example.com", first)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, ClientConfig{Keys: keys, Node: addr})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "@/old", bytes.NewReader([]byte("written with the first key")), 0, nil); err != nil {
		t.Fatal(err)
	}

	// Rotate: the new record is signed with the old key.
	cur, err := c.LookupUser(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	secret, err := pack.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	next := keyraft.Next(cur)
	if err := keys.Rotate(secret); err != nil {
		t.Fatal(err)
	}
	next.PublicKey = keys.PublicKey()
	if err := keyraft.Sign(next, oldSigner{oldKeys: oldKeys, pub: cur.PublicKey}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.svc.call(ctx, &request{Method: mKeyPut, Data: keyraft.EncodeRecord(next)}); err != nil {
		t.Fatalf("rotate: %v", err)
	}
	c.Close()

	// Restart the node on the same home and port.
	n.Close()
	listen := strings.TrimSuffix(string(addr), "/p2p/"+n.host.ID().String())
	n2, err := New(ctx, Config{Home: home, Listen: []string{listen}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("node refused to restart after a key rotation: %v", err)
	}
	defer n2.Close()
	if d := n2.dir.Damage(); len(d) > 0 {
		t.Fatalf("log cut after rotation: %v", d)
	}
	c2, err := Dial(ctx, ClientConfig{Keys: keys, Node: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	f, err := c2.Open(ctx, "@/old")
	if err != nil {
		t.Fatalf("open a file written before the rotation: %v", err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "written with the first key" {
		t.Fatalf("got %q", got)
	}
	if _, err := c2.Put(ctx, "@/new", bytes.NewReader([]byte("new key")), 0, nil); err != nil {
		t.Fatal(err)
	}
}

// oldSigner signs with the key that was current before a rotation.
type oldSigner struct {
	oldKeys *pack.Keys
	pub     spindle.PublicKey
}

func (s oldSigner) UserName() spindle.UserName                    { return s.oldKeys.UserName() }
func (s oldSigner) PublicKey() spindle.PublicKey                  { return s.pub }
func (s oldSigner) Sign(digest []byte) (spindle.Signature, error) { return s.oldKeys.Sign(digest) }
