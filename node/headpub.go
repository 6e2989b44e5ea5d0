package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// hosts needs the user's key record: a client checks it, as it checks
// every head it is given, before it believes a published head. Among
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

// headValidator is the DHT's record.Validator for HeadNamespace.
type headValidator struct{}

// Validate checks that value is a head of the user key names, signed by
// the peer it names.
func (headValidator) Validate(key string, value []byte) error {
	_, err := decodeHeadRecord(key, value)
	return err
}

// Select returns the index of the best of vals: the valid head with the
// highest sequence number (then the latest time, then the lowest bytes).
func (headValidator) Select(key string, vals [][]byte) (int, error) {
	best, bestHead := -1, (*dirlog.Head)(nil)
	for i, v := range vals {
		h, err := decodeHeadRecord(key, v)
		if err != nil {
			continue
		}
		if best < 0 || betterHead(h, v, bestHead, vals[best]) {
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
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-p.kick:
		}
		p.mu.Lock()
		users := p.dirty
		p.dirty = nil
		p.mu.Unlock()
		for u := range users {
			n.publishHead(u)
		}
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
