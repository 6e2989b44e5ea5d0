package dirlog

import (
	"bytes"
	"reflect"
	"testing"

	"spindle.dev"
)

func sampleEntry() *Entry {
	return &Entry{
		Seq:    7,
		Prev:   Hash{1, 2, 3},
		Time:   1700000000000000000,
		Writer: ann,
		Op:     OpPut,
		Entry: spindle.DirEntry{
			Name:     "ann@example.com/docs/a.txt",
			Packing:  spindle.EEPack,
			Time:     42,
			Size:     5,
			Blocks:   []spindle.DirBlock{{Ref: "bafkreiabc", Offset: 0, Size: 5}},
			Packdata: []byte{9, 8, 7},
			Writer:   ann,
			Sequence: 7,
		},
		Sig: spindle.Signature{0x30, 0x01, 0x02},
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []*Entry{
		sampleEntry(),
		{Seq: 1, Writer: ann, Op: OpMkdir, Entry: spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory, Writer: ann, Sequence: 1}},
		{Seq: 3, Writer: bob, Op: OpRename, Entry: spindle.DirEntry{Name: "ann@example.com/x", Writer: bob, Sequence: 3}, NewName: "ann@example.com/y"},
		{Seq: 4, Writer: ann, Op: OpPut, Entry: *control("ann@example.com/Access", "r: bob@example.com\n")},
	} {
		b := e.Marshal()
		got, err := UnmarshalEntry(b)
		if err != nil {
			t.Fatalf("UnmarshalEntry(%s): %v", e.Op, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", e.Op, got, e)
		}
		if !bytes.Equal(got.Marshal(), b) {
			t.Errorf("re-encoding of %s differs", e.Op)
		}
	}
}

// Entries of the first format, which logs written before ReadersAt and
// KeyAt hold, decode as legacy entries and encode back to their own bytes,
// so their hashes, which the chain and signatures use, do not change; new
// entries are of the second format and carry both fields.
func TestEntryFormats(t *testing.T) {
	e := sampleEntry()
	e.ReadersAt, e.KeyAt = 5, 77
	b := e.Marshal()
	if string(b[:len(entryMagic)]) != entryMagic {
		t.Fatalf("new entry starts %q", b[:len(entryMagic)])
	}
	got, err := UnmarshalEntry(b)
	if err != nil || got.Legacy || got.ReadersAt != 5 || got.KeyAt != 77 {
		t.Fatalf("second format: %+v, %v", got, err)
	}
	old := sampleEntry()
	old.Legacy = true
	ob := old.Marshal()
	if string(ob[:len(entryMagicV1)]) != entryMagicV1 || len(ob) != len(b)-16 {
		t.Fatalf("first format: %d bytes starting %q", len(ob), ob[:len(entryMagicV1)])
	}
	got, err = UnmarshalEntry(ob)
	if err != nil || !got.Legacy || !bytes.Equal(got.Marshal(), ob) || got.Hash() != old.Hash() {
		t.Fatalf("first format round trip: %+v, %v", got, err)
	}
	// The formats are told apart by their magic alone: a first-format
	// body with the fields of the second, or the reverse, is refused.
	mixed := append([]byte(entryMagic), ob[len(entryMagicV1):]...)
	if _, err := UnmarshalEntry(mixed); err == nil {
		t.Fatal("first-format body under the second format's magic accepted")
	}
	neg := sampleEntry()
	neg.KeyAt = -1
	wantKind(t, func() error { _, err := UnmarshalEntry(neg.Marshal()); return err }(), spindle.Invalid, "negative key log size")
}

func TestEntryDecodeRejects(t *testing.T) {
	good := sampleEntry().Marshal()
	// Every proper prefix is refused, as is any trailing byte.
	for n := 0; n < len(good); n++ {
		if _, err := UnmarshalEntry(good[:n]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
	if _, err := UnmarshalEntry(append(append([]byte(nil), good...), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	bad := sampleEntry()
	bad.Op = 99
	wantKind(t, func() error { _, err := UnmarshalEntry(bad.Marshal()); return err }(), spindle.Invalid, "unknown operation")
	bad = sampleEntry()
	bad.Entry.Attr = spindle.AttrIncomplete
	wantKind(t, func() error { _, err := UnmarshalEntry(bad.Marshal()); return err }(), spindle.Invalid, "incomplete attribute")
	bad = sampleEntry()
	bad.Entry.Inline = make([]byte, MaxInline+1)
	wantKind(t, func() error { _, err := UnmarshalEntry(bad.Marshal()); return err }(), spindle.Invalid, "oversized inline")
}

func TestSignatureCoversEveryField(t *testing.T) {
	s := newSigner(t, ann)
	e := sampleEntry()
	if err := e.Sign(s); err != nil {
		t.Fatal(err)
	}
	if err := spindle.Verify(s.PublicKey(), e.SignedDigest(), e.Sig); err != nil {
		t.Fatalf("fresh signature: %v", err)
	}
	// Changing any byte of the signed body must break the signature.
	body := e.appendBody(nil)
	for i := len(entryMagic); i < len(body); i++ {
		b := append([]byte(nil), body...)
		b[i] ^= 0x01
		m, err := UnmarshalEntry(appendBytes(b, e.Sig))
		if err != nil {
			continue // Not a valid encoding any more: refused anyway.
		}
		if spindle.Verify(s.PublicKey(), m.SignedDigest(), m.Sig) == nil {
			t.Fatalf("flipping byte %d left the signature valid", i)
		}
	}
	if h1, h2 := e.Hash(), e.Hash(); h1 == (Hash{}) || h1 != h2 {
		t.Fatal("hash is zero or unstable")
	}
}

// FuzzDecodeEntry checks that the decoder never panics, never accepts more
// than the limits allow, and accepts only canonical encodings: whatever it
// decodes encodes back to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	f.Add(sampleEntry().Marshal())
	f.Add((&Entry{Seq: 1, Op: OpMkdir, Entry: spindle.DirEntry{Name: "ann@example.com/", Attr: spindle.AttrDirectory}}).Marshal())
	f.Add((&Entry{Seq: 2, Op: OpRename, Entry: spindle.DirEntry{Name: "a@b.cc/x"}, NewName: "a@b.cc/y"}).Marshal())
	f.Add([]byte(entryMagic))
	anchored := sampleEntry()
	anchored.ReadersAt, anchored.KeyAt = 6, 1<<40
	f.Add(anchored.Marshal())
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := UnmarshalEntry(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if len(e.Entry.Inline) > MaxInline || len(e.Entry.Packdata) > MaxPackdata || len(e.Entry.Blocks) > MaxBlocks || len(e.Sig) > MaxSignature {
			t.Fatal("limits exceeded")
		}
		if !bytes.Equal(e.Marshal(), data) {
			t.Fatalf("not canonical: %x re-encodes as %x", data, e.Marshal())
		}
		_ = e.Hash()
		_ = e.SignedDigest()
	})
}
