//go:build !unix

package p2p

// withPrivateUmask runs f. Systems without a umask protect a socket by
// the permissions of the directory it is in.
func withPrivateUmask(f func() error) error { return f() }
