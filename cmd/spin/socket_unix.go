//go:build unix

package main

import "syscall"

// canConnect reports whether this process may connect to the Unix socket
// at path: connecting needs write permission on it.
func canConnect(path string) bool {
	const wOK = 2
	return syscall.Access(path, wOK) == nil
}
