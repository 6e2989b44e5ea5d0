package host

import (
	"bytes"
	"encoding/binary"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestHeadCommitsToMap checks that a head carries the map root of its log,
// that its signature covers the root and the time, that both survive the
// encoding, that a version 1 encoding is refused, and that two roots for
// one sequence number are caught.
func TestHeadCommitsToMap(t *testing.T) {
	e := newEnv(t, &MemStore{})
	empty := e.do2(e.s.Head(e.ctx, ann))
	if r, _ := dirlog.MapRoot(nil); empty.Root != r || r != dirlog.NewTree("").MapRoot() {
		t.Fatalf("head of a missing log has root %s, want the empty map's %s", empty.Root, r)
	}
	e.setup()
	h := e.do2(e.s.Head(e.ctx, ann))
	want, err := dirlog.MapRoot(e.logEntries(ann))
	if err != nil {
		t.Fatal(err)
	}
	if h.Root != want || h.Time == 0 {
		t.Fatalf("head root %s time %d, want root %s and a time", h.Root, h.Time, want)
	}
	dec, err := dirlog.UnmarshalHead(h.Marshal())
	if err != nil || dec.Root != h.Root || dec.Time != h.Time || dec.Verify(e.host) != nil {
		t.Fatalf("round trip: %+v, %v", dec, err)
	}
	for name, change := range map[string]func(*dirlog.Head){
		"root": func(h *dirlog.Head) { h.Root[0] ^= 1 },
		"time": func(h *dirlog.Head) { h.Time++ },
		"hash": func(h *dirlog.Head) { h.Hash[31] ^= 1 },
		"user": func(h *dirlog.Head) { h.User = bob },
	} {
		c := *h
		change(&c)
		wantKind(t, c.Verify(e.host), spindle.Integrity, "head with another "+name)
	}

	// A head as version 1 encoded it: magic, user, sequence, hash, host,
	// host key, signature.
	v1 := []byte("SPDLH1") // The magic of version 1.
	v1 = appendLen(v1, string(h.User))
	v1 = binary.BigEndian.AppendUint64(v1, uint64(h.Seq))
	v1 = append(v1, h.Hash[:]...)
	v1 = appendLen(v1, string(h.Host))
	v1 = appendLen(v1, string(h.HostKey))
	v1 = appendLen(v1, h.Sig)
	_, err = dirlog.UnmarshalHead(v1)
	wantKind(t, err, spindle.Invalid, "version 1 head")

	lie := *h
	lie.Root[3] ^= 1
	wantKind(t, dirlog.CheckHead(h, &lie), spindle.Integrity, "two roots for one sequence")
	kept := *h
	kept.Root = dirlog.Hash{} // A reader that kept no root compares none.
	if err := dirlog.CheckHead(&kept, h); err != nil {
		t.Fatal(err)
	}
}

// FuzzUnmarshalHead checks that the decoder of heads from untrusted peers
// (versions 2, 3 and 4, the last with cosignatures) refuses with Invalid or returns a head whose encoding is the input, and
// never panics.
func FuzzUnmarshalHead(f *testing.F) {
	e := newEnv(f, &MemStore{})
	e.setup()
	h, err := e.s.Head(e.ctx, ann)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(h.Marshal())
	cs, err := h.Cosign(newSigner(f, "mirror@example.com"))
	if err != nil {
		f.Fatal(err)
	}
	cosigned := *h
	cosigned.Cosigs = []dirlog.Cosig{cs}
	f.Add(cosigned.Marshal())
	f.Add((&dirlog.Head{User: ann}).Marshal())
	f.Add([]byte("SPDLH1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := dirlog.UnmarshalHead(data)
		if err != nil {
			if spindle.KindOf(err) != spindle.Invalid {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if !bytes.Equal(h.Marshal(), data) {
			t.Fatal("accepted a non-canonical encoding")
		}
	})
}

// appendLen appends s to b after its length, as heads encode strings.
func appendLen[S ~string | ~[]byte](b []byte, s S) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}
