//go:build unix

package spindle

import (
	"errors"
	"os"
	"syscall"
)

// lock takes an exclusive flock on f; busy reports that another holds it.
func lock(f *os.File, wait bool) (busy bool, err error) {
	how := syscall.LOCK_EX
	if !wait {
		how |= syscall.LOCK_NB
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return errors.Is(err, syscall.EWOULDBLOCK), err
		}
	}
}
