package client

import (
	"context"
	"errors"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/pack"
)

// RotateKey replaces the user's key with the one derived from s: the key
// cluster gets a new version of the user's record, signed with the
// current key, that names the new key and, as DirSeq, the sequence of the
// user's own tree now; entries of the tree signed with the old key stay
// valid up to it and no further (see dirlog.HeldKeys). Then the client's
// keys rotate (the old key moves to their archive, so that files wrapped
// for it stay readable) and the client signs in again with the new key,
// since the node ends the sessions of a record that changes. The caller
// saves the keys.
//
// The node refuses a rotation whose DirSeq is behind the tree's head, as
// when another client of the user appended meanwhile; RotateKey returns
// that error (Invalid) and may be called again.
func (c *Client) RotateKey(ctx context.Context, s pack.Secret) error {
	const op spindle.Op = "client.RotateKey"
	next, err := pack.FromSecret(c.user, s)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	if cur.PublicKey != c.keys.PublicKey() {
		return spindle.E(op, c.user, spindle.Permission, "the registered key is not this client's current key")
	}
	u := keylog.Next(cur)
	u.PublicKey = next.PublicKey()
	h, err := c.svc.Head(ctx, c.user)
	switch {
	case err == nil:
		u.DirSeq = max(u.DirSeq, h.Seq)
	case !errors.Is(err, spindle.NotExist):
		return spindle.E(op, c.user, err)
	}
	if err := keylog.Sign(u, c.keys); err != nil {
		return spindle.E(op, c.user, err)
	}
	a, err := c.possession(c.user, next)
	if err != nil {
		return spindle.E(op, c.user, err)
	}
	if _, err := c.svc.call(ctx, &wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(u), Auth: a}); err != nil {
		return spindle.E(op, c.user, err)
	}
	if err := c.keys.Rotate(s); err != nil {
		return spindle.E(op, c.user, err)
	}
	c.mu.Lock()
	delete(c.userKeys, c.user)
	c.mu.Unlock()
	c.forgetReaders()
	if err := c.auth(ctx); err != nil {
		return spindle.E(op, c.user, err)
	}
	return nil
}
