package disk

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"spindle.dev"
	"spindle.dev/blocks"
)

// A block file holds the block's bytes and a trailer: the four bytes
// "spB1" and the CRC-32C (Castagnoli) of the block, big-endian. Put
// verifies a block's SHA-256 before it writes the file; Get then checks
// the CRC, which catches what goes wrong on disks (flipped bits, torn or
// misdirected writes, truncation) at a twentieth of the cost of hashing
// again, so that serving a block costs little more than reading it. The
// SHA-256 remains the authority: a file whose trailer is missing (written
// before trailers existed) or does not match is hashed, and served only if
// the hash matches; otherwise it is reported as Integrity and moved aside
// to DIR/corrupt/ for inspection (see [CorruptDir]).
// Every receiver of a block hashes it again in any case, and a get for a
// client, which checks each block against its signed entry, skips the
// CRC ([blocks.WithCheckedByReader]): a client given damaged bytes asks
// again, and that get checks.
const trailerLen = 8

var trailerMagic = [4]byte{'s', 'p', 'B', '1'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendTrailer appends the trailer for block data to b.
func appendTrailer(b, data []byte) []byte {
	b = append(b, trailerMagic[:]...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(data, castagnoli))
}

// verifyFile returns the block held in the contents of a block file,
// which must have digest d. With trusted set (a get for a reader that
// checks the block itself: [blocks.CheckedByReader]) a file with its
// trailer in place is served without the CRC being computed; the size
// is still checked, and a file without a trailer is still hashed.
func verifyFile(d blocks.Digest, file []byte, trusted bool) ([]byte, error) {
	if n := len(file) - trailerLen; n >= 0 && [4]byte(file[n:n+4]) == trailerMagic {
		data := file[:n]
		if n <= spindle.MaxStoredBlockSize && (trusted || binary.BigEndian.Uint32(file[n+4:]) == crc32.Checksum(data, castagnoli)) {
			return data, nil
		}
		if blocks.CheckDigest(d, data) == nil {
			return data, nil // Only the trailer was damaged.
		}
	}
	if err := blocks.CheckDigest(d, file); err != nil {
		return nil, err
	}
	return file, nil
}

// Large blocks are read, like they are written, with direct I/O into
// aligned buffers that the store lends: the caller of Get may hand them
// back with Recycle (the node's block server does once it has sent the
// block), so that serving a large file neither copies it through the page
// cache nor allocates and clears a buffer per block.

// directAlign is the alignment direct I/O needs of buffers, sizes and
// offsets.
const directAlign = spindle.DirectAlign

// maxFile is the size of the largest valid block file.
const maxFile = spindle.MaxStoredBlockSize + trailerLen

// bufSize is the size of a lent buffer: any block file, plus the room an
// O_DIRECT read needs to find the end of the file.
const bufSize = (maxFile/directAlign + 1) * directAlign

// directBufs holds aligned buffers of bufSize bytes.
var directBufs = sync.Pool{New: func() any {
	b := make([]byte, bufSize+directAlign)
	off := directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)
	if off == directAlign {
		off = 0
	}
	b = b[off : off+bufSize : off+bufSize]
	return &b
}}

func lendBuffer() []byte { return *directBufs.Get().(*[]byte) }

// Recycle implements [blocks.Recycler]: block, returned by Get, is reused
// by later calls. Slices that Get did not lend are ignored.
func (s *Store) Recycle(block []byte) {
	if cap(block) != bufSize || uintptr(unsafe.Pointer(unsafe.SliceData(block)))%directAlign != 0 {
		return
	}
	block = block[:bufSize]
	directBufs.Put(&block)
}

var _ blocks.Recycler = (*Store)(nil)

// Get implements [spindle.BlockStore]. A file whose contents do not match
// ref is moved to DIR/corrupt/ and reported as Integrity. The caller may hand the
// returned block back with [Store.Recycle]. For a ctx marked with
// [blocks.WithCheckedByReader] the CRC of a block file is not computed:
// damage is then found by the reader, whose get again (unmarked) finds it
// here too.
func (s *Store) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "disk.Get"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	switch data, err := s.small.get(d, s.keepCorrupt); {
	case err == nil:
		return data, nil
	case errors.Is(err, errCorrupt):
		return nil, spindle.E(op, spindle.Integrity, fmt.Sprintf("block %s: %v; its bytes are kept for inspection (in its segment, and copied to %s when found by a read)", ref, err, filepath.Join(s.dir, CorruptDir)))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
	}
	name := s.Path(d)
	data, err := s.read(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, spindle.E(op, spindle.NotExist, "block "+string(ref))
		}
		return nil, spindle.E(op, spindle.IO, err)
	}
	block, err := verifyFile(d, data, blocks.CheckedByReader(ctx))
	if err != nil {
		s.Recycle(data)
		aside := s.removeBad(d, name)
		return nil, spindle.E(op, spindle.Integrity, fmt.Sprintf("block %s: file %s is corrupt and has been moved to %s", ref, name, aside))
	}
	return block, nil
}

// sound reports whether the block file name holds the block with digest d.
func (s *Store) sound(d blocks.Digest, name string) bool {
	data, err := s.read(name)
	if err != nil {
		return false
	}
	_, err = verifyFile(d, data, false)
	s.Recycle(data)
	return err == nil
}

// read reads a block file with direct I/O into a lent buffer, or through the
// page cache where the file system does not allow it. (Block files
// hold blocks of 64 KiB or more; smaller ones live in segments.) It reads
// at most one byte more than the largest valid block file, so that an
// overlong file is caught without being read whole.
func (s *Store) read(name string) ([]byte, error) {
	if s.noDirectRead.Load() {
		return s.readBlock(name)
	}
	f, err := s.direct.OpenDirect(name, os.O_RDONLY, 0)
	if refused(err) {
		s.noDirectRead.Store(true)
		return s.readBlock(name)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := lendBuffer()
	n, err := io.ReadFull(f, buf) // Short: the file ends first, as it should.
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = nil
	}
	if err != nil {
		s.Recycle(buf)
		if refused(err) {
			s.noDirectRead.Store(true)
			return s.readBlock(name)
		}
		return nil, err
	}
	return buf[:min(n, maxFile+1)], nil
}

// readBlock reads a block file through the page cache, reading at most
// one byte more than the largest valid block file.
func (s *Store) readBlock(name string) ([]byte, error) {
	f, err := s.fs.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := 0
	if fi, err := f.Stat(); err == nil && fi.Size() <= maxFile {
		size = int(fi.Size())
	}
	buf := make([]byte, size, size+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF {
		return nil, err
	}
	buf = buf[:n]
	// Read on in case the file grew or was larger than its size said.
	rest, err := io.ReadAll(io.LimitReader(f, int64(maxFile+1-n)))
	if err != nil {
		return nil, err
	}
	return append(buf, rest...), nil
}

// CorruptDir is the directory, under the store's, where corrupt block
// files and copies of corrupt small-block records are moved for
// inspection. Nothing reads them again; an operator may delete them.
const CorruptDir = "corrupt"

// removeBad moves the block file name aside, to CorruptDir, if it still
// fails its check (a concurrent Put may have replaced it with a good copy
// meanwhile), and returns where it went.
func (s *Store) removeBad(d blocks.Digest, name string) string {
	mu := s.stripe(d)
	mu.Lock()
	defer mu.Unlock()
	data, err := s.readBlock(name)
	if err != nil {
		return "(gone)"
	}
	if _, err := verifyFile(d, data, false); err == nil {
		return "(replaced by a sound copy meanwhile)"
	}
	aside, err := s.corruptName(filepath.Base(name))
	if err != nil {
		return "(nowhere: " + err.Error() + ")"
	}
	if err := s.fs.Rename(name, aside); err != nil {
		return "(nowhere: " + err.Error() + ")"
	}
	s.fs.SyncDir(filepath.Dir(name))
	s.fs.SyncDir(filepath.Dir(aside))
	return aside
}

// corruptName returns a new name in CorruptDir for a corrupt copy of the
// file base, making the directory if needed.
func (s *Store) corruptName(base string) (string, error) {
	dir := filepath.Join(s.dir, CorruptDir)
	if err := s.fs.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	return filepath.Join(dir, fmt.Sprintf("%s.%d", base, time.Now().UnixNano())), nil
}

// keepCorrupt writes a copy of a corrupt small-block record to
// CorruptDir, best effort: the record stays in its segment in any case.
func (s *Store) keepCorrupt(d blocks.Digest, rec []byte) {
	name, err := s.corruptName(hex.EncodeToString(d[:]) + ".rec")
	if err != nil {
		return
	}
	if f, err := s.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Write(rec)
		f.Sync()
		f.Close()
	}
}
