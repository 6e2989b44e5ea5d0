package node

import (
	"context"
	"errors"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
)

// A writer cannot make a reader verify an entry against a name it does not
// have: the dir host refuses a signed name set by a client (only a rename
// moves an entry from the name its writer signed), and checks the
// packing's signature of every file put against the entry's name and
// writer, so that an entry signed for one name, or by another user, is not
// stored under another.
func TestAppendBindsSignatureToName(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c, keys := dialWithKeys(t, n, "ann@example.com")
	_, bobKeys := dialWithKeys(t, n, "bob@example.com")
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "@/docs"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"contract", "draft"} {
		if _, err := c.Put(ctx, ann("docs/"+f), strings.NewReader("text of "+f), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	draft, err := c.Lookup(ctx, ann("docs/draft"), false)
	if err != nil {
		t.Fatal(err)
	}
	// put signs d as the raw client's user and appends it at name.
	put := func(rc *rawClient, signer spindle.Signer, name spindle.PathName, d spindle.DirEntry) error {
		resp, err := rc.call(&wiretest.Request{Method: wire.DirHead, User: "ann@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		h := resp.Head
		e := &dirlog.Entry{Seq: h.Seq + 1, Prev: h.Hash, Time: spindle.Now(), Op: dirlog.OpPut, Entry: d, ReadersAt: h.Seq, KeyAt: n.keyLogSize()}
		e.Entry.Name, e.Entry.Sequence, e.Entry.Signed = name, e.Seq, nil
		if err := e.Sign(signer); err != nil {
			t.Fatal(err)
		}
		_, err = rc.call(&wiretest.Request{Method: wire.DirAppend, Data: e.Marshal()})
		return err
	}
	rc := dialRaw(t, n, keys)

	// The draft's entry at contract's name, as if a rename had moved it.
	moved := *draft
	moved.SignedName = draft.Name
	err = put(rc, keys, ann("docs/contract"), moved)
	if !errors.Is(err, spindle.Invalid) {
		t.Fatalf("entry with a signed name from another path: %v, want Invalid", err)
	}
	t.Logf("signed name: %v", err)

	// The draft's entry at contract's name, signed name and all.
	err = put(rc, keys, ann("docs/contract"), *draft)
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("entry signed for another name: %v, want Integrity", err)
	}
	t.Logf("another name: %v", err)

	// Bob, who may write there, stores ann's signed entry as his own.
	if _, err := c.Put(ctx, ann("docs/Access"), strings.NewReader("*: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	err = put(dialRaw(t, n, bobKeys), bobKeys, ann("docs/draft"), *draft)
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("another writer's entry: %v, want Integrity", err)
	}
	t.Logf("another writer: %v", err)

	mustRead(t, c, ann("docs/contract"), []byte("text of contract"))
	mustRead(t, c, ann("docs/draft"), []byte("text of draft"))
}
