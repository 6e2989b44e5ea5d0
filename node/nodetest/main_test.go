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
