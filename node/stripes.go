package node

import (
	"spindle.dev"
	"spindle.dev/pack"
)

// shardRefs returns the refs of the shards of a file whose blocks are
// erasure-coded, which its dir host leases as it leases blocks (see
// dirlog/host.Config.MoreRefs); none for a file of whole blocks. The
// entries of a tree the host holds verified when they were appended.
func shardRefs(e *spindle.DirEntry) []spindle.Ref {
	_, stripes, err := pack.Stripes(e)
	if err != nil {
		return nil
	}
	var refs []spindle.Ref
	for _, s := range stripes {
		refs = append(refs, s...)
	}
	return refs
}
