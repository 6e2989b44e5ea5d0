package keyraft

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// A DirQuorum travels in the record and its signature under its own
// magic, a record without one keeps the bytes it had before, and a quorum
// must leave a head's signer out of the hosts it counts.
func TestRecordDirQuorum(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	k1 := newSigner(t, ann)
	v1 := register(t, k1)
	v1.DirHosts = []spindle.PeerAddr{"host-a", "host-b"}
	if err := keylog.Sign(v1, k1); err != nil {
		t.Fatal(err)
	}
	if enc := keylog.EncodeRecord(v1); !strings.HasPrefix(string(enc), "SPKR\x01") {
		t.Fatalf("record without DirQuorum encoded as %q", enc[:5])
	}
	mustPut(t, c, v1)

	v2 := keylog.Next(v1)
	v2.DirQuorum = 1
	if err := keylog.Sign(v2, k1); err != nil {
		t.Fatal(err)
	}
	enc := keylog.EncodeRecord(v2)
	if !strings.HasPrefix(string(enc), "SPKR\x03") {
		t.Fatalf("record with DirQuorum encoded as %q", enc[:5])
	}
	got, err := keylog.DecodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.DirQuorum != 1 || got.DirSeq != 0 || !bytes.Equal(keylog.EncodeRecord(got), enc) {
		t.Fatalf("round trip: DirQuorum %d DirSeq %d", got.DirQuorum, got.DirSeq)
	}
	moved := *v2
	moved.DirQuorum = 0
	wantKind(t, "a record whose DirQuorum was dropped after signing", c.Put(ctx, &moved), spindle.Permission)
	mustPut(t, c, v2)

	for _, q := range []int{-1, 2, 3} {
		bad := keylog.Next(v2)
		bad.DirQuorum = q
		if err := keylog.Sign(bad, k1); err != nil {
			t.Fatal(err)
		}
		if err := keylog.CheckRecord(bad); !errors.Is(err, spindle.Invalid) {
			t.Errorf("DirQuorum %d with 2 dir hosts: %v, want Invalid", q, err)
		}
	}
}
