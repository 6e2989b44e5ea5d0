package node

import (
	"context"
	"errors"
	"fmt"

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

// A StripeRound counts what one [Node.RepairStripes] did.
type StripeRound struct {
	Files   int   // Erasure-coded files of the trees hosted here.
	Stripes int   // Their blocks, each a stripe.
	Short   int   // Stripes found with a shard no live node holds.
	Rebuilt int   // Shards rebuilt and placed.
	Failed  int   // Stripes left short (too few shards, or no node to take one).
	Moved   int64 // Bytes of shards fetched and pushed.
}

// RepairStripes checks every stripe of the erasure-coded files of the
// trees this node hosts as a dir host, cheaply (replica.Store.StripeShort:
// a provider lookup per shard), and rebuilds the shards of those found
// short onto other nodes (replica.Store.RepairStripe). Only a dir host
// knows a stripe's shards (its writer's entry names them), so it is the
// dir host that repairs; the renewal loop runs it after each lease
// renewal round.
func (n *Node) RepairStripes(ctx context.Context) (StripeRound, error) {
	const op spindle.Op = "node.RepairStripes"
	var res StripeRound
	var problems []error
	err := n.dir.Files(ctx, func(_ spindle.UserName, e *spindle.DirEntry) error {
		_, stripes, err := pack.Stripes(e)
		if err != nil || stripes == nil {
			return nil
		}
		res.Files++
		for i, refs := range stripes {
			res.Stripes++
			short, err := n.replica.StripeShort(ctx, refs)
			if err != nil || !short {
				continue // A lookup that did not finish says nothing.
			}
			res.Short++
			r, err := n.replica.RepairStripe(ctx, e.Blocks[i].Ref, refs)
			res.Rebuilt += r.Rebuilt
			res.Moved += r.Fetched + r.Pushed
			if err != nil {
				res.Failed++
				problems = append(problems, fmt.Errorf("%s block %d: %w", e.Name, i, err))
			}
		}
		return ctx.Err()
	})
	if err != nil {
		return res, spindle.E(op, err)
	}
	if len(problems) > 0 {
		return res, spindle.E(op, errors.Join(problems...))
	}
	return res, nil
}
