package main

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A pipe get writes a large file to is grown to pipeSize; a regular file
// is left alone.
func TestGrowPipeGrowsAPipeOnly(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	growPipe(w)
	size, err := unix.FcntlInt(w.Fd(), unix.F_GETPIPE_SZ, 0)
	if err != nil {
		t.Fatal(err)
	}
	if size < pipeSize {
		t.Errorf("pipe buffer after growPipe: %d bytes, want at least %d", size, pipeSize)
	}
	f, err := os.Create(t.TempDir() + "/file")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	growPipe(f) // Must do nothing, and not fail.
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
		t.Errorf("a regular file after growPipe: %v, %v", fi, err)
	}
}
