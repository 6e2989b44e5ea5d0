package disk

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"syscall"

	"spindle.dev"
)

// Large blocks are written with direct I/O (O_DIRECT on Linux, through
// [spindle.DirectFS]): straight from an aligned buffer to the device,
// past the page cache. On the virtual disks Spindle nodes often run on,
// filling the page cache and writing it back costs more CPU than the rest
// of a Put (hashing included), and the block is not read again soon: it
// was just written by a client that holds its contents. Where the file
// system is not a DirectFS, or refuses direct I/O, the store falls back
// to buffered I/O for good.

// directMin is the smallest block written with direct I/O.
const directMin = 64 << 10

// refused reports whether err says that the file system does not do
// direct I/O: it refused the open, or (as some do) accepted it and then
// refused the first read or write.
func refused(err error) bool {
	return errors.Is(err, spindle.ErrNoDirect) || errors.Is(err, syscall.EINVAL)
}

// writeTempDirect writes data to a new synced file under DIR/tmp with
// direct I/O. It returns ok false, having left nothing behind, if the
// file system refuses direct I/O.
func (s *Store) writeTempDirect(data []byte) (name string, ok bool, err error) {
	var rnd [12]byte
	rand.Read(rnd[:])
	name = filepath.Join(s.dir, tmpDir, "put-"+hex.EncodeToString(rnd[:]))
	f, err := s.direct.OpenDirect(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if refused(err) {
		return "", false, nil
	}
	if err != nil {
		return "", true, err
	}
	bp := directBufs.Get().(*[]byte)
	file := appendTrailer(append((*bp)[:0], data...), data)
	padded := (len(file) + directAlign - 1) / directAlign * directAlign
	clear(file[len(file):padded])
	_, err = f.Write(file[:padded])
	directBufs.Put(bp)
	if err == nil && padded != len(file) {
		err = f.Truncate(int64(len(file)))
	}
	if err == nil {
		err = f.Sync() // The data, size and allocation: direct I/O makes none durable.
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.fs.Remove(name)
		if refused(err) {
			return "", false, nil
		}
		return "", true, err
	}
	return name, true, nil
}
