package keyraft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
)

// checkPages checks the structure of the bolt database file at path with
// plain reads, before bolt maps it: its meta pages, and every page
// reachable from the root bucket or holding the freelist, each in bounds,
// of the right type, referenced once (so that no cycle can make bolt
// loop), with every element inside its page. Bolt itself follows page
// numbers and offsets unchecked, into endless loops and past the end of
// its mapping. The layout is bolt's (go.etcd.io/bbolt v1.3, in the byte
// order of the machine that wrote it, as bolt reads it).
func checkPages(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil // A new store; see checkPresent.
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return err
	}
	w := &pageWalker{f: f, size: fi.Size()}
	m, err := w.meta()
	if err != nil {
		return err
	}
	w.pageSize, w.hwm = int64(m.pageSize), m.pgid
	if w.hwm < 3 || w.hwm > uint64(w.size/w.pageSize) {
		return fmt.Errorf("meta page: %d pages recorded, the file holds %d", w.hwm, w.size/w.pageSize)
	}
	w.seen = make([]bool, w.hwm)
	w.seen[0], w.seen[1] = true, true
	if err := w.bucketRoot(m.root, 0); err != nil {
		return err
	}
	if m.freelist != math.MaxUint64 {
		if err := w.freelist(m.freelist); err != nil {
			return err
		}
	}
	for id, ok := range w.seen {
		if !ok && !w.free[uint64(id)] {
			return fmt.Errorf("page %d is neither reachable nor free", id)
		}
	}
	return nil
}

// Bolt's page layout.
const (
	pageHeaderSize  = 16 // id u64, flags u16, count u16, overflow u32.
	elementSize     = 16 // Branch: pos, ksize u32, pgid u64. Leaf: flags, pos, ksize, vsize u32.
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	metaPageFlag    = 0x04
	freelistPage    = 0x10
	bucketLeafFlag  = 0x01
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaChecksumOff = 56 // Offset of the checksum within the meta.
	maxTreeDepth    = 64
)

var ne = binary.NativeEndian

type boltMeta struct {
	pageSize             uint32
	root                 uint64
	freelist, pgid, txid uint64
}

type pageWalker struct {
	f        *os.File
	size     int64
	pageSize int64
	hwm      uint64 // Pages in use, the high water mark.
	seen     []bool
	free     map[uint64]bool
}

// meta returns the meta page bolt would use: the valid one with the
// higher transaction ID.
func (w *pageWalker) meta() (*boltMeta, error) {
	var best *boltMeta
	var errs []error
	var rawTxid [2]uint64 // Of each page as stored, valid or not.
	ps := int64(os.Getpagesize())
	var buf [pageHeaderSize + 64]byte
	if _, err := w.f.ReadAt(buf[:], 0); err == nil {
		if m, err := parseMeta(buf[:]); err == nil {
			ps = int64(m.pageSize)
		}
	}
	for i := int64(0); i < 2; i++ {
		if _, err := w.f.ReadAt(buf[:], i*ps); err != nil {
			errs = append(errs, fmt.Errorf("meta page %d: %v", i, err))
			continue
		}
		rawTxid[i] = ne.Uint64(buf[pageHeaderSize+48:])
		m, err := parseMeta(buf[:])
		if err != nil {
			errs = append(errs, fmt.Errorf("meta page %d: %v", i, err))
			continue
		}
		if best == nil || m.txid > best.txid {
			best = m
		}
	}
	if best == nil {
		return nil, errors.Join(errs...)
	}
	// Bolt falls back to the other meta page when one is damaged, going
	// back one transaction. That is right after a torn write, but when
	// the damaged page was the newer one it silently drops a change that
	// raft acknowledged. Allow it only when the damaged page says it is
	// the older.
	if len(errs) > 0 && rawTxid[0]+rawTxid[1] != 2*best.txid-1 {
		return nil, fmt.Errorf("%v, and it may hold the newest transaction, which bolt would drop", errs[0])
	}
	return best, nil
}

func parseMeta(p []byte) (*boltMeta, error) {
	if ne.Uint16(p[8:]) != metaPageFlag {
		return nil, errors.New("not a meta page")
	}
	b := p[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(b[:metaChecksumOff])
	switch {
	case ne.Uint32(b[0:]) != boltMagic:
		return nil, errors.New("bad magic")
	case ne.Uint32(b[4:]) != boltVersion:
		return nil, errors.New("unknown version")
	case h.Sum64() != ne.Uint64(b[metaChecksumOff:]):
		return nil, errors.New("checksum mismatch")
	}
	m := &boltMeta{pageSize: ne.Uint32(b[8:]), root: ne.Uint64(b[16:]), freelist: ne.Uint64(b[32:]), pgid: ne.Uint64(b[40:]), txid: ne.Uint64(b[48:])}
	if m.pageSize < 512 || m.pageSize > 1<<20 || m.pageSize&(m.pageSize-1) != 0 {
		return nil, fmt.Errorf("bad page size %d", m.pageSize)
	}
	return m, nil
}

// page reads page id and its overflow pages, marking them seen.
func (w *pageWalker) page(id uint64, what string) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("%s: page %d is out of bounds (%d pages)", what, id, w.hwm)
	}
	var hdr [pageHeaderSize]byte
	if _, err := w.f.ReadAt(hdr[:], int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("%s: page %d: %v", what, id, err)
	}
	if got := ne.Uint64(hdr[:]); got != id {
		return nil, fmt.Errorf("%s: page %d is marked as page %d", what, id, got)
	}
	over := uint64(ne.Uint32(hdr[12:]))
	if over >= w.hwm-id {
		return nil, fmt.Errorf("%s: page %d runs past the last page", what, id)
	}
	for i := id; i <= id+over; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("%s: page %d is referenced twice", what, i)
		}
		w.seen[i] = true
	}
	buf := make([]byte, int64(over+1)*w.pageSize)
	if _, err := w.f.ReadAt(buf, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("%s: page %d: %v", what, id, err)
	}
	return buf, nil
}

// bucketRoot checks the tree of a bucket whose root is page id.
func (w *pageWalker) bucketRoot(id uint64, depth int) error {
	if depth > maxTreeDepth {
		return errors.New("buckets nested too deeply")
	}
	return w.tree(id, depth, 0)
}

// tree checks the branch or leaf page id and everything below it.
func (w *pageWalker) tree(id uint64, bdepth, depth int) error {
	if depth > maxTreeDepth {
		return fmt.Errorf("page %d: tree too deep", id)
	}
	p, err := w.page(id, "bucket tree")
	if err != nil {
		return err
	}
	return w.elements(p, fmt.Sprintf("page %d", id), bdepth, depth, true)
}

// elements checks the elements of the page p (a file page, or an inline
// bucket's page when onDisk is false) and follows them.
func (w *pageWalker) elements(p []byte, what string, bdepth, depth int, onDisk bool) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("%s: too short for a page", what)
	}
	flags, count := ne.Uint16(p[8:]), int(ne.Uint16(p[10:]))
	if flags == branchPageFlag && count == 0 {
		return fmt.Errorf("%s: branch page without elements", what)
	}
	if pageHeaderSize+count*elementSize > len(p) {
		return fmt.Errorf("%s: %d elements do not fit", what, count)
	}
	var prev []byte
	for i := 0; i < count; i++ {
		at := pageHeaderSize + i*elementSize
		e := p[at : at+elementSize]
		var pos, ksize, vsize uint64
		switch flags {
		case branchPageFlag:
			if !onDisk {
				return fmt.Errorf("%s: inline bucket holds a branch page", what)
			}
			pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
		case leafPageFlag:
			pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		default:
			return fmt.Errorf("%s: page type %#x where a branch or leaf belongs", what, flags)
		}
		if uint64(at)+pos+ksize+vsize > uint64(len(p)) {
			return fmt.Errorf("%s: element %d lies outside the page", what, i)
		}
		k := p[uint64(at)+pos : uint64(at)+pos+ksize]
		if prev != nil && string(k) <= string(prev) {
			return fmt.Errorf("%s: keys out of order at element %d", what, i)
		}
		prev = k
		if flags == branchPageFlag {
			if err := w.tree(ne.Uint64(e[8:]), bdepth, depth+1); err != nil {
				return err
			}
			continue
		}
		if ne.Uint32(e[0:])&bucketLeafFlag == 0 {
			continue
		}
		v := p[uint64(at)+pos+ksize : uint64(at)+pos+ksize+vsize]
		if len(v) < 16 {
			return fmt.Errorf("%s: bucket %q has a short header", what, k)
		}
		if root := ne.Uint64(v); root != 0 {
			if !onDisk {
				return fmt.Errorf("%s: inline bucket holds a bucket on disk", what)
			}
			if err := w.bucketRoot(root, bdepth+1); err != nil {
				return err
			}
		} else if err := w.elements(v[16:], fmt.Sprintf("%s: inline bucket %q", what, k), bdepth+1, 0, false); err != nil {
			return err
		}
	}
	return nil
}

// freelist checks the freelist page id and records the free pages.
func (w *pageWalker) freelist(id uint64) error {
	p, err := w.page(id, "freelist")
	if err != nil {
		return err
	}
	if ne.Uint16(p[8:]) != freelistPage {
		return fmt.Errorf("freelist: page %d is not a freelist page", id)
	}
	start, count := pageHeaderSize, uint64(ne.Uint16(p[10:]))
	if count == 0xFFFF {
		count = ne.Uint64(p[start:])
		start += 8
	}
	if count > uint64(len(p)-start)/8 {
		return fmt.Errorf("freelist: %d ids do not fit page %d", count, id)
	}
	w.free = make(map[uint64]bool, count)
	for i := uint64(0); i < count; i++ {
		f := ne.Uint64(p[start+int(i)*8:])
		switch {
		case f < 2 || f >= w.hwm:
			return fmt.Errorf("freelist: free page %d is out of bounds", f)
		case w.free[f]:
			return fmt.Errorf("freelist: page %d is freed twice", f)
		case w.seen[f]:
			return fmt.Errorf("freelist: page %d is both in use and free", f)
		}
		w.free[f] = true
	}
	return nil
}
