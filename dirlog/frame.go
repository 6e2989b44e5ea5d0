package dirlog

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
)

// A TailError describes the damaged end of a log.
type TailError struct {
	Records int    // Whole, valid records before the damage.
	Offset  int64  // Byte offset where the damage starts.
	Reason  string // What was wrong.
	// Torn is set when the bad record is the last thing in the log and
	// runs to its end: what a crash during an append leaves, which was
	// never acknowledged. Damage elsewhere is not torn.
	Torn bool
}

func (e *TailError) Error() string {
	return fmt.Sprintf("log damaged at byte %d after %d good records: %s", e.Offset, e.Records, e.Reason)
}

// Framing of log files.
const (
	FileHeader = "SPDLOG1\n"              // Starts every log file.
	FrameSize  = 8                        // Length and CRC before each record.
	MaxRecord  = MaxEntrySize + (1 << 20) // The largest record a frame may hold.
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendFrame appends rec to b, framed with its length and CRC-32C.
func AppendFrame(b, rec []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(rec)))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(rec, castagnoli))
	return append(b, rec...)
}

// ScanFrames reads framed records from r, which starts at byte offset base,
// calling fn for each. It returns the offsets of the records read, the end
// of the last one, and a *TailError if the data ends in a damaged frame.
func ScanFrames(r io.Reader, base int64, fn func([]byte) error) (offsets []int64, end int64, err error) {
	br := bufio.NewReaderSize(r, 1<<16)
	end = base
	var hdr [FrameSize]byte
	var buf []byte
	for {
		n, rerr := io.ReadFull(br, hdr[:])
		if rerr == io.EOF {
			return offsets, end, nil
		}
		tail := func(reason string) error {
			return &TailError{Records: len(offsets), Offset: end, Reason: reason}
		}
		torn := func(reason string) error {
			return &TailError{Records: len(offsets), Offset: end, Reason: reason, Torn: true}
		}
		if rerr == io.ErrUnexpectedEOF {
			return offsets, end, torn(fmt.Sprintf("truncated frame header (%d bytes)", n))
		}
		if rerr != nil {
			return offsets, end, rerr
		}
		size := binary.BigEndian.Uint32(hdr[:4])
		sum := binary.BigEndian.Uint32(hdr[4:])
		if size == 0 || size > MaxRecord {
			return offsets, end, tail(fmt.Sprintf("bad record length %d", size))
		}
		if cap(buf) < int(size) {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		if n, rerr := io.ReadFull(br, buf); rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			if lengthFlipped(buf[:n], size, sum) {
				return offsets, end, tail(fmt.Sprintf("damaged record length %d", size))
			}
			return offsets, end, torn(fmt.Sprintf("truncated record: %d of %d bytes", n, size))
		} else if rerr != nil {
			return offsets, end, rerr
		}
		if crc32.Checksum(buf, castagnoli) != sum {
			// Even in the last record: an append writes the length,
			// checksum and record together, so a crash leaves a short
			// record, not a whole one with the wrong bytes.
			return offsets, end, tail("record checksum mismatch")
		}
		if err := fn(buf); err != nil {
			return offsets, end, err
		}
		offsets = append(offsets, end)
		end += FrameSize + int64(size)
	}
}

// lengthFlipped reports whether a record that seems cut short, rest being
// what follows its frame header, is instead a whole record whose length
// was damaged: whether changing one byte of size gives a length that
// fits, with a record that matches its checksum. Damage, unlike a torn
// append, must not be cut silently.
func lengthFlipped(rest []byte, size, sum uint32) bool {
	if len(rest) > 16<<20 {
		return false // Too costly to try; treated as torn.
	}
	for i := 0; i < 4; i++ {
		shift := 8 * (3 - i)
		for v := uint32(0); v < 256; v++ {
			n := size&^(0xFF<<shift) | v<<shift
			if n == size || n == 0 || int64(n) > int64(len(rest)) {
				continue
			}
			if crc32.Checksum(rest[:n], castagnoli) == sum {
				return true
			}
		}
	}
	return false
}
