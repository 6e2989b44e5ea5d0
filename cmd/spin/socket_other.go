//go:build !unix

package main

// canConnect reports whether this process may connect to the Unix socket
// at path; nodes make no socket on this system.
func canConnect(path string) bool { return false }
