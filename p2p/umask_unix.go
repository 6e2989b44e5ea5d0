//go:build unix

package p2p

import (
	"sync"
	"syscall"
)

// umaskMu serializes the changes of the process's umask that
// [withPrivateUmask] makes, since the umask is shared by every goroutine.
var umaskMu sync.Mutex

// withPrivateUmask runs f with the umask set to 077, so that a file f
// creates (a Unix socket, which bind creates with mode 0777 &^ umask) is
// never, not even for an instant, open to other users. Files that other
// goroutines create meanwhile are made at most more private.
func withPrivateUmask(f func() error) error {
	umaskMu.Lock()
	defer umaskMu.Unlock()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	return f()
}
