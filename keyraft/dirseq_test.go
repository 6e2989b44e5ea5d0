package keyraft

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// A rotation's DirSeq travels in the record and its signature; a record
// without one keeps the encoding records had before DirSeq existed; and
// the cluster never lets the cutoff move back.
func TestRecordDirSeq(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	k1 := newSigner(t, ann)
	v1 := register(t, k1)
	// "SPKR\x01" is keylog's recordMagic.
	if enc := keylog.EncodeRecord(v1); !strings.HasPrefix(string(enc), "SPKR\x01") {
		t.Fatalf("record without DirSeq encoded as %q", enc[:5])
	}
	mustPut(t, c, v1)

	k2 := newSigner(t, ann)
	v2 := keylog.Next(v1)
	v2.PublicKey, v2.DirSeq = k2.pub, 7
	if err := keylog.Sign(v2, k1); err != nil {
		t.Fatal(err)
	}
	enc := keylog.EncodeRecord(v2)
	got, err := keylog.DecodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.DirSeq != 7 || !bytes.Equal(keylog.EncodeRecord(got), enc) {
		t.Fatalf("round trip: DirSeq %d", got.DirSeq)
	}
	// The signature covers DirSeq.
	moved := *v2
	moved.DirSeq = 9
	wantKind(t, "a record whose DirSeq was changed after signing", c.Put(ctx, &moved), spindle.Permission)
	mustPut(t, c, v2)

	// A version that moves the cutoff back is refused, even when signed.
	k3 := newSigner(t, ann)
	v3 := keylog.Next(v2)
	v3.PublicKey, v3.DirSeq = k3.pub, 6
	if err := keylog.Sign(v3, k2); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "a rotation that lowers DirSeq", c.Put(ctx, v3), spindle.Invalid)

	// Version 1 has no DirSeq, and none is negative.
	bad := &spindle.User{Name: "bob@example.com", PublicKey: k1.pub, Version: 1, DirSeq: 1}
	if err := keylog.Sign(bad, newSigner(t, "bob@example.com")); err != nil {
		t.Fatal(err)
	}
	if err := keylog.CheckRecord(bad); !errors.Is(err, spindle.Invalid) {
		t.Errorf("version 1 with a DirSeq: %v, want Invalid", err)
	}
	v3.DirSeq = -1
	if err := keylog.CheckRecord(v3); !errors.Is(err, spindle.Invalid) {
		t.Errorf("a negative DirSeq: %v, want Invalid", err)
	}
}
