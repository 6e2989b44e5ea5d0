package client

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node"
)

// A client outlives a restart of its node: it reconnects and signs in
// again by itself.
func TestClientSurvivesNodeRestart(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{Home: home, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := n.DialAddr()
	c := dialAs(t, n, "ann@example.com")
	if _, err := c.Put(ctx, "@/before", bytes.NewReader([]byte("one")), 0, nil); err != nil {
		t.Fatal(err)
	}
	n.Close()
	// A command while the node is down fails, and its failed dial must
	// not keep the client from the node once it is back.
	if _, err := c.Lookup(ctx, "@/before", true); err == nil {
		t.Fatal("lookup with the node down succeeded")
	}
	// The same home, the same port.
	listen := strings.TrimSuffix(string(addr), "/p2p/"+n.Host().ID().String())
	n2, err := node.New(ctx, node.Config{Home: home, Listen: []string{listen}, Writers: []string{"all"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n2.Close()
	if _, err := c.Lookup(ctx, "@/before", true); err != nil {
		t.Fatalf("the first lookup once the node is back: %v", err)
	}
	// ee first: its readers come from the client's cache, so no other
	// call signs in again before blocks go to the node.
	for _, p := range []spindle.Packing{spindle.EEPack, spindle.PlainPack} {
		_, err := c.Put(ctx, "@/after", bytes.NewReader([]byte("two")), p, nil)
		if err != nil {
			t.Fatalf("put after restart: %v", err)
		}
	}
	f, err := c.Open(ctx, "@/before")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(f)
	f.Close()
	if string(got) != "one" {
		t.Fatalf("got %q", got)
	}
}
