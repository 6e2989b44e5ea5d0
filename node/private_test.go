package node

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"spindle.dev/p2p"
)

// A node home that other users can enter is made private when the node
// starts, and the node's socket is open to its own user only.
func TestHomeAndSocketArePrivate(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	home := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(home, 0o755); err != nil { // Past the umask.
		t.Fatal(err)
	}
	n := startNode(t, home)
	defer n.Close()
	fi, err := os.Stat(home)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("home mode %04o after start, want 0700", perm)
	}
	sock, ok := p2p.SocketPath(home)
	if !ok {
		t.Skip("home path too long for a socket")
	}
	fi, err = os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Errorf("socket mode %04o, want no rights for group or others", perm)
	}
}
