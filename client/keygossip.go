package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
)

// Gossip of the key log's heads.
//
// Whoever holds a majority of the key cluster's note keys can show one
// client one log and another client another, and each alone sees a log
// that never contradicts itself. So clients compare: a client publishes,
// through its node, the newest head of the key log it has verified, under
// that head's tree size in the DHT, and gets back the heads of that size
// others published (see package node, keygossip.go). A head signed by a
// majority of the members of the configuration it names (as the client
// checks heads, witnesses aside) with another tree hash than the client's
// own is a fork, proved by the two heads alone: it is saved as key-fork
// evidence (spin audit -evidence checks it) and reported as an Integrity
// error. Its own head, published beside the other, lets the other client
// find the fork too. A published head that is not valid proves nothing:
// it is logged and ignored.
//
// The client gossips when its key log has advanced to a size it has not
// gossiped (after a key lookup), within keyGossipBudget, and on spin
// audit. A key proof asked for with Gossip comes with the gossip of its
// head, done by the node as it would do it for a gossip request of the
// client's; otherwise a put or a get gossips beside its next request (see
// gossipLater). One gossip costs one round trip to the node, which reads one DHT
// record and writes one (each bounded by the node), and one verification
// of each head found.

// keyGossipBudget bounds the gossip that a lookup does when the key log
// advanced: a slow DHT delays no lookup by more.
const keyGossipBudget = 2 * time.Second

// A GossipReport is what GossipKeyHead found.
type GossipReport struct {
	Size    int64   // Records of the tree whose heads were compared.
	Agree   int     // Heads published that agree with the client's (its own among them, once published).
	Ignored []error // Why each head that is not valid was ignored.
}

// GossipKeyHead publishes the newest head of the key log the client has
// verified and compares it with the heads of its size that others
// published. A fork is an Integrity error carrying the saved evidence
// (Config.Evidence); a published head that is not valid is logged,
// reported in Ignored and otherwise ignored. A client without a key log,
// or whose key log is empty, has nothing to gossip (Invalid).
func (c *Client) GossipKeyHead(ctx context.Context) (*GossipReport, error) {
	const op spindle.Op = "client.GossipKeyHead"
	if c.keyLog == nil {
		return nil, spindle.E(op, spindle.Invalid, "this client keeps no key log")
	}
	chk := c.keyLog.chk()
	head := chk.Head()
	if len(head) == 0 || chk.Tree().N == 0 {
		return nil, spindle.E(op, spindle.Invalid, "the key log holds no head yet")
	}
	rep := &GossipReport{Size: chk.Tree().N}
	resp, err := call[wire.KeyGossipRequest, wire.KeyGossipResponse](ctx, c.svc, wire.KeyGossip, "", &wire.KeyGossipRequest{Head: head})
	if err != nil {
		return rep, spindle.E(op, err)
	}
	if err := c.compareGossip(chk, rep, resp.Heads); err != nil {
		return rep, spindle.E(op, err)
	}
	return rep, nil
}

// compareGossip compares heads, those of rep.Size published, with the
// head of chk, as GossipKeyHead describes, and fills in rep.
func (c *Client) compareGossip(chk *keylog.Checker, rep *GossipReport, heads [][]byte) error {
	if len(heads) > keylog.MaxGossipHeads {
		heads = heads[:keylog.MaxGossipHeads]
	}
	var fork error
	for i, h := range heads {
		hi, err := chk.Compare(h)
		switch {
		case err == nil && hi.N != rep.Size:
			err = spindle.E(spindle.Invalid, fmt.Sprintf("a head of %d records, asked for %d", hi.N, rep.Size))
		case err == nil:
			rep.Agree++
			continue
		}
		var fe *keylog.ForkError
		if errors.As(err, &fe) {
			if fork == nil {
				fork = c.keepKeyFork(err)
			}
			continue
		}
		c.log.Warn("ignoring a key-log head published in the DHT", "n", i+1, "err", oneLine(err.Error()))
		rep.Ignored = append(rep.Ignored, err)
	}
	return fork
}

// gossipOnAdvance gossips the key log's head if the key log has advanced
// to a size this client has not gossiped, within keyGossipBudget. Only a
// fork is an error; a node or DHT that does not answer is logged.
func (c *Client) gossipOnAdvance(ctx context.Context) error {
	n := c.keyLog.chk().Tree().N
	last := c.gossiped.Load()
	if n <= last || !c.gossiped.CompareAndSwap(last, n) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, keyGossipBudget)
	defer cancel()
	_, err := c.GossipKeyHead(ctx)
	if err != nil && !errors.Is(err, spindle.Integrity) {
		c.log.Debug("key-log gossip", "err", oneLine(err.Error()))
		return nil
	}
	return err
}

// A gossipLater holds the gossip that lookups made under a context from
// deferGossip started in the background, so that a command's next request
// goes out beside it, in the same round trip, and not after it. The
// command waits for it (wait) before it lets anything looked up act: a put
// before it appends the entry whose wrapped keys the records chose (the
// blocks, of no use without it, go out meanwhile), a get before it hands
// the file back.
type gossipLater struct {
	mu   sync.Mutex
	runs []chan error
}

type gossipLaterKey struct{}

// deferGossip returns ctx carrying a new gossipLater.
func deferGossip(ctx context.Context) (context.Context, *gossipLater) {
	g := &gossipLater{}
	return context.WithValue(ctx, gossipLaterKey{}, g), g
}

// start runs fn in the background as a gossip wait will wait for.
func (g *gossipLater) start(fn func() error) {
	ch := make(chan error, 1)
	g.mu.Lock()
	g.runs = append(g.runs, ch)
	g.mu.Unlock()
	go func() { ch <- fn() }()
}

// wait waits for the gossip started so far and returns the first error.
func (g *gossipLater) wait() error {
	g.mu.Lock()
	runs := g.runs
	g.runs = nil
	g.mu.Unlock()
	var first error
	for _, ch := range runs {
		if err := <-ch; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// gossipWithProof takes the gossip that came with a key proof whose head
// was of size n (see wire.KeyProofRequest.Gossip), heads, as the gossip
// gossipOnAdvance would do now: if the key log is of size n and this
// client has not gossiped it. It reports whether it took it. Only a fork
// is an error.
func (c *Client) gossipWithProof(n int64, heads [][]byte) (bool, error) {
	chk := c.keyLog.chk()
	if chk.Tree().N != n {
		return false, nil
	}
	last := c.gossiped.Load()
	if n <= last {
		return true, nil
	}
	if !c.gossiped.CompareAndSwap(last, n) {
		return false, nil
	}
	rep := &GossipReport{Size: n}
	if err := c.compareGossip(chk, rep, heads); err != nil {
		return true, spindle.E(spindle.Op("client.GossipKeyHead"), err)
	}
	return true, nil
}

// gossipAfterLookup gossips as gossipOnAdvance does: in the background if
// ctx comes from deferGossip, else before it returns.
func (c *Client) gossipAfterLookup(ctx context.Context) error {
	if g, ok := ctx.Value(gossipLaterKey{}).(*gossipLater); ok {
		g.start(func() error { return c.gossipOnAdvance(ctx) })
		return nil
	}
	return c.gossipOnAdvance(ctx)
}
