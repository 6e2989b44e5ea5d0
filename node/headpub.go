package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/routing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/p2p"
)

// Published heads.
//
// After appends to a log it hosts, a node publishes the log's signed head
// in its DHT under HeadNamespace, so that a reader who reaches the tree
// through another host, or a mirror, learns of a newer head than that host
// served: a host that serves an older head than the published one rolled
// the tree back. Publishing is batched: a log is published at most once
// every publishEvery, with the newest head at that moment.
//
// Every DHT node checks a record when it is stored and when it is read
// (headValidator): the key names the head's user, the head decodes, and
// its signature verifies with the key of the peer it names. That needs no
// lookup and never blocks. Whether that peer is one of the user's dir
// hosts needs the user's key record: the validator refuses a head whose
// signer the record does not list if the node has the record at hand
// (dirHostCache); if not, it accepts the head and has the record looked
// up in the background, so that the next check of that head (at the next
// read or store) refuses it. A client checks the listing itself, as it
// checks every head it is given, before it believes a published head.
// Records expire from the DHT after two days: a host publishes its heads
// again every republishEvery. Among
// valid records the one with the highest sequence number wins (then the
// latest signing time, then the lowest bytes, so that every node chooses
// the same). A record for a lower sequence never replaces a higher one,
// on any node that already holds the higher.
//
// What this costs in privacy: any peer of the DHT can read how far a
// user's log has grown and when it last changed (not what changed, nor
// who wrote it).

// HeadNamespace is the DHT namespace of published heads.
const HeadNamespace = "spindle-head"

// HeadKey returns the DHT key of user's published head.
func HeadKey(user spindle.UserName) string { return "/" + HeadNamespace + "/" + string(user) }

// publishEvery is the least time between two publications of one log's
// head.
const publishEvery = 250 * time.Millisecond

// publishTimeout bounds one publication.
const publishTimeout = 30 * time.Second

// republishEvery is how often a host publishes again the heads it has
// published, before the DHT forgets them (after 48 hours).
const republishEvery = 6 * time.Hour

// headValidator is the DHT's record.Validator for HeadNamespace.
type headValidator struct {
	// hosts, if set, returns the peer IDs of user's dir hosts, and
	// whether they are known; it must not block.
	hosts func(user spindle.UserName) ([]string, bool)
}

// Validate checks that value is a head of the user key names, signed by
// the peer it names, and, if the user's dir hosts are known, that the
// peer is one of them.
func (v headValidator) Validate(key string, value []byte) error {
	_, err := v.check(key, value)
	return err
}

func (v headValidator) check(key string, value []byte) (*dirlog.Head, error) {
	h, err := decodeHeadRecord(key, value)
	if err != nil || v.hosts == nil {
		return h, err
	}
	hosts, known := v.hosts(h.User)
	if known && !slices.Contains(hosts, h.Host) {
		return nil, spindle.E(spindle.Op("node.HeadRecord"), spindle.Invalid, h.User, fmt.Sprintf("published head of sequence %d is signed by %s, not a dir host of %s (the key record names %d)", h.Seq, h.Host, h.User, len(hosts)))
	}
	return h, nil
}

// Select returns the index of the best of vals: the valid head with the
// highest sequence number (then the latest time, then the lowest bytes).
func (v headValidator) Select(key string, vals [][]byte) (int, error) {
	best, bestHead := -1, (*dirlog.Head)(nil)
	for i, val := range vals {
		h, err := v.check(key, val)
		if err != nil {
			continue
		}
		if best < 0 || betterHead(h, val, bestHead, vals[best]) {
			best, bestHead = i, h
		}
	}
	if best < 0 {
		return 0, spindle.E(spindle.Op("node.headValidator.Select"), spindle.Invalid, fmt.Sprintf("none of %d records of %s is a valid head", len(vals), key))
	}
	return best, nil
}

// betterHead reports whether head a (encoded as av) wins over b (bv).
func betterHead(a *dirlog.Head, av []byte, b *dirlog.Head, bv []byte) bool {
	if a.Seq != b.Seq {
		return a.Seq > b.Seq
	}
	if a.Time != b.Time {
		return a.Time > b.Time
	}
	return bytes.Compare(av, bv) < 0
}

// decodeHeadRecord decodes and checks a published head stored under key.
// Errors are Invalid, or Integrity for a signature that does not verify.
func decodeHeadRecord(key string, value []byte) (*dirlog.Head, error) {
	const op spindle.Op = "node.HeadRecord"
	user, ok := strings.CutPrefix(key, "/"+HeadNamespace+"/")
	if !ok || user == "" {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("key %q is not in namespace /%s/", key, HeadNamespace))
	}
	h, err := dirlog.UnmarshalHead(value)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if string(h.User) != user {
		return nil, spindle.E(op, spindle.Invalid, h.User, fmt.Sprintf("head of %s published under the key of %s", h.User, user))
	}
	if h.Host == "" || len(h.Sig) == 0 {
		return nil, spindle.E(op, spindle.Invalid, h.User, "published head is not signed by a dir host")
	}
	if err := p2p.VerifyPeerSig(h.Host, h.HostKey, h.Digest(), h.Sig); err != nil {
		return nil, spindle.E(op, spindle.Integrity, h.User, fmt.Errorf("published head of sequence %d: %v", h.Seq, err))
	}
	return h, nil
}

// headPub is what the node has yet to publish.
type headPub struct {
	mu    sync.Mutex
	dirty map[spindle.UserName]bool
	done  map[spindle.UserName]int64 // Sequence last published.
	kick  chan struct{}
}

// headChanged notes that user's log grew, to be published.
func (n *Node) headChanged(user spindle.UserName) {
	p := &n.heads
	p.mu.Lock()
	if p.dirty == nil {
		p.dirty = make(map[spindle.UserName]bool)
	}
	p.dirty[user] = true
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// publishLoop publishes the heads of the logs that grew, at most once
// per publishEvery, until the node closes.
func (n *Node) publishLoop() {
	p := &n.heads
	again := time.NewTicker(republishEvery)
	defer again.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-p.kick:
		case <-again.C:
			// Publish again every head published, even if unchanged.
			p.mu.Lock()
			for u := range p.done {
				if p.dirty == nil {
					p.dirty = make(map[spindle.UserName]bool)
				}
				p.dirty[u] = true
				p.done[u] = 0
			}
			p.mu.Unlock()
		}
		p.mu.Lock()
		users := p.dirty
		p.dirty = nil
		p.mu.Unlock()
		for u := range users {
			n.publishHead(u)
		}
		n.gossipWitnessHead()
		t := time.NewTimer(publishEvery)
		select {
		case <-n.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// publishHead publishes the current signed head of user's log. A node
// that reaches no peer keeps the record itself; failures are logged and
// the next append tries again.
func (n *Node) publishHead(user spindle.UserName) {
	d := n.DHT()
	if d == nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, publishTimeout)
	defer cancel()
	h, err := n.dir.Head(ctx, user)
	if err != nil || h.Seq == 0 || h.Host == "" {
		return
	}
	p := &n.heads
	p.mu.Lock()
	last := p.done[user]
	p.mu.Unlock()
	if h.Seq <= last {
		return
	}
	if err := d.PutValue(ctx, HeadKey(user), h.Marshal()); err != nil {
		n.log.Debug("cannot publish head", "user", user, "seq", h.Seq, "err", oneLine(err.Error()))
		return
	}
	p.mu.Lock()
	if p.done == nil {
		p.done = make(map[spindle.UserName]int64)
	}
	p.done[user] = max(p.done[user], h.Seq)
	p.mu.Unlock()
	n.log.Debug("published head", "user", user, "seq", h.Seq)
}

// PublishedHead returns the newest head of user's log published in the
// DHT, checked as every DHT node checks it (not whether its signer is one
// of user's dir hosts: the caller checks that against the key record).
// NotExist if none is found.
func (n *Node) PublishedHead(ctx context.Context, user spindle.UserName) (*dirlog.Head, error) {
	const op spindle.Op = "node.PublishedHead"
	if _, err := spindle.CleanUser(user); err != nil {
		return nil, spindle.E(op, err)
	}
	d := n.DHT()
	if d == nil {
		return nil, spindle.E(op, spindle.NotExist, user, "the node has no DHT")
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	v, err := d.GetValue(ctx, HeadKey(user))
	if errors.Is(err, routing.ErrNotFound) {
		return nil, spindle.E(op, spindle.NotExist, user, "no head of "+string(user)+"'s log is published")
	}
	if err != nil {
		return nil, spindle.E(op, spindle.IO, user, err)
	}
	return decodeHeadRecord(HeadKey(user), v)
}

// maxDirHostCache bounds the key records the head validator keeps at hand.
const maxDirHostCache = 1 << 12

// dirHostTTL is how long the validator trusts a key record's dir hosts.
const dirHostTTL = 2 * time.Minute

// dirHostCache keeps the dir hosts of users whose published heads the
// node has checked, looked up in the background (lookupLoop).
type dirHostCache struct {
	mu      sync.Mutex
	hosts   map[spindle.UserName]dirHostsAt
	pending chan spindle.UserName
}

type dirHostsAt struct {
	ids []string
	at  time.Time
}

func newDirHostCache() *dirHostCache {
	return &dirHostCache{hosts: make(map[spindle.UserName]dirHostsAt), pending: make(chan spindle.UserName, 64)}
}

// get returns user's dir hosts if the cache holds them fresh; if not, it
// asks for a lookup, unless too many are pending, and returns false.
func (c *dirHostCache) get(user spindle.UserName) ([]string, bool) {
	c.mu.Lock()
	e, ok := c.hosts[user]
	c.mu.Unlock()
	if ok && time.Since(e.at) < dirHostTTL {
		return e.ids, true
	}
	select {
	case c.pending <- user:
	default:
	}
	return nil, false
}

// lookupLoop looks up the key records the validator asked for, until the
// node closes. A user without a record has no dir hosts.
func (n *Node) lookupLoop() {
	c := n.dirHosts
	for {
		var user spindle.UserName
		select {
		case <-n.ctx.Done():
			return
		case user = <-c.pending:
		}
		c.mu.Lock()
		e, ok := c.hosts[user]
		c.mu.Unlock()
		if ok && time.Since(e.at) < dirHostTTL {
			continue // Asked for twice.
		}
		ctx, cancel := context.WithTimeout(n.ctx, publishTimeout)
		u, err := n.kst().ks.Lookup(ctx, user)
		cancel()
		var ids []string
		switch {
		case err == nil:
			for _, a := range u.DirHosts {
				if ai, err := p2p.ParsePeerAddr(a); err == nil {
					ids = append(ids, ai.ID.String())
				}
			}
		case errors.Is(err, spindle.NotExist):
		default:
			n.log.Debug("cannot look up the dir hosts of a published head", "user", user, "err", oneLine(err.Error()))
			continue
		}
		c.mu.Lock()
		if len(c.hosts) >= maxDirHostCache {
			clear(c.hosts)
		}
		c.hosts[user] = dirHostsAt{ids: ids, at: time.Now()}
		c.mu.Unlock()
	}
}
