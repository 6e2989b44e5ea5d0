package client

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkReaderLookupMoved measures a reader's lookup of a file in
// another user's tree when the tree's head moved since the reader's last
// answer (ann appends one entry between lookups, outside the timer), so
// each lookup takes a step of the log: with the step checks, a dir.step
// round trip and a consistency proof. Put checks the writer's side.
func BenchmarkReaderLookupMoved(b *testing.B) {
	benchLookup(b, true)
}

// BenchmarkOwnerLookupMoved is BenchmarkReaderLookupMoved for the tree's
// owner, reading through a client of her own other than the one that
// appends: her steps also fetch the entries and the map step, and check
// that the new head's map root follows from them.
func BenchmarkOwnerLookupMoved(b *testing.B) {
	benchLookupAs(b, true, true)
}

// BenchmarkReaderLookupStill is BenchmarkReaderLookupMoved with the head
// still: no step.
func BenchmarkReaderLookupStill(b *testing.B) {
	benchLookup(b, false)
}

func benchLookup(b *testing.B, moved bool) { benchLookupAs(b, moved, false) }

func benchLookupAs(b *testing.B, moved, owner bool) {
	n := startNodeB(b)
	defer n.Close()
	ctx := context.Background()
	a := dialAsB(b, n, "ann@example.com")
	bob := dialAsB(b, n, "bob@example.com")
	if owner {
		c, err := Dial(ctx, Config{Keys: a.keys, Node: n.DialAddr(), Logger: testLogger(b), KeyLog: filepath.Join(b.TempDir(), "keylog")})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		bob = c // Reads as the owner, with heads of its own.
	}
	for _, name := range []string{"d"} {
		if _, err := a.MakeDirectory(ctx, ann(name)); err != nil {
			b.Fatal(err)
		}
	}
	put := func(name, text string) {
		if _, err := a.Put(ctx, ann(name), bytes.NewReader([]byte(text)), 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	put("d/Access", "read: bob@example.com\n*: ann@example.com\n")
	put("d/f", "hello")
	if _, err := bob.Lookup(ctx, ann("d/f"), false); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		if moved {
			b.StopTimer()
			put(fmt.Sprintf("d/g%d", i), "x")
			b.StartTimer()
		}
		if _, err := bob.Lookup(ctx, ann("d/f"), false); err != nil {
			b.Fatal(err)
		}
	}
}
