package client

import (
	"context"
	"errors"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/shard"
	"spindle.dev/pack"
)

// Erasure-coded puts and gets.
//
// A node started with an erasure code (spin node -ec 4+2) names it when
// the client signs in. Put then splits each packed block into K+M shards
// itself (package blocks/shard), sends each to the node as a block of its
// own, which places it once and apart from its siblings, and records the
// code and the shard refs in the entry under the writer's signature (pack
// packdata version 2). A reader needs no setting: the entry says how its
// blocks are stored, and getStripe decodes each block from the first K
// shards that arrive through the node.

// setErasure records the erasure code the node asked for; text is empty
// for whole blocks, and a code the client cannot use is taken as none,
// since whole blocks are always taken.
func (c *Client) setErasure(text string) {
	if text == "" {
		c.erasure.Store(nil)
		return
	}
	sc, err := shard.ParseScheme(text)
	if err != nil {
		c.log.Warn("node asks for an erasure code this client cannot use; putting whole blocks", "code", text, "err", err)
		c.erasure.Store(nil)
		return
	}
	c.erasure.Store(&sc)
}

// stripePut returns a pack.StripeFunc that splits each block under sc and
// puts its shards through pipe.
func stripePut(sc shard.Scheme, pipe *putPipe) pack.StripeFunc {
	return func(ctx context.Context, ref spindle.Ref, data []byte) ([]spindle.Ref, error) {
		shards, err := shard.Split(data, sc)
		if err != nil {
			return nil, err
		}
		refs := make([]spindle.Ref, len(shards))
		for i, sh := range shards {
			refs[i] = pack.RefOf(sh)
			if err := pipe.put(ctx, refs[i], sh); err != nil {
				return nil, err
			}
		}
		return refs, nil
	}
}

// getStripe is a pack.GetStripeFunc: it fetches the shards through the
// node, checks each against its ref, and decodes from the first K. The
// node passes on what other nodes send unchecked (the reader checks), so
// a shard whose bytes are wrong is asked for again, saying so, and the
// node checks it that time: a lying holder of a shard is bypassed.
func (c *Client) getStripe(ctx context.Context, ref spindle.Ref, shards []spindle.Ref) ([]byte, error) {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, spindle.E(spindle.Integrity, err)
	}
	get := c.fetcher()
	return shard.Gather(ctx, d, shards, func(ctx context.Context, r spindle.Ref) ([]byte, error) {
		data, err := get(ctx, r)
		if err != nil {
			return nil, err
		}
		cerr := blocks.Check(r, data)
		if cerr == nil || c.refetch == nil {
			return data, cerr
		}
		if data, err = c.refetch(ctx, r); err != nil {
			return nil, errors.Join(cerr, err)
		}
		if err := blocks.Check(r, data); err != nil {
			return nil, err
		}
		return data, nil
	})
}
