//go:build !linux

package disk

// markTopDir does nothing: the top-directory flag is ext4's.
func markTopDir(string) {}
