package spindle

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// OpenDirect implements [DirectFS] with O_DIRECT. A file system that
// refuses O_DIRECT (tmpfs before Linux 6.6, for one) fails the open with
// EINVAL, which OpenDirect reports as ErrNoDirect.
func (osFS) OpenDirect(name string, flag int, perm fs.FileMode) (FSFile, error) {
	f, err := os.OpenFile(name, flag|syscall.O_DIRECT, perm)
	if errors.Is(err, syscall.EINVAL) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNoDirect}
	}
	if err != nil {
		return nil, err // Not a nil *os.File in a non-nil FSFile.
	}
	return f, nil
}
