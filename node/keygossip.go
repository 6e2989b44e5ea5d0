package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/routing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
)

// Gossip of the key log's heads.
//
// A witness node publishes each head it cosigned the same way (after its
// dir heads, in publishLoop), and clients publish through their node the newest head of the key log they
// have verified, in the DHT under KeyGossipKey of the head's tree size,
// and get back the heads of that size others published there: a client
// shown one log and a client shown another of the same size find each
// other's heads, and each holds a fork proved by the two heads (see
// keylog.Compare and package client, keygossip.go). A record holds up to
// keylog.MaxGossipHeads different heads; every DHT node checks its shape
// (keyGossipValidator), not its signatures, which need the cluster's
// configuration: the clients check those. Among records of one key the
// one with more heads wins, so a fork, once published, is not replaced by
// one side of it.

// KeyGossipNamespace is the DHT namespace of published key-log heads.
const KeyGossipNamespace = "spindle-keyhead"

// KeyGossipKey returns the DHT key of the key-log heads of n records.
func KeyGossipKey(n int64) string {
	return "/" + KeyGossipNamespace + "/" + strconv.FormatInt(n, 10)
}

// gossipTimeout bounds each DHT step of one gossip: the read of the
// heads published, and the publication of the client's.
const gossipTimeout = 5 * time.Second

// keyGossipValidator is the DHT's record.Validator for KeyGossipNamespace.
type keyGossipValidator struct{}

// Validate checks that value is a gossip record of the size key names.
func (keyGossipValidator) Validate(key string, value []byte) error {
	_, err := decodeKeyGossip(key, value)
	return err
}

// Select returns the index of the best of vals: the valid record with the
// most heads, then the lowest bytes, so that every node chooses the same.
func (keyGossipValidator) Select(key string, vals [][]byte) (int, error) {
	best, bestN := -1, 0
	for i, val := range vals {
		hs, err := decodeKeyGossip(key, val)
		if err != nil {
			continue
		}
		if best < 0 || len(hs) > bestN || len(hs) == bestN && bytes.Compare(val, vals[best]) < 0 {
			best, bestN = i, len(hs)
		}
	}
	if best < 0 {
		return 0, spindle.E(spindle.Op("node.keyGossipValidator.Select"), spindle.Invalid, fmt.Sprintf("none of %d records of %s is a valid gossip record", len(vals), key))
	}
	return best, nil
}

// decodeKeyGossip decodes the gossip record stored under key. Errors are
// Invalid.
func decodeKeyGossip(key string, value []byte) ([][]byte, error) {
	const op spindle.Op = "node.KeyGossipRecord"
	s, ok := strings.CutPrefix(key, "/"+KeyGossipNamespace+"/")
	n, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || n < 1 || strconv.FormatInt(n, 10) != s {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("key %q is not a tree size in namespace /%s/", key, KeyGossipNamespace))
	}
	hs, err := keylog.DecodeGossip(n, value)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return hs, nil
}

// GossipKeyHead returns the heads of the key log of head's size published
// in the DHT (head among them if it was), and publishes head among them
// if it is not and there is room. It checks no signature: the caller does. Each DHT step is bounded
// by gossipTimeout; a node without a DHT, or a DHT that finds nothing,
// returns no heads.
func (n *Node) GossipKeyHead(ctx context.Context, head []byte) ([][]byte, error) {
	return n.gossipKeyHead(ctx, head, false)
}

// gossipKeyHead is GossipKeyHead; with sameTree, a head of the same tree
// as head (another note of it, signed by other members or witnesses)
// among those published counts as head published: the gossip a node does
// for a key proof (wire.KeyProofRequest.Gossip), which leaves the room in
// the record to the heads clients and witnesses publish themselves.
func (n *Node) gossipKeyHead(ctx context.Context, head []byte, sameTree bool) ([][]byte, error) {
	const op spindle.Op = "node.GossipKeyHead"
	hi, err := keylog.ParseHead(head)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if hi.N < 1 {
		return nil, spindle.E(op, spindle.Invalid, "the empty log has nothing to compare")
	}
	d := n.DHT()
	if d == nil {
		return nil, nil
	}
	key := KeyGossipKey(hi.N)
	gctx, cancel := context.WithTimeout(ctx, gossipTimeout)
	v, err := d.GetValue(gctx, key)
	cancel()
	var found [][]byte
	switch {
	case err == nil:
		if found, err = decodeKeyGossip(key, v); err != nil {
			// The validator let it through: not one of ours.
			n.log.Debug("bad key gossip record", "key", key, "err", oneLine(err.Error()))
			found = nil
		}
	case errors.Is(err, routing.ErrNotFound):
	default:
		n.log.Debug("cannot read key gossip", "key", key, "err", oneLine(err.Error()))
	}
	published := func(h []byte) bool {
		if bytes.Equal(h, head) {
			return true
		}
		fi, err := keylog.ParseHead(h)
		return sameTree && err == nil && fi.Tree == hi.Tree
	}
	if slices.ContainsFunc(found, published) || len(found) >= keylog.MaxGossipHeads {
		return found, nil // Published already, or no room.
	}
	rec, err := keylog.EncodeGossip(hi.N, append(slices.Clone(found), head))
	if err != nil {
		return found, spindle.E(op, err)
	}
	pctx, cancel := context.WithTimeout(ctx, gossipTimeout)
	defer cancel()
	if err := d.PutValue(pctx, key, rec); err != nil {
		n.log.Debug("cannot publish key gossip", "key", key, "err", oneLine(err.Error()))
	}
	return found, nil
}

func (n *Node) serveKeyGossip(ctx context.Context, _ *caller, req *wire.KeyGossipRequest) (*wire.KeyGossipResponse, error) {
	hs, err := n.GossipKeyHead(ctx, req.Head)
	return &wire.KeyGossipResponse{Heads: hs}, err
}

// witnessAdvanced notes that the node's witness cosigned a head, for the
// publish loop to gossip it (gossipWitnessHead).
func (n *Node) witnessAdvanced() {
	select {
	case n.heads.kick <- struct{}{}:
	default:
	}
}

// gossipWitnessHead publishes the newest head the node's witness cosigned,
// if the node is a witness and that head is of a size it has not
// published: a head a witness checked, which clients compare theirs with.
func (n *Node) gossipWitnessHead() {
	w := n.witness.Load()
	if w == nil {
		return
	}
	head, _ := w.Head()
	hi, err := keylog.ParseHead(head)
	if err != nil || hi.N < 1 || hi.N <= n.gossiped.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, 2*gossipTimeout)
	defer cancel()
	// A record is read, extended and written whole, so a node that
	// publishes a head of the same size at the same moment may write
	// over this one: read it back, and publish again if it is not there.
	for try := 1; ; try++ {
		found, err := n.GossipKeyHead(ctx, head)
		if err != nil {
			n.log.Debug("cannot gossip the witness's head", "n", hi.N, "err", oneLine(err.Error()))
			return
		}
		in := slices.ContainsFunc(found, func(h []byte) bool { return bytes.Equal(h, head) })
		if in || len(found) >= keylog.MaxGossipHeads || try == witnessGossipTries {
			break
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(witnessGossipPause):
		}
	}
	n.gossiped.Store(hi.N)
	n.log.Debug("gossiped the witness's head", "n", hi.N)
}

// A witness reads its gossip back up to witnessGossipTries times,
// witnessGossipPause apart.
const (
	witnessGossipTries = 4
	witnessGossipPause = 250 * time.Millisecond
)
