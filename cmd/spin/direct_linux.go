package main

import (
	"os"
	"syscall"
)

// openDirect opens the existing file name for writing with O_DIRECT, which
// writes straight to the device, past the page cache. Writing a large file
// through the page cache costs more CPU than decrypting it on the virtual
// disks many machines have.
func openDirect(name string) (*os.File, error) {
	return os.OpenFile(name, os.O_WRONLY|syscall.O_DIRECT, 0)
}
