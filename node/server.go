package node

import (
	"context"
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/text/unicode/norm"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft"
	"spindle.dev/p2p"
)

func protocolID(s string) protocol.ID { return protocol.ID(s) }

// serveClient answers one request of the client protocol. Errors about the
// request itself travel in the response, so that an answer may carry an
// entry and an error together.
func (n *Node) serveClient(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req request
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	resp, err := n.dispatch(ctx, remote, &req)
	if resp == nil {
		resp = new(response)
	}
	resp.Err = errBytes(err)
	return encode(resp)
}

func (n *Node) dispatch(ctx context.Context, remote peer.ID, req *request) (*response, error) {
	switch req.Method {
	case mAuth:
		return nil, n.authenticate(ctx, remote, req.Auth)
	case mKeyLookup:
		u, err := n.keys.Lookup(ctx, req.User)
		if err != nil {
			return nil, err
		}
		return &response{Data: keyraft.EncodeRecord(u)}, nil
	case mKeyPut:
		u, err := keyraft.DecodeRecord(req.Data)
		if err != nil {
			return nil, err
		}
		return nil, n.keys.Put(ctx, u)
	case mKeyDomain:
		users, err := n.keys.Domain(ctx, req.Pattern)
		return &response{Users: users}, err
	case mKeyHistory:
		keys, err := n.keyHistory(ctx, req.User)
		return &response{Keys: keys}, err
	case mKeyProof:
		p, err := n.keys.LookupProof(ctx, req.User)
		if err != nil {
			return nil, err
		}
		data, err := p.MarshalBinary()
		return &response{Data: data}, err
	case mKeyProofs:
		ps, err := n.keys.History(ctx, req.User)
		if err != nil {
			return nil, err
		}
		resp := &response{Proofs: make([][]byte, len(ps))}
		for i, p := range ps {
			if resp.Proofs[i], err = p.MarshalBinary(); err != nil {
				return nil, err
			}
		}
		return resp, nil
	case mKeyConsistency:
		p, err := n.keys.ConsistencyProof(ctx, req.Seq, req.Size)
		if err != nil {
			return nil, err
		}
		return &response{Data: keyraft.MarshalTreeProof(p)}, nil
	case mKeyVerifier:
		return &response{Data: []byte(n.keys.VerifierKey())}, nil
	case mDirHead:
		h, err := n.dir.Head(ctx, req.User)
		return &response{Head: h}, err
	}

	// The rest act for the user the peer has authenticated as.
	user := n.session(remote)
	if user == "" {
		return nil, spindle.E(sessionOp, spindle.Permission, "not signed in: the client has not authenticated (run spin signup)")
	}
	switch req.Method {
	case mDirAppend:
		e, err := n.appendable(user, req.Data)
		if err != nil {
			return nil, err
		}
		de, err := n.dir.Append(ctx, e)
		return &response{Entry: de}, err
	case mDirBatch:
		if len(req.Batch) > dirlog.MaxBatch {
			return nil, spindle.E(spindle.Op("node.AppendBatch"), user, spindle.Invalid, fmt.Sprintf("%d entries in a batch, limit is %d", len(req.Batch), dirlog.MaxBatch))
		}
		// Append the entries before the first bad one, and report it.
		var es []*dirlog.Entry
		var bad error
		for _, data := range req.Batch {
			e, err := n.appendable(user, data)
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
		}
		if err == nil {
			err = bad
		}
		return &response{Entries: des}, err
	case mDirLookup:
		de, err := n.dir.Lookup(ctx, user, req.Name)
		return n.withHead(ctx, &response{Entry: de}, string(req.Name), err)
	case mDirGlob:
		des, err := n.dir.Glob(ctx, user, req.Pattern)
		return n.withHead(ctx, &response{Entries: des}, req.Pattern, err)
	case mDirWhich:
		de, err := n.dir.WhichAccess(ctx, user, req.Name)
		return n.withHead(ctx, &response{Entry: de}, string(req.Name), err)
	}
	return nil, spindle.E(unknownOp, spindle.Invalid, "unknown method "+req.Method)
}

// unknownOp is the Op of the error a node returns for a method it does not
// know, as an older node does for dir.appendbatch.
const unknownOp spindle.Op = "node.Client"

// appendable decodes an entry that user sends to be appended and checks
// that user signed it and that this node hosts its tree.
func (n *Node) appendable(user spindle.UserName, data []byte) (*dirlog.Entry, error) {
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
	var req request
	if err := decode(data, &req); err != nil {
		return err
	}
	user := n.session(c.RemotePeer())
	if user == "" {
		return spindle.E(sessionOp, spindle.Permission, "not signed in")
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
		msg, err := encode(&response{Entry: ev.Entry, Delete: ev.Delete, Err: errBytes(ev.Err)})
		if err != nil {
			return err
		}
		if err := c.Send(msg); err != nil {
			return err
		}
	}
	return nil
}

// withHead adds to a successful answer about name (a path or a glob
// pattern) the head of its owner's log, taken after the answer, so that a
// client that remembers the newest head it has seen notices a node that
// answers from an older state of the log (see Client's dirHeads). Failed
// answers carry no head: a user without rights learns nothing more.
func (n *Node) withHead(ctx context.Context, resp *response, name string, err error) (*response, error) {
	if err != nil {
		return resp, err
	}
	owner, _, _ := strings.Cut(name, "/")
	if h, herr := n.dir.Head(ctx, spindle.UserName(owner)); herr == nil {
		resp.Head = h
	}
	return resp, nil
}
