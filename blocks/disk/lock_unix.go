//go:build unix

package disk

import (
	"errors"
	"os"
	"syscall"
)

// lockExclusive takes an exclusive lock on f without waiting; busy reports
// that another holds it. The lock goes with the process.
func lockExclusive(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	return errors.Is(err, syscall.EWOULDBLOCK), err
}
