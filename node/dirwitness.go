package node

// Dir witnesses.
//
// A user's key record may ask (spindle.User.DirQuorum) that each head of
// the user's tree that proves an answer carry the cosignatures of that
// many of the user's dir hosts other than the one that signed it (see
// dirlog.Head.Cosigs). Those hosts replayed the log themselves, so they
// check what a reader that never saw the tree cannot: that the head's map
// root and log root are the ones its log gives. They already hold the
// tree's metadata; a witness from outside would learn its names.
//
// The node that answers a lookup, glob, which-access or dir.head asks the user's
// other dir hosts, all at once, to cosign the answer's head (dir.cosign),
// and serves the head once DirQuorum of them have; a host that is down
// costs nothing while the others make the quorum, and the wait is bounded
// by cosignTimeout. The cosigned head is kept, one per user, so reads
// with no write between them are served with it at no cost. A host asked
// to cosign checks that the asker signed the head and is a dir host of
// the user, pulls the log from it first if behind, and cosigns only a
// head whose sequence, hash, map root and log root are its own; it
// refuses any other with Integrity, and logs it.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// cosignTimeout bounds the gathering of a head's cosignatures.
const cosignTimeout = 5 * time.Second

// cosignedHeads are the cosigned heads a node serves, the newest of each
// user's log. The zero value is ready.
type cosignedHeads struct {
	mu    sync.Mutex
	heads map[spindle.UserName]*cosignedHead
}

// A cosignedHead is a head whose cosignatures are gathered, or being
// gathered until done is closed.
type cosignedHead struct {
	digest string
	done   chan struct{}
	head   *dirlog.Head // With its cosignatures; nil if err.
	err    error
}

// witnessed adds to *hp, a head this node signed to prove an answer, the
// cosignatures its user's key record asks for (DirQuorum), gathering them
// if they are not kept. A head of a user whose record asks for none, or
// that cannot be looked up, is left alone: the reader decides.
func (n *Node) witnessed(ctx context.Context, hp **dirlog.Head) error {
	h := *hp
	if h == nil || h.Host != n.host.ID().String() {
		return nil
	}
	u, err := n.record(ctx, h.User)
	if err != nil || u.DirQuorum <= 0 {
		return nil
	}
	hosts, me := dirHostPeers(u, n.host.ID())
	if me < 0 {
		return nil
	}
	c, err := n.cosigned.get(ctx, n, h, u.DirQuorum, hosts, me)
	if err != nil {
		return err
	}
	*hp = c
	return nil
}

// get returns h with quorum cosignatures by the hosts other than hosts[me],
// kept or gathered now. Concurrent calls for one head share one gathering.
func (w *cosignedHeads) get(ctx context.Context, n *Node, h *dirlog.Head, quorum int, hosts []peer.AddrInfo, me int) (*dirlog.Head, error) {
	digest := string(h.Digest())
	// A second round only if the head kept has fewer cosignatures than
	// asked for: gathered under a record that asked for fewer.
	for range 2 {
		c := w.start(n, h, digest, quorum, hosts, me)
		select {
		case <-c.done:
		case <-ctx.Done():
			return nil, spindle.E(spindle.Op("node.Cosign"), h.User, spindle.IO, ctx.Err())
		}
		if c.err != nil {
			return nil, c.err
		}
		if len(c.head.Cosigs) >= quorum {
			out := *c.head
			out.Cosigs = append([]dirlog.Cosig(nil), c.head.Cosigs...)
			return &out, nil
		}
		w.mu.Lock()
		if w.heads[h.User] == c {
			delete(w.heads, h.User)
		}
		w.mu.Unlock()
	}
	return nil, spindle.E(spindle.Op("node.Cosign"), h.User, spindle.Transient, "the dir quorum of the key record changed while the head's cosignatures were gathered")
}

// start returns the gathering of the cosignatures of the head whose
// digest is digest, under way or done, starting it if there is none.
// c.head and c.err are set before c.done is closed.
func (w *cosignedHeads) start(n *Node, h *dirlog.Head, digest string, quorum int, hosts []peer.AddrInfo, me int) *cosignedHead {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c := w.heads[h.User]; c != nil && c.digest == digest {
		return c
	}
	if w.heads == nil || len(w.heads) >= maxMirrored {
		w.heads = make(map[spindle.UserName]*cosignedHead)
	}
	c := &cosignedHead{digest: digest, done: make(chan struct{})}
	w.heads[h.User] = c
	n.bg.Go(func() {
		c.head, c.err = n.gatherCosigs(h, quorum, hosts, me)
		if c.err != nil {
			w.mu.Lock()
			if w.heads[h.User] == c {
				delete(w.heads, h.User) // The next read asks again.
			}
			w.mu.Unlock()
		}
		close(c.done)
	})
	return c
}

// gatherCosigs asks every dir host but hosts[me] at once to cosign h, and
// returns h with the first quorum valid cosignatures, or an error of kind
// IO once too few can come or cosignTimeout has passed.
func (n *Node) gatherCosigs(h *dirlog.Head, quorum int, hosts []peer.AddrInfo, me int) (*dirlog.Head, error) {
	const op spindle.Op = "node.Cosign"
	ctx, cancel := context.WithTimeout(n.ctx, cosignTimeout)
	defer cancel()
	data, err := encodeRequest(wire.DirCosign, &wire.DirCosignRequest{Head: h})
	if err != nil {
		return nil, spindle.E(op, err)
	}
	type result struct {
		c   dirlog.Cosig
		err error
	}
	results := make(chan result, len(hosts))
	var wg sync.WaitGroup
	for i, to := range hosts {
		if i == me {
			continue
		}
		wg.Go(func() {
			c, err := n.askCosign(ctx, h, to, hosts, data)
			results <- result{c, err}
		})
	}
	out := *h
	out.Cosigs = nil
	var errs []string
	for asked := len(hosts) - 1; asked > 0 && len(out.Cosigs) < quorum; asked-- {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err.Error())
			continue
		}
		out.Cosigs = append(out.Cosigs, r.c)
	}
	cancel() // The hosts that did not answer yet are not waited for.
	wg.Wait()
	if len(out.Cosigs) < quorum {
		return nil, spindle.E(op, h.User, spindle.IO, fmt.Sprintf("%d of the %d cosignatures the key record asks for on the head of sequence %d: %s", len(out.Cosigs), quorum, h.Seq, strings.Join(errs, "; ")))
	}
	return &out, nil
}

// askCosign asks the dir host to to cosign h, and checks its answer.
func (n *Node) askCosign(ctx context.Context, h *dirlog.Head, to peer.AddrInfo, hosts []peer.AddrInfo, data []byte) (dirlog.Cosig, error) {
	out, err := n.callPeer(ctx, to, data)
	if err != nil {
		return dirlog.Cosig{}, fmt.Errorf("dir host %s: %w", to.ID, err)
	}
	resp, err := wire.DecodeAnswer[wire.DirCosignResponse](out)
	if err != nil {
		return dirlog.Cosig{}, fmt.Errorf("dir host %s: %w", to.ID, err)
	}
	c := resp.Cosig
	if c == nil || c.Host != to.ID.String() {
		return dirlog.Cosig{}, fmt.Errorf("dir host %s sent no cosignature of its own", to.ID)
	}
	if err := listedHosts(hosts).VerifyHead(h.User, c.Host, c.HostKey, h.CosignDigest(c.Host), c.Sig); err != nil {
		return dirlog.Cosig{}, fmt.Errorf("dir host %s sent a cosignature that does not verify: %w", to.ID, err)
	}
	return *c, nil
}

// serveDirCosign answers dir.cosign: it cosigns a head of a log this node
// mirrors, for the dir host that signed it, if the head is this node's own
// replay of the log at that sequence.
func (n *Node) serveDirCosign(ctx context.Context, c *caller, req *wire.DirCosignRequest) (*wire.DirCosignResponse, error) {
	const op spindle.Op = "node.Cosign"
	h := req.Head
	if h == nil {
		return nil, spindle.E(op, spindle.Invalid, "no head to cosign")
	}
	owner, err := spindle.CleanUser(h.User)
	if err != nil || owner != h.User {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("head of %q, not a canonical user name", h.User))
	}
	u, err := n.record(ctx, owner)
	if err != nil {
		return nil, spindle.E(op, owner, err)
	}
	hosts, me := dirHostPeers(u, n.host.ID())
	from := -1
	for i, p := range hosts {
		if p.ID == c.remote {
			from = i
		}
	}
	switch {
	case me < 0:
		return nil, spindle.E(op, owner, spindle.Permission, "this node is not a dir host of "+string(owner))
	case from < 0 || h.Host != c.remote.String():
		return nil, spindle.E(op, owner, spindle.Permission, fmt.Sprintf("peer %s asks to cosign a head signed by %s: only a dir host of %s asks, for a head it signed", c.remote, h.Host, owner))
	case !n.writers.admits(owner):
		return nil, spindle.E(op, owner, spindle.Permission, "this node does not admit "+string(owner)+" as a writer: it holds no log to check the head against")
	}
	if err := h.Verify(listedHosts(hosts)); err != nil {
		return nil, spindle.E(op, err)
	}
	mine, err := n.dir.Head(ctx, owner)
	if err != nil {
		return nil, spindle.E(op, owner, err)
	}
	if mine.Seq < h.Seq {
		// Behind (a read right after a write): catch up from the signer.
		if err := n.mirrors.pull(ctx, owner, hosts[from]); err != nil {
			return nil, spindle.E(op, owner, fmt.Errorf("cannot catch up with dir host %s to check its head of sequence %d: %w", c.remote, h.Seq, err))
		}
		if mine, err = n.dir.Head(ctx, owner); err != nil {
			return nil, spindle.E(op, owner, err)
		}
	}
	if mine.Seq != h.Seq {
		return nil, spindle.E(op, owner, spindle.Transient, fmt.Sprintf("the head is of sequence %d, this node's log is at %d: only a head of the log as it stands here is checked", h.Seq, mine.Seq))
	}
	if mine.Hash != h.Hash || mine.Root != h.Root || !h.HasLogRoot() || mine.HasLogRoot() && mine.LogRoot != h.LogRoot {
		err := spindle.E(op, owner, spindle.Integrity, fmt.Sprintf("dir host %s signs, at sequence %d, hash %s, map root %s and log root %s; the log this node replayed gives %s, %s and %s: not cosigned", h.Host, h.Seq, h.Hash, h.Root, h.LogRoot, mine.Hash, mine.Root, mine.LogRoot))
		n.log.Warn("dir head refused for cosigning", "user", owner, "signer", h.Host, "seq", h.Seq, "head", fmt.Sprintf("%x", h.Marshal()), "err", err)
		return nil, err
	}
	cs, err := h.Cosign(n.answers)
	if err != nil {
		return nil, spindle.E(op, owner, err)
	}
	return &wire.DirCosignResponse{Cosig: &cs}, nil
}
