package nodetest

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// RemoveBinary removes the directory the spin binary was built in, so that
// go test leaves no build behind in the temporary directory.
func TestRemoveBinary(t *testing.T) {
	dir, err := os.MkdirTemp("", "spindle-nodetest-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir+"/spin", []byte("a build"), 0o755); err != nil {
		t.Fatal(err)
	}
	binDir.Lock()
	saved := binDir.name
	binDir.name = dir
	binDir.Unlock()
	RemoveBinary()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s after RemoveBinary: %v", dir, err)
	}
	binDir.Lock()
	binDir.name = saved
	binDir.Unlock()
}
