package fsys

import (
	"context"
	"errors"
	"syscall"

	"spindle.dev"
)

// errno converts an error from the client into the errno the file system
// answers with (see the table in the package comment).
func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return syscall.EIO
	}
	switch spindle.KindOf(err) {
	case spindle.NotExist, spindle.Private, spindle.BrokenLink:
		return syscall.ENOENT
	case spindle.Permission, spindle.CannotDecrypt:
		return syscall.EACCES
	case spindle.Exist:
		return syscall.EEXIST
	case spindle.IsDir:
		return syscall.EISDIR
	case spindle.NotDir:
		return syscall.ENOTDIR
	case spindle.NotEmpty:
		return syscall.ENOTEMPTY
	case spindle.Invalid:
		return syscall.EINVAL
	}
	return syscall.EIO
}

// unreachable reports whether err says the node could not be reached or
// did not answer in time, rather than that it answered no: the cases in
// which a cached answer is better than none.
func unreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errTimeout) {
		return true
	}
	switch spindle.KindOf(err) {
	case spindle.IO, spindle.Transient, spindle.Other:
		return true
	}
	return false
}
