package client

import (
	"context"
	"errors"
	"sync"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/pack"
)

// Anchors: where the entries a client signs stand.
//
// Every entry names the size of the key cluster's log the client follows
// (dirlog.Entry.KeyAt), so that a key its owner replaced signs nothing
// anchored after the rotation, in any tree (dirlog.HeldKeys); and a put
// of an encrypted file names the head of its tree under which the client
// worked out the readers it wrapped the file key for
// (dirlog.Entry.ReadersAt), so that the sequencer refuses it, with Stale,
// if the Access or Group files deciding them changed since: a reader the
// owner removed gets no key even if an older answer fooled the client.
// The client then works the readers out again and re-wraps the key.

// A signedPos is where a writer signed an entry: its sequence number in
// its tree and its anchor in the key log, or legacy for an entry of the
// first format or one whose signed entry the client has not seen.
type signedPos struct {
	seq, keyAt int64
	legacy     bool
}

// entryPos returns where e was signed.
func entryPos(e *dirlog.Entry) signedPos {
	return signedPos{seq: e.Seq, keyAt: e.KeyAt, legacy: e.Legacy}
}

// keyLogSize returns the size of the key log the client follows, which
// its entries are anchored at. A client without a key log takes the
// node's word, as it does for key records (see catchUpKeyLog).
func (c *Client) keyLogSize() int64 {
	if c.keyLog == nil {
		return c.nodeKeyLog.Load()
	}
	return c.keyLog.chk().Tree().N
}

// catchUpKeyLog brings the key log the client follows up to the newest
// head the node has, by proving the client's own record against it; a
// client without a key log asks the node for the head and takes the size
// it states, unchecked.
func (c *Client) catchUpKeyLog(ctx context.Context) error {
	if c.keyLog != nil {
		_, err := c.provedRecord(ctx, c.user)
		return err
	}
	resp, err := call[wire.KeyHeadRequest, wire.KeyHeadResponse](ctx, c.svc, wire.KeyHead, "", &wire.KeyHeadRequest{})
	if err != nil {
		return err
	}
	hi, err := keylog.ParseHead(resp.Head)
	if err != nil {
		return err
	}
	for {
		n := c.nodeKeyLog.Load()
		if hi.N <= n || c.nodeKeyLog.CompareAndSwap(n, hi.N) {
			return nil
		}
	}
}

// A readersAtKey keys the readersAt a context carries.
type readersAtKey struct{}

// readersAt collects, while the readers of a new file are worked out,
// the oldest head of the file's tree that an answer used was proved
// against: the entry's ReadersAt.
type readersAt struct {
	tree spindle.UserName
	mu   sync.Mutex
	seq  int64 // -1 until a head is noted.
}

// withReadersAt returns a context in which proved answers about tree
// note their heads in the returned readersAt.
func withReadersAt(ctx context.Context, tree spindle.UserName) (context.Context, *readersAt) {
	r := &readersAt{tree: tree, seq: -1}
	return context.WithValue(ctx, readersAtKey{}, r), r
}

// noteProved notes, in the readersAt ctx carries if any, that an answer
// was proved against h.
func noteProved(ctx context.Context, h *dirlog.Head) {
	r, _ := ctx.Value(readersAtKey{}).(*readersAt)
	if r == nil || h == nil || h.User != r.tree {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seq < 0 || h.Seq < r.seq {
		r.seq = h.Seq
	}
}

// at returns the oldest head noted, -1 if none.
func (r *readersAt) at() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// noteAnchors remembers, for the tree of the proved entries es, the
// highest anchor among them and the sequence number of its entry, as the
// highest seen so far. p.mu is held.
//
// A tree's anchors never decrease, so an entry of the tree after that one
// and anchored below it (or unanchored, of the first format) is not one
// an honest log holds: behind reports it, and a reader then takes no
// replaced key's signature for it. This narrows what HeldKeys leaves to a
// dir host colluding with a thief: a reader that has seen an entry of the
// tree anchored after the rotation refuses a backdated one written after
// it, though the reader never sees the log.
func (p *putSeqs) noteAnchors(es []*dirlog.Entry) {
	for _, e := range es {
		tree := e.Tree()
		if e.Legacy || tree == "" {
			continue
		}
		if p.anchors == nil || len(p.anchors) >= maxPutSeqs {
			p.anchors = make(map[spindle.UserName]signedPos)
		}
		if a, ok := p.anchors[tree]; !ok || e.KeyAt > a.keyAt || e.KeyAt == a.keyAt && e.Seq < a.seq {
			p.anchors[tree] = entryPos(e)
		}
	}
}

// behind reports whether an entry of tree signed at is later in the tree
// than an entry the client saw proved, and anchored below it.
func (p *putSeqs) behind(tree spindle.UserName, at signedPos) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.anchors[tree]
	return ok && at.seq > a.seq && (at.legacy && a.keyAt > 0 || at.keyAt < a.keyAt)
}

// maxRewraps bounds how often a put whose readers changed under it is
// re-wrapped and sent again.
const maxRewraps = 3

// putFile appends the entry of a packed file at name whose key is wrapped
// for the readers worked out at readersAt (-1: none looked up). If the
// sequencer refuses it as Stale (its readers' Access or Group files have
// changed), the readers are worked out again, the key re-wrapped for
// exactly them, and the entry sent again.
func (c *Client) putFile(ctx context.Context, entry *spindle.DirEntry, readersAt int64) (*spindle.DirEntry, error) {
	for try := 0; ; try++ {
		e, err := c.dir.PutAt(ctx, entry, readersAt)
		if err == nil || !errors.Is(err, spindle.Stale) || entry.Packing != spindle.EEPack || try == maxRewraps {
			return e, err
		}
		c.forgetReaders()
		keys, public, at, rerr := c.putReaders(ctx, entry.Name)
		if rerr != nil {
			return nil, rerr
		}
		if public {
			keys = append(keys, pack.AllKey())
		}
		pd, rerr := pack.Share(entry, c.keys, keys)
		if rerr != nil {
			return nil, rerr
		}
		entry.Packdata, readersAt = pd, at
	}
}
