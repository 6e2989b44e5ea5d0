package main

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// SPINDLE_CPUPROFILE names the profile written when the command ends,
// with %p replaced by the process id.
func TestCPUProfileWrittenAtStop(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(cpuProfileEnv, filepath.Join(dir, "spin.%p.prof"))
	stop := startCPUProfile()
	stop()
	name := filepath.Join(dir, "spin."+strconv.Itoa(os.Getpid())+".prof")
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatalf("no profile at %s: %v", name, err)
	}
	if fi.Size() == 0 {
		t.Errorf("the profile %s is empty", name)
	}
}

// Without the variable nothing is written and stop is harmless.
func TestCPUProfileOffWithoutVariable(t *testing.T) {
	t.Setenv(cpuProfileEnv, "")
	startCPUProfile()()
}
