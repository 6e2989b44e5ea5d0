package fsys

// Ops returns the number of FUSE requests of each counted kind the mount
// has answered (see counted).
func (m *FS) Ops() map[string]int64 { return m.raw.counts() }
