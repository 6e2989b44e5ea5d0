package host

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"spindle.dev/dirlog"
)

// A byte flipped on disk damages one record, and every later entry names
// the one before it by hash, so without the damaged entry the ones after
// it cannot be replayed, though each is intact and signed. But the next
// entry's Prev pins the exact bytes of the damaged one: a repair tries
// every one-byte change to the damaged frame (its length, its checksum or
// its record) that makes the checksum match, and keeps a change only if
// it yields the one entry that follows the entries before it and whose
// hash the next entry names (or, for the last record, if exactly one
// change yields an entry that follows on). Replay then checks the
// signatures and rights of the whole log again, as for any log.

// maxFixRecord bounds the size of a record that a repair tries to fix.
const maxFixRecord = 1 << 20

// fixFrame returns the offset and new bytes of a one-byte change to the
// frame at off in data (framed records without a file header) that
// restores the entry following seq and head, or ok false.
func fixFrame(data []byte, off int64, seq int64, head dirlog.Hash) (at int64, b []byte, ok bool) {
	if off < 0 || off+dirlog.FrameSize > int64(len(data)) {
		return 0, nil, false
	}
	size := binary.BigEndian.Uint32(data[off:])
	sum := binary.BigEndian.Uint32(data[off+4:])
	var cands []byteFix
	// The length.
	for i := int64(0); i < 4; i++ {
		shift := 8 * (3 - i)
		for v := uint32(0); v < 256; v++ {
			n := size&^(0xFF<<shift) | v<<shift
			if n == size || n == 0 || n > dirlog.MaxRecord || off+dirlog.FrameSize+int64(n) > int64(len(data)) {
				continue
			}
			if crc32.Checksum(data[off+dirlog.FrameSize:off+dirlog.FrameSize+int64(n)], castagnoli) == sum {
				cands = append(cands, byteFix{off + i, byte(v)})
			}
		}
	}
	if end := off + dirlog.FrameSize + int64(size); size > 0 && size <= maxFixRecord && end <= int64(len(data)) {
		rec := data[off+dirlog.FrameSize : end]
		got := crc32.Checksum(rec, castagnoli)
		// The checksum.
		if d := got ^ sum; d != 0 {
			for i := int64(0); i < 4; i++ {
				if shift := 8 * (3 - i); d&^(0xFF<<shift) == 0 {
					cands = append(cands, byteFix{off + 4 + i, byte(got >> shift)})
				}
			}
		}
		// The record: crc(rec ^ e) = crc(rec) ^ m(e), where m is linear;
		// look for a one-byte e with m(e) = crc(rec) ^ sum.
		cands = append(cands, recordFixes(rec, got^sum, off+dirlog.FrameSize)...)
	}
	var found []byteFix
	for _, c := range cands {
		fixed := bytes.Clone(data)
		fixed[c.at] = c.b
		if follows(fixed, off, seq, head) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		return 0, nil, false
	}
	return found[0].at, []byte{found[0].b}, true
}

// A byteFix sets the byte at offset at to b.
type byteFix struct {
	at int64
	b  byte
}

// recordFixes returns the one-byte changes to rec, which starts at base,
// whose effect on rec's CRC-32C is syn.
func recordFixes(rec []byte, syn uint32, base int64) []byteFix {
	var out []byteFix
	if syn == 0 {
		return nil
	}
	// raw(s, p) is the CRC register after p from state s, without the
	// inversions crc32 adds; m(v at i) is raw(0, v) shifted through the
	// zero bytes after i.
	zero := []byte{0}
	raw := func(s uint32, p []byte) uint32 { return ^crc32.Update(^s, castagnoli, p) }
	var state [256]uint32
	for v := 1; v < 256; v++ {
		state[v] = raw(0, []byte{byte(v)})
	}
	for i := len(rec) - 1; i >= 0; i-- {
		for v := 1; v < 256; v++ {
			if state[v] == syn {
				out = append(out, byteFix{base + int64(i), rec[i] ^ byte(v)})
			}
			state[v] = raw(state[v], zero)
		}
	}
	return out
}

// follows reports whether the frame at off in data holds a whole record
// whose entry follows seq and head, and, if a whole record follows it,
// whether that one names it as Prev.
func follows(data []byte, off int64, seq int64, head dirlog.Hash) bool {
	var ps []dirlog.Pending
	_, _, err := dirlog.ScanFrames(bytes.NewReader(data[off:]), 0, func(b []byte) error {
		ps = append(ps, dirlog.DecodePending(b))
		if len(ps) == 2 {
			return errStop
		}
		return nil
	})
	if (err != nil && !errors.Is(err, errStop) && len(ps) < 1) || len(ps) == 0 || ps[0].Err != nil {
		return false
	}
	e := ps[0].Entry
	if e.Seq != seq+1 || e.Prev != head {
		return false
	}
	if len(ps) == 2 && ps[1].Err == nil {
		return ps[1].Entry.Prev == e.Hash()
	}
	return true
}

var errStop = errors.New("stop")

// fixLog tries to undo one damaged byte in l, a log a repair was asked
// for. It reports what it changed, or "" if it changed nothing.
func fixLog(ctx context.Context, l Log) (string, error) {
	data, err := l.Raw(ctx)
	if err != nil {
		return "", err
	}
	var last []byte
	offsets, _, err := dirlog.ScanFrames(bytes.NewReader(data), 0, func(b []byte) error {
		last = append(last[:0], b...)
		return nil
	})
	var te *dirlog.TailError
	if !errors.As(err, &te) || te.Torn {
		return "", nil // Nothing a byte could fix; replay judges the entries.
	}
	seq, head := int64(0), dirlog.Hash{}
	if len(offsets) > 0 {
		p := dirlog.DecodePending(last)
		if p.Err != nil {
			return "", nil
		}
		seq, head = p.Entry.Seq, p.Entry.Hash()
	}
	at, b, ok := fixFrame(data, te.Offset, seq, head)
	if !ok {
		return "", nil
	}
	kept, err := l.Patch(ctx, at, b)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("restored the damaged byte at offset %d of entry %d's frame (the next entry names its hash); the log as it was is kept in %s", at, seq+1, kept), nil
}

// castagnoli is the CRC-32C table of the log framing (see dirlog.AppendFrame).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)
