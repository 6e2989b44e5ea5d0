package disk

import (
	"os"
	"syscall"
	"testing"
	"unsafe"
)

// Open marks a new store's directory as a top directory where the file
// system keeps inode flags (ext4 here).
func TestTopDirFlag(t *testing.T) {
	dir := t.TempDir() + "/store"
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var flags int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), fsIocGetFlags, uintptr(unsafe.Pointer(&flags))); e != 0 {
		t.Skipf("file system keeps no inode flags: %v", e)
	}
	if flags&fsTopdirFl == 0 {
		t.Fatalf("store directory flags %#x lack the top-directory flag %#x", flags, fsTopdirFl)
	}
}
