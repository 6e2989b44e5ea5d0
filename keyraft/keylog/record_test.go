package keylog

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"spindle.dev"
)

// TestRecordKeep checks the fourth record form: a Keep moves a record to
// it, the signature covers Keep, a record without one keeps the older
// form byte for byte, and a Keep below KeepNone is refused.
func TestRecordKeep(t *testing.T) {
	k := newSigner(t, "ann@example.com")
	u := &spindle.User{Name: "ann@example.com", PublicKey: k.PublicKey(), DirHosts: []spindle.PeerAddr{"12D3KooWA", "12D3KooWB"}, Version: 1}
	if err := Sign(u, k); err != nil {
		t.Fatal(err)
	}
	old := EncodeRecord(u)
	if !bytes.HasPrefix(old, []byte(recordMagic)) {
		t.Fatalf("a record without Keep starts %q, want %q", old[:5], recordMagic)
	}

	next := Next(u)
	next.DirQuorum = 1
	next.Keep = 30 * 24 * 3600
	if err := Sign(next, k); err != nil {
		t.Fatal(err)
	}
	enc := EncodeRecord(next)
	if !bytes.HasPrefix(enc, []byte(recordMagicKeep)) {
		t.Fatalf("a record with Keep starts %q, want %q", enc[:5], recordMagicKeep)
	}
	got, err := DecodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Keep != next.Keep || got.DirQuorum != 1 || got.DirSeq != 0 {
		t.Fatalf("decoded Keep %d, DirQuorum %d, DirSeq %d; want %d, 1, 0", got.Keep, got.DirQuorum, got.DirSeq, next.Keep)
	}
	if err := spindle.Verify(k.PublicKey(), SigningDigest(got), got.Signature); err != nil {
		t.Fatalf("signature over a record with Keep: %v", err)
	}
	forged := *got
	forged.Keep = spindle.KeepNone
	if err := spindle.Verify(k.PublicKey(), SigningDigest(&forged), forged.Signature); err == nil {
		t.Fatal("the signature does not cover Keep: a host could change how long versions are kept")
	}
	if _, err := DecodeRecord(EncodeRecord(&forged)); err != nil {
		t.Fatalf("KeepNone refused: %v", err)
	}
	bad := forged
	bad.Keep = -2
	if err := CheckRecord(&bad); spindle.KindOf(err) != spindle.Invalid || !strings.Contains(err.Error(), "keep -2") {
		t.Fatalf("CheckRecord of Keep -2 = %v, want Invalid naming it", err)
	}
	if _, err := DecodeRecord(EncodeRecord(&bad)); spindle.KindOf(err) != spindle.Invalid {
		t.Fatalf("DecodeRecord of Keep -2 = %v, want Invalid", err)
	}

}

// TestRecordPins checks named snapshots in a record: signed, in the
// fourth form with or without a Keep, in name order, each named as
// CheckPinName allows.
func TestRecordPins(t *testing.T) {
	k := newSigner(t, "ann@example.com")
	u := &spindle.User{Name: "ann@example.com", PublicKey: k.PublicKey(), DirHosts: []spindle.PeerAddr{"12D3KooWA"}, Version: 1,
		Pins: []spindle.Pin{{Name: "before-move", Seq: 12}, {Name: "daily.2026-12-04", Seq: 40}}}
	if err := Sign(u, k); err != nil {
		t.Fatal(err)
	}
	enc := EncodeRecord(u)
	if !bytes.HasPrefix(enc, []byte(recordMagicKeep)) {
		t.Fatalf("a record with pins starts %q, want %q", enc[:5], recordMagicKeep)
	}
	got, err := DecodeRecord(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pins) != 2 || got.Pins[1] != u.Pins[1] || got.Keep != 0 {
		t.Fatalf("decoded pins %v, keep %d", got.Pins, got.Keep)
	}
	forged := *got
	forged.Pins = []spindle.Pin{{Name: "before-move", Seq: 13}, u.Pins[1]}
	if err := spindle.Verify(k.PublicKey(), SigningDigest(&forged), forged.Signature); err == nil {
		t.Fatal("the signature does not cover the pins")
	}
	for _, tc := range []struct {
		pins []spindle.Pin
		want string
	}{
		{[]spindle.Pin{{Name: "b", Seq: 1}, {Name: "a", Seq: 2}}, "name order"},
		{[]spindle.Pin{{Name: "a", Seq: 1}, {Name: "a", Seq: 2}}, "named twice"},
		{[]spindle.Pin{{Name: "2026", Seq: 1}}, "is a number"},
		{[]spindle.Pin{{Name: "-x", Seq: 1}}, "starting with a letter"},
		{[]spindle.Pin{{Name: "a b", Seq: 1}}, "letters, digits"},
		{[]spindle.Pin{{Name: "a", Seq: 0}}, "sequence 0"},
	} {
		bad := *got
		bad.Pins = tc.pins
		if err := CheckRecord(&bad); spindle.KindOf(err) != spindle.Invalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pins %v: %v, want Invalid saying %q", tc.pins, err, tc.want)
		}
		if _, err := DecodeRecord(EncodeRecord(&bad)); spindle.KindOf(err) != spindle.Invalid {
			t.Errorf("decoding pins %v: %v, want Invalid", tc.pins, err)
		}
	}
	many := *got
	many.Pins = nil
	for i := range MaxPins + 1 {
		many.Pins = append(many.Pins, spindle.Pin{Name: fmt.Sprintf("p%02d", i), Seq: 1})
	}
	if err := CheckRecord(&many); spindle.KindOf(err) != spindle.Invalid {
		t.Errorf("%d pins: %v, want Invalid", len(many.Pins), err)
	}
}
