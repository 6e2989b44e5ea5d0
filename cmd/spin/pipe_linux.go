package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// growPipe asks the kernel for a pipe buffer of pipeSize bytes when f is
// a pipe, so that a large file written to it wakes the reader and the
// writer up once a pipeSize bytes rather than once every 64 KiB (the
// default). A pipe that cannot grow (a limit set lower, another system
// user's pipe) is left as it is.
func growPipe(f *os.File) {
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		return
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return
	}
	sc.Control(func(fd uintptr) {
		if size, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0); err == nil && size < pipeSize {
			unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize)
		}
	})
}
