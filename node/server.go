package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/text/unicode/norm"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

func protocolID(s string) protocol.ID { return protocol.ID(s) }

// ServeClient answers one request of the client protocol (wire.Request)
// from the peer remote. Errors about the request itself travel in the
// response, so that an answer may carry an entry and an error together.
// The node serves it on its hosts; tests wrap it to play a node that
// misbehaves.
func (n *Node) ServeClient(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req wire.Request
	if err := wire.Decode(data, &req); err != nil {
		return nil, err
	}
	if out, ok := n.forward(ctx, remote, &req, data); ok {
		return out, nil
	}
	resp, err := n.dispatch(ctx, remote, &req)
	if resp == nil {
		resp = new(wire.Response)
	}
	resp.Err = wire.ErrBytes(err)
	resp.NotLeader = errors.Is(err, keyraft.ErrNotLeader)
	return wire.Encode(resp)
}

func (n *Node) dispatch(ctx context.Context, remote peer.ID, req *wire.Request) (*wire.Response, error) {
	switch req.Method {
	case wire.Auth:
		// The verifier key goes with every answer, so that a client that
		// signs in checks which key cluster it reached without asking.
		return &wire.Response{Data: []byte(n.kst().ks.VerifierKey())}, n.authenticate(ctx, remote, req.Auth)
	case wire.KeyLookup, wire.KeyLookupLeader:
		u, err := n.kst().ks.Lookup(ctx, req.User)
		if err != nil {
			return nil, err
		}
		return &wire.Response{Data: keylog.EncodeRecord(u)}, nil
	case wire.KeyPut:
		err := n.putKey(ctx, remote, req)
		if err == nil {
			n.keyPutDone(req.Data)
		}
		return nil, err
	case wire.KeyDomain:
		users, err := n.kst().ks.Domain(ctx, req.Pattern)
		return &wire.Response{Users: users}, err
	case wire.KeyHistory:
		held, err := n.keyHistory(ctx, req.User)
		resp := &wire.Response{}
		for _, h := range held {
			resp.Keys = append(resp.Keys, h.Key)
		}
		return resp, err
	case wire.KeyProof:
		p, err := n.kst().ks.LookupProof(ctx, req.User)
		if err != nil {
			return nil, err
		}
		data, err := p.MarshalBinary()
		return &wire.Response{Data: data}, err
	case wire.KeyProofs:
		ps, err := n.kst().ks.History(ctx, req.User)
		if err != nil {
			return nil, err
		}
		data, err := keylog.MarshalProofs(ps)
		return &wire.Response{Proofs: data}, err
	case wire.KeyConsistency:
		p, err := n.kst().ks.ConsistencyProof(ctx, req.Seq, req.Size)
		if err != nil {
			return nil, err
		}
		return &wire.Response{Data: keylog.MarshalTreeProof(p)}, nil
	case wire.KeyVerifier:
		return &wire.Response{Data: []byte(n.kst().ks.VerifierKey())}, nil
	case wire.KeyHead:
		head, err := n.kst().ks.Head(ctx)
		return &wire.Response{Data: head}, err
	case wire.KeyConfig:
		ps, err := n.kst().ks.ConfigProofs(ctx, req.Seq, req.Data)
		if err != nil {
			return nil, err
		}
		data, err := keylog.MarshalProofs(ps)
		return &wire.Response{Proofs: data}, err
	case wire.KeyCosign:
		keys := n.kst().keys
		if keys == nil {
			return nil, spindle.E(spindle.NotExist, "this node is not a member of a key cluster")
		}
		// Only members gather signatures; a stranger could otherwise
		// keep this member waiting for trees it has not applied.
		if !keys.IsMember(remote.String()) {
			return nil, spindle.E(spindle.Permission, fmt.Sprintf("peer %s is not a member of this key cluster: only members ask for cosignatures", remote))
		}
		signed, err := keys.SignHead(ctx, req.Data)
		return &wire.Response{Data: signed}, err
	case wire.NodeStatus:
		return n.serveStatus(ctx, remote)
	case wire.DirMirror:
		return n.serveMirror(ctx, remote, req)
	case wire.DirNudge:
		return n.nudged(req)
	case wire.KeyStatus:
		return n.serveKeyStatus(ctx)
	case wire.KeyChange:
		return nil, n.serveKeyChange(ctx, req)
	case wire.KeyJoin:
		return n.serveKeyJoin(ctx, req)
	case wire.KeyLeave:
		return nil, n.serveKeyLeave(ctx, req)
	}

	// The rest act for the user the peer has authenticated as, or, for
	// a request carried here by another node, who signed it (forward.go),
	// or, for an unsigned read addressed to this node, for no user: the
	// anonymous reader of a gateway, who gets what all may read.
	user := n.session(remote)
	switch {
	case req.To != "" && req.Auth == nil && isAnonMethod(req.Method):
		user = anonReader
	case req.To != "" && isDirMethod(req.Method):
		if req.Auth == nil || len(req.Auth.Req) == 0 {
			return nil, spindle.E(spindle.Op("node.SignedRequest"), spindle.Permission, "a request carried by another node must be signed by its user")
		}
		var err error
		if user, err = n.signedUser(ctx, req); err != nil {
			return nil, err
		}
	}
	if user == "" {
		return nil, spindle.E(wire.SessionOp, spindle.Permission, "not signed in: the client has not authenticated (run spin signup)")
	}
	switch req.Method {
	case wire.DirPublished:
		// Anyone may read the DHT; the node saves its signed-in users
		// a DHT of their own.
		h, err := n.PublishedHead(ctx, req.User)
		return &wire.Response{Head: h}, err
	case wire.DirHead:
		// A log's head is its position: only users with a right in the
		// tree get it (writers need it to sign their next entry).
		h, err := n.dir.HeadFor(ctx, user, req.User)
		if err == nil && h.Seq == 0 && !n.writers.admits(req.User) {
			// A tree this node does not host and holds nothing of: say
			// so, rather than vouch for an empty log.
			return nil, spindle.E(spindle.Op("node.Head"), spindle.PathName(req.User+"/"), user, spindle.Permission, "this node does not host the tree of "+string(req.User)+" (see spin node -writers)")
		}
		return &wire.Response{Head: h}, err
	case wire.DirEntries:
		es, err := n.dir.Entries(ctx, user, req.User, req.Seq, int(min(req.Size, 1<<16)))
		resp := &wire.Response{}
		for _, e := range es {
			resp.Log = append(resp.Log, e.Marshal())
		}
		return resp, err
	case wire.DirCheckpoint:
		cp, err := n.dir.Checkpoint(ctx, user, req.User)
		resp := &wire.Response{}
		if cp != nil {
			resp.Data = cp.Marshal()
		}
		return resp, err
	case wire.DirAppend:
		e, err := n.appendable(ctx, user, req.Data)
		if err != nil {
			return nil, err
		}
		de, err := n.dir.Append(ctx, e)
		if err == nil {
			n.mirrors.nudge(e.Tree())
			n.headChanged(e.Tree())
		}
		return &wire.Response{Entry: de}, err
	case wire.DirBatch:
		if len(req.Batch) > dirlog.MaxBatch {
			return nil, spindle.E(spindle.Op("node.AppendBatch"), user, spindle.Invalid, fmt.Sprintf("%d entries in a batch, limit is %d", len(req.Batch), dirlog.MaxBatch))
		}
		// Append the entries before the first bad one, and report it.
		var es []*dirlog.Entry
		var bad error
		for _, data := range req.Batch {
			e, err := n.appendable(ctx, user, data)
			if err != nil {
				bad = err
				break
			}
			es = append(es, e)
		}
		var des []*spindle.DirEntry
		var err error
		if len(es) > 0 {
			des, err = n.dir.AppendBatch(ctx, es)
			if len(des) > 0 {
				n.mirrors.nudge(es[0].Tree())
			}
			for _, e := range es[:min(len(des), len(es))] {
				n.headChanged(e.Tree())
			}
		}
		if err == nil {
			err = bad
		}
		return &wire.Response{Entries: des}, err
	case wire.DirLookup:
		de, pr, err := n.dir.LookupProved(ctx, user, req.Name)
		resp := &wire.Response{Entry: de}
		if pr != nil {
			resp.Head, resp.DirProofs = pr.Head, [][]byte{pr.Marshal()}
			for _, a := range pr.Above {
				resp.DirProofs = append(resp.DirProofs, a.Marshal())
			}
		}
		return resp, err
	case wire.DirGlob:
		des, prs, h, err := n.dir.GlobProved(ctx, user, req.Pattern)
		resp := &wire.Response{Entries: des, Head: h}
		for _, pr := range prs {
			resp.DirProofs = append(resp.DirProofs, pr.Marshal())
		}
		return resp, err
	case wire.DirWhich:
		de, ap, err := n.dir.WhichAccessProved(ctx, user, req.Name)
		resp := &wire.Response{Entry: de}
		if ap != nil {
			resp.Head = ap.Head
			resp.DirProofs = [][]byte{nil}
			if ap.Found != nil {
				resp.DirProofs[0] = ap.Found.Marshal()
			}
			for _, pr := range ap.Absent {
				resp.DirProofs = append(resp.DirProofs, pr.Marshal())
			}
		}
		return resp, err
	}
	return nil, spindle.E(wire.UnknownOp, spindle.Invalid, "unknown method "+req.Method)
}

// appendable decodes an entry that user sends to be appended and checks
// that user signed it and that this node hosts its tree.
func (n *Node) appendable(ctx context.Context, user spindle.UserName, data []byte) (*dirlog.Entry, error) {
	const op spindle.Op = "node.Append"
	e, err := dirlog.UnmarshalEntry(data)
	if err != nil {
		return nil, err
	}
	if e.Writer != user {
		return nil, spindle.E(op, user, spindle.Permission, "entry is signed as "+string(e.Writer)+", not as the signed-in user")
	}
	if owner := e.Tree(); !n.writers.admits(owner) {
		return nil, spindle.E(op, e.Entry.Name, user, spindle.Permission, "this node does not host the tree of "+string(owner)+" (see spin node -writers)")
	} else if err := n.notSequencer(ctx, owner); err != nil {
		return nil, err
	}
	if err := dirlog.CheckNewNames(e); err != nil {
		return nil, spindle.E(op, user, err)
	}
	for _, name := range e.NewNames() {
		if err := checkNFC(name); err != nil {
			return nil, spindle.E(op, user, err)
		}
	}
	return e, nil
}

// checkNFC refuses a name that is not in Unicode normalization form C.
// Without this rule "café" spelled with a precomposed é (NFC) and with e
// and a combining accent (NFD) would be two names that look the same, and
// both could exist in one directory. Clients convert what users type to
// NFC; a node refuses anything else rather than convert it, because the
// writer signed the name as it is. (The check lives here and not in
// package spindle or dirlog, which use only the standard library.)
func checkNFC(name spindle.PathName) error {
	if norm.NFC.IsNormalString(string(name)) {
		return nil
	}
	return spindle.E(spindle.Op("node.Append"), spindle.Invalid, name, fmt.Sprintf("name %q is not in Unicode normalization form C (NFC); spin clients convert names to NFC", name))
}

// serveWatch serves one Watch: a request, then one response per event
// until the client goes away or the watch ends.
func (n *Node) serveWatch(ctx context.Context, c *p2p.Conn) error {
	data, err := c.Recv()
	if err != nil {
		return err
	}
	var req wire.Request
	if err := wire.Decode(data, &req); err != nil {
		return err
	}
	user := n.session(c.RemotePeer())
	if user == "" {
		return spindle.E(wire.SessionOp, spindle.Permission, "not signed in")
	}
	// End the watch when the client closes its side.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for {
			if _, err := c.Recv(); err != nil {
				cancel()
				return
			}
		}
	}()
	events, err := n.dir.Watch(ctx, user, req.Name, req.Seq)
	if err != nil {
		return err
	}
	for ev := range events {
		// A watch lasts only as long as the session it was opened in
		// (see Node.session): not past a key rotation or the expiry.
		if n.session(c.RemotePeer()) != user {
			return spindle.E(wire.SessionOp, spindle.Permission, "session ended: sign in again")
		}
		msg, err := wire.Encode(&wire.Response{Entry: ev.Entry, Delete: ev.Delete, Err: wire.ErrBytes(ev.Err)})
		if err != nil {
			return err
		}
		if err := c.Send(msg); err != nil {
			return err
		}
	}
	return nil
}
