//go:build !linux

package spindle

import "io/fs"

// OpenDirect implements [DirectFS]. Direct I/O is used on Linux only:
// elsewhere OpenDirect always fails with ErrNoDirect.
func (osFS) OpenDirect(name string, flag int, perm fs.FileMode) (FSFile, error) {
	return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNoDirect}
}
