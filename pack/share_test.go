package pack

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"spindle.dev"
)

func hasWrap(t *testing.T, e *spindle.DirEntry, k spindle.PublicKey) bool {
	t.Helper()
	hashes, err := WrappedKeys(e)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := spindle.KeyHash(k)
	return slices.Contains(hashes, h)
}

func TestShare(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	s := newMemBlocks()
	data := testData(spindle.MaxBlockSize+3, 5)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)
	writer := []spindle.PublicKey{ak.PublicKey()}

	if _, err := readAll(e, s, bk, writer...); !errors.Is(err, spindle.CannotDecrypt) {
		t.Fatalf("bob before sharing: %v, want CannotDecrypt", err)
	}
	if hashes, _ := WrappedKeys(e); len(hashes) != 1 || !hasWrap(t, e, ak.PublicKey()) {
		t.Fatalf("wraps after writing for {alice}: %x", hashes)
	}
	old, _ := unmarshalPackdata(e.Packdata)

	// Share with {alice, bob}: bob reads, alice's wrap is reused as is.
	pd, err := Share(e, ak, []spindle.PublicKey{ak.PublicKey(), bk.PublicKey(), ak.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	if err := Verify(e, writer); err != nil {
		t.Fatalf("signature after sharing: %v", err)
	}
	if got, err := readAll(e, s, bk, writer...); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("bob after sharing: %v", err)
	}
	p, _ := unmarshalPackdata(e.Packdata)
	if len(p.wraps) != 2 {
		t.Fatalf("%d wraps, want 2", len(p.wraps))
	}
	if i := slices.IndexFunc(p.wraps, func(w wrap) bool { return w.keyHash == ak.current.hash }); p.wraps[i] != old.wraps[0] {
		t.Fatal("alice's wrap was not reused")
	}
	// Bob, now a reader, may share too.
	if _, err := Share(e, bk, []spindle.PublicKey{ak.PublicKey(), bk.PublicKey()}); err != nil {
		t.Fatalf("bob sharing: %v", err)
	}

	// Share with {alice} again: the new wrap set no longer holds bob.
	pd, err = Share(e, ak, []spindle.PublicKey{ak.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	if hasWrap(t, e, bk.PublicKey()) || !hasWrap(t, e, ak.PublicKey()) {
		t.Fatal("wraps after removing bob")
	}
	if _, err := readAll(e, s, bk, writer...); !errors.Is(err, spindle.CannotDecrypt) {
		t.Fatalf("bob after removal: %v, want CannotDecrypt", err)
	}
	if _, err := Share(e, bk, []spindle.PublicKey{bk.PublicKey()}); !errors.Is(err, spindle.CannotDecrypt) {
		t.Fatalf("bob re-sharing after removal: %v, want CannotDecrypt", err)
	}
	if _, err := Share(e, ak, nil); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("share with nobody: %v, want Invalid", err)
	}
	if _, err := Share(e, ak, []spindle.PublicKey{"p256:AAAA"}); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("share with a bad key: %v, want Invalid", err)
	}
	plain := packFile(t, s, "alice@example.com/p", data, spindle.EEIntegrityPack, ak)
	if _, err := Share(plain, ak, writer); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("share of eeintegrity: %v, want Invalid", err)
	}
	if h, err := WrappedKeys(plain); err != nil || len(h) != 0 {
		t.Fatalf("WrappedKeys(eeintegrity) = %x, %v", h, err)
	}
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ak := testKeys(t, alice, 1)
	oldPub := ak.PublicKey()
	s := newMemBlocks()
	data := testData(2*spindle.MaxBlockSize, 6)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)

	newSecret := Secret{9, 9, 9}
	if err := ak.Rotate(newSecret); err != nil {
		t.Fatal(err)
	}
	if err := ak.Rotate(newSecret); !errors.Is(err, spindle.Exist) {
		t.Fatalf("rotating to the current key: %v, want Exist", err)
	}
	newPub := ak.PublicKey()
	if newPub == oldPub || !slices.Equal(ak.PublicKeys(), []spindle.PublicKey{newPub, oldPub}) {
		t.Fatalf("PublicKeys after rotation: %v", ak.PublicKeys())
	}
	if err := ak.Save(dir); err != nil {
		t.Fatal(err)
	}
	ak, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	fresh, _ := FromSecret(alice, newSecret) // The new key without the archive.

	// The old signature is accepted while the old key is among the writer's keys.
	if err := Verify(e, []spindle.PublicKey{newPub}); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("old signature against the new key only: %v, want Integrity", err)
	}
	writer := []spindle.PublicKey{newPub, oldPub}
	if _, err := readAll(e, s, fresh, writer...); !errors.Is(err, spindle.CannotDecrypt) {
		t.Fatalf("new key without archive: %v, want CannotDecrypt", err)
	}
	if got, err := readAll(e, s, ak, writer...); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading with the archive: %v", err)
	}
	// Re-wrap for the new key; the old wrap goes.
	pd, err := Share(e, ak, []spindle.PublicKey{newPub})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	if hasWrap(t, e, oldPub) || !hasWrap(t, e, newPub) {
		t.Fatal("wraps after re-wrapping")
	}
	if got, err := readAll(e, s, fresh, writer...); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("new key after re-wrapping: %v", err)
	}
	// New files are signed with the new key.
	e2 := packFile(t, s, "alice@example.com/g", data[:10], spindle.EEPack, ak)
	if err := Verify(e2, []spindle.PublicKey{newPub}); err != nil {
		t.Fatal(err)
	}
}

func TestResign(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	s := newMemBlocks()
	data := testData(spindle.MaxBlockSize+1, 3)
	for _, packing := range packings {
		e := packFile(t, s, "alice@example.com/f", data, packing, ak)
		moved := cloneE(e)
		// Bob cannot read the file but may move it.
		if err := Resign(moved, "alice@example.com/dir/g", bk); err != nil {
			t.Fatal(err)
		}
		if moved.Name != "alice@example.com/dir/g" || moved.Writer != bob {
			t.Fatalf("%v: resigned entry %q by %q", packing, moved.Name, moved.Writer)
		}
		if err := Verify(moved, []spindle.PublicKey{bk.PublicKey()}); err != nil {
			t.Fatalf("%v: %v", packing, err)
		}
		if err := Verify(moved, []spindle.PublicKey{ak.PublicKey()}); !errors.Is(err, spindle.Integrity) {
			t.Fatalf("%v: resigned entry verifies with the old writer's key: %v", packing, err)
		}
		if got, err := readAll(moved, s, ak, bk.PublicKey()); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%v: alice reading the moved file: %v", packing, err)
		}
		if err := Resign(moved, "alice@example.com/../x/", bk); !errors.Is(err, spindle.Invalid) {
			t.Fatalf("Resign to an unclean name: %v", err)
		}
		bad := cloneE(e)
		bad.Blocks[0].Size--
		if err := Resign(bad, "alice@example.com/h", bk); !errors.Is(err, spindle.Integrity) {
			t.Fatalf("Resign of a broken entry: %v, want Integrity", err)
		}
		if bad.Name != e.Name {
			t.Fatal("failed Resign changed the entry")
		}
	}
}

func TestAddReaders(t *testing.T) {
	ak, bk, ck := testKeys(t, alice, 1), testKeys(t, bob, 2), testKeys(t, "carol@example.com", 3)
	s := newMemBlocks()
	data := testData(100, 4)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak, bk.PublicKey())
	writer := []spindle.PublicKey{ak.PublicKey()}
	// Adding carol keeps bob, though he is not named; the wrap for all,
	// named in remove, goes.
	pd, err := Share(e, ak, []spindle.PublicKey{ak.PublicKey(), bk.PublicKey(), AllKey()})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	pd, err = AddReaders(e, ak, []spindle.PublicKey{ak.PublicKey(), ck.PublicKey()}, []spindle.PublicKey{AllKey()})
	if err != nil {
		t.Fatal(err)
	}
	e.Packdata = pd
	for _, k := range []*Keys{ak, bk, ck} {
		if got, err := readAll(e, s, k, writer...); err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s after AddReaders: %v", k.UserName(), err)
		}
	}
	if all, _ := IsWrappedForAll(e); all {
		t.Error("the wrap for all survived AddReaders removing it")
	}
	if _, err := readAll(e, s, nil, writer...); !errors.Is(err, spindle.CannotDecrypt) {
		t.Errorf("a reader with no keys after the wrap for all went: %v, want CannotDecrypt", err)
	}
	if err := Verify(e, writer); err != nil {
		t.Fatal(err)
	}
	if _, err := unmarshalPackdata(e.Packdata); err != nil {
		t.Fatalf("AddReaders made non-canonical packdata: %v", err)
	}
	if _, err := AddReaders(e, testKeys(t, "dan@example.com", 9), writer, nil); !errors.Is(err, spindle.CannotDecrypt) {
		t.Errorf("AddReaders by a non-reader: %v, want CannotDecrypt", err)
	}
}
