package disk

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"syscall"
	"unsafe"
)

// Large blocks are written with O_DIRECT: straight from an aligned buffer
// to the device, past the page cache. On the virtual disks Spindle nodes
// often run on, filling the page cache and writing it back costs more CPU
// than the rest of a Put (hashing included), and the block is not read
// again soon: it was just written by a client that holds its contents.

// directMin is the smallest block written with O_DIRECT.
const directMin = 64 << 10

// writeTempDirect writes data to a new synced file under DIR/tmp with
// O_DIRECT. It returns ok false, having written nothing, if the file
// system does not support O_DIRECT.
func (s *Store) writeTempDirect(data []byte) (name string, ok bool, err error) {
	var rnd [12]byte
	rand.Read(rnd[:])
	name = filepath.Join(s.dir, tmpDir, "put-"+hex.EncodeToString(rnd[:]))
	fd, err := syscall.Open(name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC|syscall.O_DIRECT, 0o600)
	if err == syscall.EINVAL {
		return "", false, nil
	}
	if err != nil {
		return "", true, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f := os.NewFile(uintptr(fd), name)
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
		err = f.Sync() // The size and the allocation, which O_DIRECT does not make durable.
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(name)
		if pe, isPath := err.(*os.PathError); isPath && pe.Err == syscall.EINVAL {
			return "", false, nil
		}
		return "", true, err
	}
	return name, true, nil
}

// openDirect opens name for reading with O_DIRECT. It returns ok false,
// having opened nothing, if the file system does not support O_DIRECT.
func openDirect(name string) (f *os.File, ok bool, err error) {
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_DIRECT, 0)
	if err == syscall.EINVAL {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, &os.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), true, nil
}

// Linux inode flags (linux/fs.h).
const (
	fsIocGetFlags = 0x80086601
	fsIocSetFlags = 0x40086602
	fsTopdirFl    = 0x00020000
)

// markTopDir sets the "top of directory hierarchy" flag on dir (chattr
// +T): ext4 then spreads its subdirectories, the store's 256 fan-out
// directories, over the disk's block groups, instead of packing them with
// their files into one group where every new file searches past the space
// of recently deleted ones. On other file systems the flag is refused or
// means nothing; either way nothing is lost.
func markTopDir(dir string) {
	f, err := os.Open(dir)
	if err != nil {
		return
	}
	defer f.Close()
	var flags int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocGetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		return
	}
	if flags&fsTopdirFl == 0 {
		flags |= fsTopdirFl
		syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocSetFlags, uintptr(unsafe.Pointer(&flags)))
	}
}
