package client

import (
	"context"
	"crypto/rand"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Any peer for directories. The client reaches every tree through its own
// node: a request about a tree that another node hosts (a dir host the
// owner's key record names) it signs for that host, and its node carries
// it there and the answer back (see package node, forward.go). The host
// acts for the user who signed, so the node in the middle cannot act as
// the user; the answer carries the host's signed head and proofs, checked
// as always, so it cannot forge one either. Writes go to the first dir
// host, the sequencer; reads to the first that answers, so that a mirror
// serves them while the sequencer is down (see remote.callRouted).

// dirHostsOf returns the dir hosts of owner's tree in the order of the
// owner's key record. Without a record (or one naming no host that
// parses) it returns none, and the client's node answers and says what it
// knows.
func (c *Client) dirHostsOf(ctx context.Context, owner spindle.UserName) []peer.ID {
	return c.dirHostList(ctx, owner, false)
}

// dirHostsFresh is dirHostsOf with the record looked up afresh.
func (c *Client) dirHostsFresh(ctx context.Context, owner spindle.UserName) []peer.ID {
	return c.dirHostList(ctx, owner, true)
}

// dirHostAddrs returns the dir hosts of owner's tree as the owner's key
// record, looked up afresh, names them; none without a record.
func (c *Client) dirHostAddrs(ctx context.Context, owner spindle.UserName) []spindle.PeerAddr {
	u, err := c.lookupUser(ctx, owner, true)
	if err != nil {
		return nil
	}
	return u.DirHosts
}

func (c *Client) dirHostList(ctx context.Context, owner spindle.UserName, fresh bool) []peer.ID {
	u, err := c.lookupUser(ctx, owner, fresh)
	if err != nil {
		return nil
	}
	var out []peer.ID
	for _, a := range u.DirHosts {
		if info, err := p2p.ParsePeerAddr(a); err == nil {
			out = append(out, info.ID)
		}
	}
	return out
}

// signRequest makes req a request that the node to answers for the
// client's user whoever carries it: to is named in it, and the user signs
// it, with the time and a nonce (see wire.AuthMsg.Req).
func (c *Client) signRequest(req *wire.Request, to peer.ID) error {
	req.To = to.String()
	req.Auth = nil
	d, err := wire.SignedDigest(req)
	if err != nil {
		return spindle.E(spindle.Internal, err)
	}
	nonce := make([]byte, 12)
	rand.Read(nonce)
	a := &wire.AuthMsg{User: c.user, ClientPeer: c.h.ID().String(), NodePeer: to.String(), Time: spindle.Now(), Req: d, Nonce: nonce}
	if a.Sig, err = c.keys.Sign(a.Digest()); err != nil {
		return err
	}
	req.Auth = a
	return nil
}
