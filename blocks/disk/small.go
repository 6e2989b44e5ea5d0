package disk

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"spindle.dev"
	"spindle.dev/blocks"
)

// Small blocks (under smallMax bytes: directory-sized files, small
// documents, the tails of others) are not given a file each. Creating,
// syncing and renaming a file, and syncing its directory, cost a node far
// more than the block's bytes, and on ext4 creating files right after
// many were deleted costs more still. Instead they are appended to
// segment files under DIR/small, and concurrent Puts share one fsync
// (group commit). An in-memory index, rebuilt when the store opens, maps
// each block to its place.
//
// A segment is a sequence of records:
//
//	magic "spS2" (4) | digest (32) | length (4, big-endian) | CRC-32C of the data (4) | CRC-32C of the header before it (4) | data
//
// The header's own check catches a damaged digest or length even where
// only headers are read (every segment but the last, as the store opens):
// a record whose header is damaged but whose data is sound is indexed
// under the digest of its data, and reported. Records of the first form,
// "spS1", have no header check and are read as they are.
//
// A record with length tombstone deletes the block named by its digest.
// The last segment is checked record by record when the store opens and
// cut at the first record that is torn or corrupt, which only a crash
// while appending leaves; older segments were complete when closed.

// segmentMax is the size at which a new segment is started (a variable
// for tests).
var segmentMax int64 = 256 << 20

const (
	smallMax      = 64 << 10
	recordHeader1 = 4 + 32 + 4 + 4    // spS1
	recordHeader  = recordHeader1 + 4 // spS2
	tombstone     = 0xFFFFFFFF
	smallDir      = "small"
)

var (
	recordMagic1 = [4]byte{'s', 'p', 'S', '1'}
	recordMagic  = [4]byte{'s', 'p', 'S', '2'}
)

// A loc is where a small block is stored.
type loc struct {
	seg int   // Segment number.
	off int64 // Offset of the block's data.
	n   int   // Length of the data.
	hdr int   // Length of the record's header, before off.
}

// smallStore is the part of a Store that holds small blocks.
type smallStore struct {
	fs  spindle.FS
	dir string

	mu    sync.Mutex
	index map[blocks.Digest]loc
	segs  map[int]spindle.FSFile // Every segment, open for reading; the last also for appending.
	cur   int                    // The segment appended to.
	size  int64                  // Its size.
	wrote uint64                 // Appends made, counted.
	err   error                  // A failed append that could not be undone: no more appends.

	damage  []error                  // Found by openSmall.
	corrupt map[blocks.Digest]string // Blocks whose records openSmall found corrupt, and where.
	full    bool                     // The last segment is damaged: start a new one.

	syncMu sync.Mutex
	synced uint64 // Appends known durable.
}

// openSmall opens the small-block segments under dir, creating dir if
// needed, and indexes them.
func openSmall(fsys spindle.FS, dir string) (*smallStore, error) {
	s := &smallStore{fs: fsys, dir: filepath.Join(dir, smallDir), index: make(map[blocks.Digest]loc), segs: make(map[int]spindle.FSFile)}
	if _, err := fsys.Stat(s.dir); err != nil {
		if err := fsys.MkdirAll(s.dir, 0o700); err != nil {
			return nil, err
		}
		if err := fsys.SyncDir(dir); err != nil {
			return nil, err
		}
	}
	ents, err := fsys.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var nums []int
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".seg")
		if n, err := strconv.Atoi(name); ok && err == nil && n >= 0 && e.Type().IsRegular() {
			nums = append(nums, n)
		}
	}
	sort.Ints(nums)
	for i, n := range nums {
		f, err := s.fs.OpenFile(s.segName(n), os.O_RDWR, 0)
		if err != nil {
			s.close()
			return nil, err
		}
		s.segs[n] = f
		size, err := s.scan(n, f, i == len(nums)-1)
		if err != nil {
			s.close()
			return nil, err
		}
		s.cur, s.size = n, size
	}
	if len(nums) == 0 || s.full {
		next := 0
		if len(nums) > 0 {
			next = nums[len(nums)-1] + 1
		}
		if err := s.newSegment(next); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *smallStore) segName(n int) string {
	return filepath.Join(s.dir, fmt.Sprintf("%08d.seg", n))
}

// newSegment creates segment n, makes it the one appended to, and syncs
// the directory so that it survives a crash.
func (s *smallStore) newSegment(n int) error {
	f, err := s.fs.OpenFile(s.segName(n), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		f.Close()
		s.fs.Remove(s.segName(n))
		return err
	}
	s.segs[n] = f
	s.cur, s.size = n, 0
	return nil
}

// scan indexes segment n and returns its size. In the last segment every
// record is checked and a bad tail is cut off; in older ones only the
// headers are read.
func (s *smallStore) scan(n int, f spindle.FSFile, last bool) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	end := fi.Size()
	var hdr [recordHeader]byte
	var data []byte
	readData := func(length uint32, at int64) error {
		if cap(data) < int(length) {
			data = make([]byte, smallMax)
		}
		data = data[:length]
		_, err := f.ReadAt(data, at)
		return err
	}
	off := int64(0)
	for off < end {
		nh, _ := f.ReadAt(hdr[:], off)
		d, length, crc, size, ok, sound := parseHeader(hdr[:nh])
		if !ok {
			break // A torn header, or no record here.
		}
		if !sound {
			// A damaged header: its digest or length may be wrong. If
			// the data it frames is sound, the digest is the data's.
			if length >= smallMax || off+int64(size)+int64(length) > end {
				break
			}
			if err := readData(length, off+int64(size)); err != nil {
				return 0, err
			}
			if crc32.Checksum(data, castagnoli) != crc {
				break
			}
			d = blocks.Digest(sha256.Sum256(data))
			s.damage = append(s.damage, fmt.Errorf("small block segment %s: the header of the record at offset %d was damaged; its data is sound and was indexed as block %x", s.segName(n), off, d[:8]))
			s.index[d] = loc{seg: n, off: off + int64(size), n: int(length), hdr: size}
			off += int64(size) + int64(length)
			continue
		}
		if length == tombstone {
			delete(s.index, d)
			delete(s.corrupt, d) // Dropped on purpose, and reported then.
			off += int64(size)
			continue
		}
		if length >= smallMax || off+int64(size)+int64(length) > end {
			break
		}
		if last {
			if err := readData(length, off+int64(size)); err != nil {
				return 0, err
			}
			if crc32.Checksum(data, castagnoli) != crc {
				if off+int64(size)+int64(length) == end {
					break // The last record, torn by a crash.
				}
				// Rot inside a record: skip it, keep the rest. Its bytes
				// stay where they are, for inspection.
				where := fmt.Sprintf("segment %s at offset %d", s.segName(n), off)
				s.damage = append(s.damage, fmt.Errorf("small block segment %s: the record at offset %d is corrupt and was dropped (its bytes are left in place)", s.segName(n), off))
				if s.corrupt == nil {
					s.corrupt = make(map[blocks.Digest]string)
				}
				s.corrupt[d] = where
				off += int64(size) + int64(length)
				continue
			}
		}
		s.index[d] = loc{seg: n, off: off + int64(size), n: int(length), hdr: size}
		off += int64(size) + int64(length)
	}
	if off < end {
		if !last {
			// Damage on disk: the blocks after it cannot be found until
			// a repair puts them again.
			s.damage = append(s.damage, fmt.Errorf("small block segment %s is damaged at offset %d; the %d bytes after it are not indexed", s.segName(n), off, end-off))
			return end, nil
		}
		if hasMagic(f, off+1, end) {
			// Not a torn append but damage, with records after it that
			// cannot be framed: keep them on disk, append elsewhere.
			s.damage = append(s.damage, fmt.Errorf("small block segment %s is damaged at offset %d; the %d bytes after it are not indexed", s.segName(n), off, end-off))
			s.full = true
			return end, nil
		}
		// A crash while appending: what follows the last sound record
		// was never acknowledged.
		if err := f.Truncate(off); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	}
	return off, nil
}

// hasMagic reports whether the bytes of f from off to end hold a record
// magic.
func hasMagic(f spindle.FSFile, off, end int64) bool {
	buf := make([]byte, 1<<20)
	for off < end {
		n, _ := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
		if n == 0 {
			return false
		}
		if bytes.Contains(buf[:n], recordMagic[:]) || bytes.Contains(buf[:n], recordMagic1[:]) {
			return true
		}
		if n <= len(recordMagic) {
			return false
		}
		off += int64(n - len(recordMagic) + 1) // Overlap: a magic across chunks.
	}
	return false
}

// parseHeader parses the record header at the start of h, of either
// form, returning its size. ok is false if h does not start with a whole
// header; sound is false if the header's own check fails.
func parseHeader(h []byte) (d blocks.Digest, length, crc uint32, size int, ok, sound bool) {
	if len(h) < recordHeader1 {
		return d, 0, 0, 0, false, false
	}
	switch [4]byte(h[:4]) {
	case recordMagic1:
		size, sound = recordHeader1, true
	case recordMagic:
		if len(h) < recordHeader {
			return d, 0, 0, 0, false, false
		}
		size = recordHeader
		sound = crc32.Checksum(h[:recordHeader1], castagnoli) == binary.BigEndian.Uint32(h[recordHeader1:])
	default:
		return d, 0, 0, 0, false, false
	}
	copy(d[:], h[4:36])
	return d, binary.BigEndian.Uint32(h[36:]), binary.BigEndian.Uint32(h[40:]), size, true, sound
}

func appendRecord(b []byte, d blocks.Digest, data []byte, length uint32) []byte {
	start := len(b)
	b = append(b, recordMagic[:]...)
	b = append(b, d[:]...)
	b = binary.BigEndian.AppendUint32(b, length)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(data, castagnoli))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
	return append(b, data...)
}

// get returns block d, or an error wrapping fs.ErrNotExist if it is not
// here, or errCorrupt if its record no longer matches its CRC (the
// record is then dropped, after keep, if not nil, is given a copy of it).
func (s *smallStore) get(d blocks.Digest, keep func(blocks.Digest, []byte)) ([]byte, error) {
	s.mu.Lock()
	l, ok := s.index[d]
	f := s.segs[l.seg]
	s.mu.Unlock()
	if !ok {
		if where, bad := s.corrupt[d]; bad {
			return nil, fmt.Errorf("%w: its record in %s is corrupt", errCorrupt, where)
		}
		return nil, os.ErrNotExist
	}
	buf := make([]byte, l.hdr+l.n)
	if _, err := f.ReadAt(buf, l.off-int64(l.hdr)); err != nil {
		return nil, err
	}
	hd, length, crc, _, okh, sound := parseHeader(buf[:l.hdr])
	data := buf[l.hdr:]
	if !okh || !sound || hd != d || int(length) != l.n || crc32.Checksum(data, castagnoli) != crc {
		if blocks.CheckDigest(d, data) == nil {
			return data, nil // Only the record's header was damaged.
		}
		if keep != nil {
			keep(d, buf)
		}
		s.drop(d, l)
		return nil, errCorrupt
	}
	return data, nil
}

var errCorrupt = errors.New("corrupt small block record")

// drop removes block d from the index if it is still at l, and records a
// tombstone so that it stays gone after a restart.
func (s *smallStore) drop(d blocks.Digest, l loc) {
	s.append(d, nil, tombstone, func() bool {
		cur, ok := s.index[d]
		return ok && cur == l
	})
}

// put stores data, whose digest is d, durably.
func (s *smallStore) put(d blocks.Digest, data []byte) error {
	_, err := s.append(d, data, uint32(len(data)), nil)
	return err
}

// remove deletes block d durably; removing an absent block does nothing.
func (s *smallStore) remove(d blocks.Digest) error {
	_, err := s.append(d, nil, tombstone, func() bool {
		_, ok := s.index[d]
		return ok
	})
	return err
}

// append writes one record, if check (called with s.mu held) is nil or
// allows it, and returns once the record is durable. The index changes
// with the write, under the same lock, so that it always agrees with the
// order of the records in the segments; a block is served from the moment
// it is written, and a Put returns once it is durable. Appends that
// arrive while another is syncing share the next sync.
func (s *smallStore) append(d blocks.Digest, data []byte, length uint32, check func() bool) (done bool, err error) {
	rec := appendRecord(make([]byte, 0, recordHeader+len(data)), d, data, length)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return false, err
	}
	if check != nil && !check() {
		s.mu.Unlock()
		return false, nil
	}
	if s.size+int64(len(rec)) > segmentMax {
		if err := s.rotate(); err != nil {
			s.mu.Unlock()
			return false, err
		}
	}
	f, off := s.segs[s.cur], s.size
	if _, err := f.WriteAt(rec, off); err != nil {
		// Cut what was written, so that the next record follows a sound one.
		if terr := f.Truncate(off); terr != nil {
			s.err = fmt.Errorf("small block segment %s: %w (and cutting it back failed: %v)", f.Name(), err, terr)
		}
		s.mu.Unlock()
		return false, err
	}
	s.size += int64(len(rec))
	if length == tombstone {
		delete(s.index, d)
	} else {
		s.index[d] = loc{seg: s.cur, off: off + recordHeader, n: len(data), hdr: recordHeader}
	}
	s.wrote++
	seq := s.wrote
	s.mu.Unlock()
	if err := s.syncTo(seq); err != nil {
		// After a failed fsync the segment's state on disk is unknown
		// (and the kernel may have dropped the dirty pages): take no more
		// appends, and answer no Put from records that may not be
		// durable, until the store is opened again and rescans.
		s.mu.Lock()
		if s.err == nil {
			s.err = fmt.Errorf("small block segment %s: sync failed: %w", f.Name(), err)
		}
		s.mu.Unlock()
		return true, err
	}
	return true, nil
}

// stored reports whether block d is here and sound, for Put to skip
// storing it again. A store whose appends have failed answers false.
func (s *smallStore) stored(d blocks.Digest) bool {
	s.mu.Lock()
	broken := s.err != nil
	s.mu.Unlock()
	if broken {
		return false
	}
	_, err := s.get(d, nil)
	return err == nil
}

// rotate syncs and retires the current segment and starts a new one. The
// caller holds s.mu.
func (s *smallStore) rotate() error {
	if err := s.segs[s.cur].Sync(); err != nil {
		return err
	}
	return s.newSegment(s.cur + 1)
}

// syncTo returns once append number seq is durable: it syncs the current
// segment unless a sync that began after that append has already done so.
func (s *smallStore) syncTo(seq uint64) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	if s.synced >= seq {
		return nil
	}
	s.mu.Lock()
	upto, f := s.wrote, s.segs[s.cur]
	s.mu.Unlock()
	if err := f.Sync(); err != nil {
		return err
	}
	s.synced = upto
	return nil
}

// list calls fn with every small block's digest.
func (s *smallStore) list(fn func(blocks.Digest) error) error {
	s.mu.Lock()
	ds := make([]blocks.Digest, 0, len(s.index))
	for d := range s.index {
		ds = append(ds, d)
	}
	s.mu.Unlock()
	for _, d := range ds {
		if err := fn(d); err != nil {
			return err
		}
	}
	return nil
}

func (s *smallStore) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	for _, f := range s.segs {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	s.segs = nil
	return err
}
