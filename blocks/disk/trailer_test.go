package disk

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
)

// FuzzVerifyFile feeds verifyFile arbitrary file contents: it must never
// panic, and what it accepts is the file itself or the file less a trailer
// that vouches for it, never more than a block, hashing to the digest
// unless the CRC matched.
func FuzzVerifyFile(f *testing.F) {
	data := []byte("a block")
	f.Add(appendTrailer(bytes.Clone(data), data))
	f.Add(data)
	f.Add([]byte{})
	f.Add([]byte("spB1\x00\x00\x00\x00"))
	f.Add(append([]byte("x"), trailerMagic[:]...))
	f.Fuzz(func(t *testing.T, file []byte) {
		d := blocks.Digest(sha256.Sum256(data))
		// For a reader that checks the block itself: the file, or the
		// file less its trailer, never more than a block.
		if got, err := verifyFile(d, file, true); err == nil {
			switch {
			case len(got) > spindle.MaxStoredBlockSize || !bytes.HasPrefix(file, got):
				t.Fatalf("trusted: accepted %d bytes that are not a prefix of the %d-byte file", len(got), len(file))
			case len(file)-len(got) == 0 && blocks.Digest(sha256.Sum256(got)) != d:
				t.Fatalf("trusted: accepted a file without a trailer whose hash does not match")
			case len(file)-len(got) != 0 && len(file)-len(got) != trailerLen:
				t.Fatalf("trusted: accepted %d of %d bytes", len(got), len(file))
			}
		}
		got, err := verifyFile(d, file, false)
		if err != nil {
			if !spindle.Match(spindle.E(spindle.Integrity), err) && !spindle.Match(spindle.E(spindle.Invalid), err) {
				t.Fatalf("error of kind %v: %v", spindle.KindOf(err), err)
			}
			return
		}
		if len(got) > spindle.MaxStoredBlockSize || !bytes.HasPrefix(file, got) {
			t.Fatalf("accepted %d bytes that are not a prefix of the %d-byte file", len(got), len(file))
		}
		switch len(file) - len(got) {
		case 0:
			if blocks.Digest(sha256.Sum256(got)) != d {
				t.Fatalf("accepted a file without a trailer whose hash does not match")
			}
		case trailerLen:
			if !bytes.Equal(file, appendTrailer(bytes.Clone(got), got)) && blocks.Digest(sha256.Sum256(got)) != d {
				t.Fatalf("accepted a block whose trailer and hash both fail")
			}
		default:
			t.Fatalf("accepted %d of %d bytes", len(got), len(file))
		}
	})
}
