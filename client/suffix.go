package client

import (
	"context"
	"fmt"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// SignupSuffixed implements spindle.Client: it registers the +suffix user
// whose key s holds (ann+camera@example.com for the client's user
// ann@example.com), which only its base user may do. The record is a
// version 1 naming s's key and the client's node as dir host, signed with
// the client's key, as the key cluster requires of a +suffix user, and
// sent with proof that the client also holds s's key, as the node
// requires of every record it forwards. A name already registered is
// Exist. The suffixed user then signs up as itself to make its root.
func (c *Client) SignupSuffixed(ctx context.Context, s spindle.Signer) error {
	const op spindle.Op = "client.SignupSuffixed"
	name, err := spindle.CleanUser(s.UserName())
	if err != nil {
		return spindle.E(op, err)
	}
	if name == c.user || spindle.BaseUser(name) != c.user {
		return spindle.E(op, name, spindle.Invalid, fmt.Sprintf("%s is not a +suffix user of %s: only its base user may register it", name, c.user))
	}
	if cur, err := c.lookupUser(ctx, name, true); err == nil {
		if cur.PublicKey == s.PublicKey() {
			return nil // Registered by an earlier call.
		}
		return spindle.E(op, name, spindle.Exist, "the name is registered with another key")
	}
	u := &spindle.User{Name: name, PublicKey: s.PublicKey(), DirHosts: []spindle.PeerAddr{p2p.PeerAddrOf(c.svc.peer)}, Version: 1}
	if err := keylog.Sign(u, c.keys); err != nil {
		return spindle.E(op, name, err)
	}
	a, err := c.possession(name, s)
	if err != nil {
		return spindle.E(op, name, err)
	}
	_, err = c.svc.call(ctx, &wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(u), Auth: a})
	c.mu.Lock()
	delete(c.userKeys, name)
	c.mu.Unlock()
	if err != nil {
		return spindle.E(op, name, err)
	}
	return nil
}
