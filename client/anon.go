package client

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/pack"
)

// The anonymous reader.
//
// A node's gateway serves, to people who run no Spindle, what all may
// read. It reads it as a client with no keys would, from any tree: a
// request about a tree goes, unsigned, to the tree's dir hosts in the
// order of its owner's key record (the sequencer, then each mirror while
// the ones before cannot be reached), naming the host in wire.Request.To;
// a host answers such a request for no user, with only what the Access
// rules let all read. Every answer is checked as for any client: key
// records are proved in the key cluster's transparency log, a head is
// signed by a dir host the owner's key record names, an entry is the one
// the head's map holds at the name, Access files are their owner's, the
// file's writer signed it, and each block has its hash. Blocks come from
// the node's store, which finds their holders.

// An AnonConfig configures an anonymous reader.
type AnonConfig struct {
	// Node is the node the reader runs in, which answers key lookups.
	Node peer.ID
	// Send carries an encoded request of the client protocol (package
	// node/wire) to the peer to, Node or a dir host, and returns the
	// encoded answer.
	Send func(ctx context.Context, to peer.ID, data []byte) ([]byte, error)
	// Get fetches a block. The reader checks each block's hash itself.
	Get pack.GetFunc
	// Verifier is the verifier key of the key cluster Node uses: every
	// key record is proved to be in the cluster's transparency log, as
	// with a client's key log (kept in memory only).
	Verifier string
	// Logger receives the reader's diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// ReadAhead is the number of blocks an open file fetches ahead of a
	// sequential reader (DefaultAnonReadAhead if zero, none if
	// negative). Each costs a block of memory for as long as the file is
	// read, however slowly.
	ReadAhead int
}

// DefaultAnonReadAhead is the default AnonConfig.ReadAhead: a gateway
// sends many files to strangers at once, at their pace, and holds
// ReadAhead+1 blocks for each.
const DefaultAnonReadAhead = 1

// An Anonymous reads what all may read, with no keys, checking every
// answer as a Client does. It is safe for concurrent use.
type Anonymous struct {
	c *Client
}

// NewAnonymous returns an anonymous reader.
func NewAnonymous(cfg AnonConfig) (*Anonymous, error) {
	c := &Client{log: cfg.Logger, get: cfg.Get, ahead: cmp.Or(cfg.ReadAhead, DefaultAnonReadAhead), userKeys: map[spindle.UserName]cachedUser{}}
	if c.log == nil {
		c.log = slog.Default()
	}
	l, err := newKeyLog("", cfg.Verifier, nil, nil)
	if err != nil {
		return nil, spindle.E(spindle.Op("client.NewAnonymous"), spindle.Invalid, fmt.Errorf("key cluster verifier key %q: %w", cfg.Verifier, err))
	}
	c.keyLog = l
	c.svc = &remote{peer: cfg.Node, direct: cfg.Send, verifyHead: c.verifyHead, log: c.log, route: c.dirHostsOf, routeFresh: c.dirHostsFresh}
	c.heads = &dirHeads{heads: make(map[spindle.UserName]*dirlog.Head), anchors: make(map[spindle.UserName]*dirlog.Head)}
	c.svc.heads = c.heads
	c.dir = &serialDir{Client: dirlog.NewClient(c.svc, noKeys{})}
	return &Anonymous{c: c}, nil
}

// Lookup returns the entry at name, as Client.Lookup does without
// following a link at its end.
func (a *Anonymous) Lookup(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return a.c.Lookup(ctx, name, false)
}

// WhichAccess returns the Access file that governs name, as
// Client.WhichAccess does.
func (a *Anonymous) WhichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return a.c.WhichAccess(ctx, name)
}

// OpenFile opens the file e, an entry Lookup returned, as Client.Open
// does: its writer's signature is checked now, each block as it is read.
// Only a file that is not encrypted or whose key is wrapped for all
// opens.
func (a *Anonymous) OpenFile(ctx context.Context, e *spindle.DirEntry) (spindle.File, error) {
	r, err := a.c.openFile(ctx, e)
	if err != nil {
		return nil, spindle.E(spindle.Op("client.OpenFile"), e.Name, err)
	}
	return r, nil
}

// noKeys is the Signer of the anonymous reader: it has no user and signs
// nothing.
type noKeys struct{}

func (noKeys) UserName() spindle.UserName   { return "" }
func (noKeys) PublicKey() spindle.PublicKey { return "" }
func (noKeys) Sign([]byte) (spindle.Signature, error) {
	return nil, spindle.E(spindle.Permission, "the anonymous reader has no key to sign with")
}
