package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Any peer for directories. The client reaches every tree through its own
// node: a request about a tree that another node hosts (a dir host the
// owner's key record names) it signs for that host, and its node carries
// it there and the answer back, in a tunnel to the host that the node
// cannot read (tunnel.go; package node, tunnel.go and forward.go). The host
// acts for the user who signed, so the node in the middle cannot act as
// the user; the answer carries the host's signed head and proofs, checked
// as always, so it cannot forge one either. Writes go to the first dir
// host, the sequencer; reads to the first that answers, so that a mirror
// serves them while the sequencer is down (see remote.callRouted).
//
// Answers are bound to their request: the host signs each answer with
// the request it answers (wire.Response.Sig), and the client takes none
// that is not the named host's answer to this very request (checkAnswer).
// Without it a node in the middle could hand a newer request an older
// genuine answer, such as a WhichAccess from before the owner removed a
// reader, to a writer that had not seen the newer head, which would then
// wrap the file key for the removed reader. A request the client sends
// its own node without To is answered by that node itself, over a
// connection whose security protocol (Noise or TLS, or the socket's)
// authenticated that peer: nobody is in between, and the answer is not
// signed. The own node carries only requests with To set to another
// node, which are always signed and their answers checked. The anonymous
// reader's requests (To, no Auth; see anon.go) go straight to the dir
// host over a connection authenticated to it, and their answers are not
// signed either.

// dirHostsOf returns the dir hosts of owner's tree in the order of the
// owner's key record. Without a record (or one naming no host that
// parses) it returns none, and the client's node answers and says what it
// knows.
func (c *Client) dirHostsOf(ctx context.Context, owner spindle.UserName) []peer.ID {
	return c.dirHostList(ctx, owner, false)
}

// recordCached reports whether the client holds owner's key record from
// a lookup recent enough to use without looking again.
func (c *Client) recordCached(owner spindle.UserName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	cu := c.userKeys[owner]
	return cu.u != nil && time.Since(cu.at) < keyCacheTTL
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

// checkAnswer checks resp, with err the error it carries, as the answer of
// the dir host to to req, a request signed for it that the client's node
// via carried: it must be signed by to for req (wire.AnswerDigest). An
// answer that is not is refused with an Integrity error naming the host,
// before anything in it is used; but an unsigned answer that carries only
// an IO or Transient error, or the node's demand to sign in, is the
// carrying node's own word that the request did not get through (the
// host is down, or the node lost the session), which says no more than a
// dropped request would, and is returned as it is, so that a read goes to
// the next dir host. A dir host too old to sign answers gets every other
// answer refused: it must be upgraded.
func checkAnswer(to, via peer.ID, req *wire.Request, resp *wire.Response, err error) error {
	const op spindle.Op = "client.Answer"
	if len(resp.Sig) == 0 {
		var e *spindle.Error
		if len(resp.Body) == 0 && err != nil && (spindle.KindOf(err) == spindle.IO || spindle.KindOf(err) == spindle.Transient || errors.As(err, &e) && e.Op == wire.SessionOp) {
			return nil
		}
		what := "an answer"
		if err != nil {
			what = fmt.Sprintf("an answer (%v)", err)
		}
		return spindle.E(op, spindle.Integrity, fmt.Errorf("dir host %s: %s to %s came through node %s unsigned: the host must be upgraded to a version that signs its answers, or the node stripped the signature", to, what, req.Method, via))
	}
	if verr := verifyAnswer(to, req, resp); verr != nil {
		return spindle.E(op, spindle.Integrity, fmt.Errorf("dir host %s: the answer to %s that came through node %s is not the host's answer to this request: %v", to, req.Method, via, verr))
	}
	return nil
}

// verifyAnswer checks that resp.Sig is to's signature of resp as the
// answer to req, with the key to's peer ID embeds, or else resp.Key if it
// is to's.
func verifyAnswer(to peer.ID, req *wire.Request, resp *wire.Response) error {
	pk, err := to.ExtractPublicKey()
	if err != nil {
		if len(resp.Key) == 0 {
			return fmt.Errorf("%s does not embed its key and the answer names none", to)
		}
		if pk, err = crypto.UnmarshalPublicKey(resp.Key); err != nil {
			return fmt.Errorf("bad public key in the answer: %v", err)
		}
		if !to.MatchesPublicKey(pk) {
			return fmt.Errorf("signed with a key that is not %s's", to)
		}
	}
	if ok, err := pk.Verify(wire.AnswerDigest(req.Auth, resp), resp.Sig); err != nil || !ok {
		return fmt.Errorf("signature of %s does not verify", to)
	}
	return nil
}
