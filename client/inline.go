package client

import (
	"bytes"
	"context"
	"slices"
	"sync"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// Blocks with entries. A small file is one small block, and sending it
// apart from its entry costs a put a round trip, and a get another: over
// a far link, the better part of the command. So a node that says it
// takes them (wire.AuthResponse.TakesBlocks) gets the blocks of a small
// file with its entry, in the request that appends it, and hands them
// back with the entry a lookup finds. Nothing is checked less: the node
// stores the blocks as a block put would, before it appends the entry;
// and a reader checks each block it is handed, as one it fetched,
// against the reference in the entry the writer signed (pack.Reader). A
// file with more or larger blocks, a put whose entry goes to another dir
// host, and an older node take the blocks apart, as before.

// A heldBlocks holds the blocks of a put that go with its entry.
type heldBlocks struct {
	mu     sync.Mutex
	refs   []spindle.Ref
	blocks [][]byte
	over   bool // A block did not fit: all go apart.
}

// holding returns put, a pack.PutFunc, with the blocks of a small file
// held in h, to go with its entry, while they fit the bounds of
// wire.MaxInlineBlocks and wire.MaxInlineBlock; once one does not, the
// blocks held go to put, and so does every block after.
func (h *heldBlocks) holding(put func(ctx context.Context, ref spindle.Ref, data []byte) error) func(ctx context.Context, ref spindle.Ref, data []byte) error {
	return func(ctx context.Context, ref spindle.Ref, data []byte) error {
		h.mu.Lock()
		if !h.over && len(h.blocks) < wire.MaxInlineBlocks && len(data) <= wire.MaxInlineBlock {
			h.refs, h.blocks = append(h.refs, ref), append(h.blocks, bytes.Clone(data))
			h.mu.Unlock()
			return nil
		}
		h.over = true
		refs, blocks := h.refs, h.blocks
		h.refs, h.blocks = nil, nil
		h.mu.Unlock()
		for i, b := range blocks {
			if err := put(ctx, refs[i], b); err != nil {
				return err
			}
		}
		return put(ctx, ref, data)
	}
}

// A heldRegistry holds the blocks of the puts under way that go with
// their entries, by reference: puts made at once go to the node in one
// batch (serialDir), whichever put's call sends it.
type heldRegistry struct {
	mu     sync.Mutex
	blocks map[spindle.Ref][]byte
	store  refPutter // Puts blocks through the block protocol.
}

// add holds h's blocks until remove.
func (r *heldRegistry) add(h *heldBlocks) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blocks == nil {
		r.blocks = map[spindle.Ref][]byte{}
	}
	for i, ref := range h.refs {
		r.blocks[ref] = h.blocks[i]
	}
}

// remove drops h's blocks.
func (r *heldRegistry) remove(h *heldBlocks) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ref := range h.refs {
		delete(r.blocks, ref)
	}
}

// take returns the blocks held for es that may go with them, and puts the
// others held for them through the block protocol first: all of them if
// inline is false (the entries do not go to the client's node), else
// those beyond wire.MaxInlineBlocks.
func (r *heldRegistry) take(ctx context.Context, es []*dirlog.Entry, inline bool) ([][]byte, error) {
	if r == nil {
		return nil, nil
	}
	var refs []spindle.Ref
	var blocks [][]byte
	r.mu.Lock()
	for _, e := range es {
		for _, b := range e.Entry.Blocks {
			if data, ok := r.blocks[b.Ref]; ok && !slices.Contains(refs, b.Ref) {
				refs, blocks = append(refs, b.Ref), append(blocks, data)
			}
		}
	}
	r.mu.Unlock()
	n := 0
	if inline {
		n = min(len(blocks), wire.MaxInlineBlocks)
	}
	for i := n; i < len(blocks); i++ {
		if err := r.store.PutRef(ctx, refs[i], blocks[i]); err != nil {
			return nil, err
		}
	}
	return blocks[:n], nil
}

// A lookupBlocks receives the blocks that come with the entries looked
// up under a context that carries it, for the reads that follow.
type lookupBlocks struct {
	mu     sync.Mutex
	blocks map[spindle.Ref][]byte
	errs   map[spindle.Ref]error // What the node said a get of a block would answer.
}

type lookupBlocksKey struct{}

// withLookupBlocks returns ctx asking for the blocks of the entries
// looked up under it, and where they go.
func withLookupBlocks(ctx context.Context) (context.Context, *lookupBlocks) {
	lb := &lookupBlocks{blocks: map[spindle.Ref][]byte{}, errs: map[spindle.Ref]error{}}
	return context.WithValue(ctx, lookupBlocksKey{}, lb), lb
}

// lookupBlocksOf returns where the blocks that come with a lookup under
// ctx go, or nil if none are asked for.
func lookupBlocksOf(ctx context.Context) *lookupBlocks {
	lb, _ := ctx.Value(lookupBlocksKey{}).(*lookupBlocks)
	return lb
}

// keep keeps the blocks that came with e, in the order of its block list,
// and blockErr, the error the node says a get of the block after them
// would answer (see wire.DirLookupResponse.BlockErr).
func (lb *lookupBlocks) keep(e *spindle.DirEntry, blocks [][]byte, blockErr []byte) {
	if e == nil {
		return
	}
	lb.mu.Lock()
	defer lb.mu.Unlock()
	n := min(len(blocks), len(e.Blocks), wire.MaxInlineBlocks)
	for i, data := range blocks[:n] {
		lb.blocks[e.Blocks[i].Ref] = data
	}
	if len(blockErr) > 0 && n < len(e.Blocks) {
		lb.errs[e.Blocks[n].Ref] = spindle.UnmarshalError(blockErr)
	}
}

// fetcher returns get, with the blocks kept served first, each once (the
// reader checks them as it checks what get returns).
func (lb *lookupBlocks) fetcher(get func(context.Context, spindle.Ref) ([]byte, error)) func(context.Context, spindle.Ref) ([]byte, error) {
	return func(ctx context.Context, ref spindle.Ref) ([]byte, error) {
		lb.mu.Lock()
		data, ok := lb.blocks[ref]
		err := lb.errs[ref]
		delete(lb.blocks, ref)
		delete(lb.errs, ref)
		lb.mu.Unlock()
		if ok {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		return get(ctx, ref)
	}
}
