package blocks

import "context"

// A store's own check of what it reads from its disk (blocks/disk keeps
// a CRC-32C with each block file) is there to catch damage before a
// block is served. A get for a reader that checks every block itself
// against the entry its writer signed (a client: pack.Reader hashes each
// block and, for ee, checks its GCM tag) need not pay for it on every
// block: damage is caught by that reader, which asks again saying the
// bytes were wrong (p2p.Recheck), and that second get runs every check,
// so the damaged copy is found, set aside and replaced as for any other
// get. A store may skip only checks whose failure the reader's own check
// would catch; it still refuses what it cannot parse.

type checkedByReaderKey struct{}

// WithCheckedByReader marks ctx as the context of a get whose bytes go to
// a reader that checks each block itself (see above), so that a store may
// skip its check of what it reads from its own disk.
func WithCheckedByReader(ctx context.Context) context.Context {
	return context.WithValue(ctx, checkedByReaderKey{}, true)
}

// CheckedByReader reports whether ctx was marked by [WithCheckedByReader].
func CheckedByReader(ctx context.Context) bool {
	return ctx.Value(checkedByReaderKey{}) != nil
}
