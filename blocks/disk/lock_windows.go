package disk

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// lockExclusive takes an exclusive lock on f without waiting; busy reports
// that another holds it. The lock goes with the process.
func lockExclusive(f *os.File) (busy bool, err error) {
	var ol windows.Overlapped
	err = windows.LockFileEx(windows.Handle(f.Fd()), windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, &ol)
	return errors.Is(err, windows.ERROR_LOCK_VIOLATION), err
}
