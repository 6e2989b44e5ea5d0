package disk

import (
	"os"
	"syscall"
	"unsafe"
)

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
