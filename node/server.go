package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"golang.org/x/text/unicode/norm"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/blocks"
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
	return n.serve(ctx, "client", clientTable, remote, &req)
}

// ServeOperator answers one request of the operator protocol
// (wire.OperatorProtocol), which the node serves only on its Unix socket:
// whoever reaches it is the node's operator. It knows only the operator's
// methods; any other gets an error of Op wire.UnknownOp.
func (n *Node) ServeOperator(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
	var req wire.Request
	if err := wire.Decode(data, &req); err != nil {
		return nil, err
	}
	return n.serve(ctx, "operator", operatorTable, remote, &req)
}

// serve answers req with the method of table it names, and encodes the
// answer; the answer to a request signed for this node is signed with it
// (see signAnswer).
func (n *Node) serve(ctx context.Context, protocol string, table *methodTable, remote peer.ID, req *wire.Request) ([]byte, error) {
	start := time.Now()
	body, err := n.dispatch(ctx, table, remote, req)
	n.metrics.observe(protocol, table, req.Method, start, err)
	resp, rerr := wire.NewResponse(body, err, errors.Is(err, keyraft.ErrNotLeader))
	if rerr != nil {
		return nil, rerr
	}
	if wire.SignedFor(req, n.host.ID().String()) {
		if serr := n.signAnswer(req.Auth, resp); serr != nil {
			return nil, serr
		}
	}
	return wire.Encode(resp)
}

// Who may call a method.
type who int

const (
	// anyone: any peer, signed in or not; the handler checks what it
	// needs (key.put the proof of possession, dir.mirror the key
	// record).
	anyone who = iota
	// signedIn: the user the peer signed in as; or, for a request
	// carried here by another node (wire.Request.To), the user who
	// signed it (forward.go); or, for an unsigned read addressed to this
	// node of a method with anon set, no user: the anonymous reader of a
	// gateway, who gets what all may read.
	signedIn
	// writer: a signed-in user the node admits as a writer.
	writer
	// operator: the node's operator, who alone reaches the operator
	// protocol, on the node's socket. Only operatorMethods has them.
	operator
)

// A method is an entry of a method table: its handler, who may call it,
// and how it travels between nodes.
type method struct {
	// serve answers the request; it decodes the body and returns the
	// answer's body, nil for none.
	serve func(n *Node, ctx context.Context, c *caller) (any, error)
	who   who
	// dir says that the dir host of the tree it is about answers it: a
	// node that is not wire.Request.To carries it there (forward.go).
	dir bool
	// anon says that a dir host answers it unsigned, for the anonymous
	// reader (see anonReader).
	anon bool
	// key says that the key cluster answers it: a node that is no
	// member carries it to a member (forward.go).
	key bool
}

// A caller is the context of one request: the peer it came from, the
// envelope, and the user it acts for (for methods of access signedIn or
// writer).
type caller struct {
	remote peer.ID
	req    *wire.Request
	user   spindle.UserName
}

// handle makes a method's serve of a handler that takes and returns the
// method's typed messages: it decodes the body as a Req (refusing one
// that does not decode with Invalid) and hands back the Resp.
func handle[Req, Resp any](f func(n *Node, ctx context.Context, c *caller, req *Req) (*Resp, error)) func(*Node, context.Context, *caller) (any, error) {
	return func(n *Node, ctx context.Context, c *caller) (any, error) {
		req := new(Req)
		if len(c.req.Body) > 0 {
			if err := wire.Decode(c.req.Body, req); err != nil {
				return nil, spindle.E(spindle.Op("node."+c.req.Method), err)
			}
		}
		resp, err := f(n, ctx, c, req)
		if resp == nil {
			return nil, err
		}
		return resp, err
	}
}

// A methodTable is the methods of a protocol, and what answers a method
// it does not have.
type methodTable struct {
	methods map[string]method
	unknown method
}

// clientTable is the client protocol's. An unknown method is refused as
// a signed-in user's request would be: a peer that has not signed in is
// told to, and a signed-in one gets an error of Op wire.UnknownOp.
var clientTable = &methodTable{clientMethods, method{serve: unknownMethod, who: signedIn}}

// operatorTable is the operator protocol's.
var operatorTable = &methodTable{operatorMethods, method{serve: unknownMethod, who: operator}}

// unknownMethod answers a method the protocol does not have, so that a
// client falls back to what an older node knows (as for
// dir.appendbatch).
func unknownMethod(_ *Node, _ context.Context, c *caller) (any, error) {
	return nil, spindle.E(wire.UnknownOp, spindle.Invalid, "unknown method "+c.req.Method)
}

// clientMethods are the methods of the client protocol. It has no
// method of access operator.
var clientMethods = map[string]method{
	wire.Auth:            {serve: handle((*Node).serveAuth), who: anyone},
	wire.KeyLookup:       {serve: handle((*Node).serveKeyLookup), who: anyone, key: true},
	wire.KeyLookupLeader: {serve: handle((*Node).serveKeyLookup), who: anyone, key: true},
	wire.KeyPut:          {serve: handle((*Node).serveKeyPut), who: anyone, key: true},
	wire.KeyDomain:       {serve: handle((*Node).serveKeyDomain), who: anyone, key: true},
	wire.KeyHistory:      {serve: handle((*Node).serveKeyHistory), who: anyone, key: true},
	wire.KeyProof:        {serve: handle((*Node).serveKeyProof), who: anyone, key: true},
	wire.KeyProofs:       {serve: handle((*Node).serveKeyProofs), who: anyone, key: true},
	wire.KeyConsistency:  {serve: handle((*Node).serveKeyConsistency), who: anyone, key: true},
	wire.KeyVerifier:     {serve: handle((*Node).serveKeyVerifier), who: anyone, key: true},
	wire.KeyHead:         {serve: handle((*Node).serveKeyHead), who: anyone, key: true},
	wire.KeyGossip:       {serve: handle((*Node).serveKeyGossip), who: signedIn},
	wire.KeyConfig:       {serve: handle((*Node).serveKeyConfig), who: anyone, key: true},
	wire.KeyCosign:       {serve: handle((*Node).serveKeyCosign), who: anyone},
	wire.KeyStatus:       {serve: handle((*Node).serveKeyStatus), who: anyone, key: true},
	wire.KeyChange:       {serve: handle((*Node).serveKeyChange), who: anyone, key: true},
	wire.NodeStatus:      {serve: handle((*Node).serveWriterStatus), who: writer},
	wire.DirMirror:       {serve: handle((*Node).serveMirror), who: anyone},
	wire.DirNudge:        {serve: handle((*Node).nudged), who: anyone},
	wire.DirCosign:       {serve: handle((*Node).serveDirCosign), who: anyone},
	wire.DirPublished:    {serve: handle((*Node).servePublished), who: signedIn},
	wire.WitnessCosign:   {serve: handle((*Node).serveWitnessCosign), who: anyone},
	wire.WitnessHead:     {serve: handle((*Node).serveWitnessHead), who: anyone},
	wire.DirHead:         {serve: handle((*Node).serveDirHead), who: signedIn, dir: true},
	wire.DirStep:         {serve: handle((*Node).serveDirStep), who: signedIn, dir: true},
	wire.DirMapStep:      {serve: handle((*Node).serveDirMapStep), who: signedIn, dir: true},
	wire.DirEntries:      {serve: handle((*Node).serveDirEntries), who: signedIn, dir: true},
	wire.DirCheckpoint:   {serve: handle((*Node).serveDirCheckpoint), who: signedIn, dir: true},
	wire.DirAppend:       {serve: handle((*Node).serveDirAppend), who: signedIn, dir: true},
	wire.DirBatch:        {serve: handle((*Node).serveDirBatch), who: signedIn, dir: true},
	wire.DirLookup:       {serve: handle((*Node).serveDirLookup), who: signedIn, dir: true, anon: true},
	wire.DirGlob:         {serve: handle((*Node).serveDirGlob), who: signedIn, dir: true},
	wire.DirWhich:        {serve: handle((*Node).serveDirWhich), who: signedIn, dir: true, anon: true},
}

// operatorMethods are the methods of the operator protocol.
var operatorMethods = map[string]method{
	wire.NodeStatus: {serve: handle((*Node).serveOperatorStatus), who: operator},
	wire.KeyJoin:    {serve: handle((*Node).serveKeyJoin), who: operator},
	wire.KeyLeave:   {serve: handle((*Node).serveKeyLeave), who: operator},
	wire.NodeBackup: {serve: handle((*Node).serveBackup), who: operator},
}

// dispatch finds req's method in table, checks that the peer may call
// it, and serves it.
func (n *Node) dispatch(ctx context.Context, table *methodTable, remote peer.ID, req *wire.Request) (any, error) {
	m, ok := table.methods[req.Method]
	if !ok {
		m = table.unknown
	}
	c := &caller{remote: remote, req: req}
	switch m.who {
	case signedIn:
		user := n.session(remote)
		switch {
		case req.To != "" && req.Auth == nil && m.anon:
			user = anonReader
		case req.To != "" && m.dir:
			if req.Auth == nil || len(req.Auth.Req) == 0 {
				return nil, spindle.E(spindle.Op("node.SignedRequest"), spindle.Permission, "a request carried by another node must be signed by its user")
			}
			var err error
			if user, err = n.signedUser(ctx, req); err != nil {
				return nil, err
			}
		}
		if user == "" {
			return nil, spindle.E(wire.SessionOp, spindle.Permission, "not signed in: the client has not authenticated")
		}
		c.user = user
	case writer:
		c.user = n.session(remote)
		if c.user == "" || !n.writers.admits(c.user) {
			return nil, spindle.E(spindle.Op("node."+req.Method), spindle.Permission, "a node answers "+req.Method+" only through its socket, to its operator, and to the writers it admits")
		}
	case operator:
		// Only operatorMethods has such methods, and only the socket
		// serves it.
	}
	return m.serve(n, ctx, c)
}

// encodeRequest encodes the request of method whose body is body.
func encodeRequest(method string, body any) ([]byte, error) {
	req, err := wire.NewRequest(method, body)
	if err != nil {
		return nil, err
	}
	data, err := wire.Encode(req)
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	return data, nil
}

// callWith sends a request of method with body req through send, which
// returns the encoded answer, and decodes the answer as a Resp, returning
// with it the error it carries.
func callWith[Req, Resp any](ctx context.Context, send func(context.Context, []byte) ([]byte, error), method string, req *Req) (*Resp, error) {
	data, err := encodeRequest(method, req)
	if err != nil {
		return nil, err
	}
	out, err := send(ctx, data)
	if err != nil {
		return nil, err
	}
	return wire.DecodeAnswer[Resp](out)
}

// callNode sends a request of method with body req to the node to and
// decodes its answer (see callPeer).
func callNode[Req, Resp any](ctx context.Context, n *Node, to peer.AddrInfo, method string, req *Req) (*Resp, error) {
	return callWith[Req, Resp](ctx, func(ctx context.Context, data []byte) ([]byte, error) { return n.callPeer(ctx, to, data) }, method, req)
}

func (n *Node) serveAuth(ctx context.Context, c *caller, _ *wire.AuthRequest) (*wire.AuthResponse, error) {
	// The verifier key goes with every answer, so that a client that
	// signs in checks which key cluster it reached without asking.
	resp := &wire.AuthResponse{Verifier: []byte(n.kst().ks.VerifierKey()), TakesBlocks: true}
	if !n.cfg.Erasure.IsZero() {
		resp.Erasure = n.cfg.Erasure.String()
	}
	return resp, n.authenticate(ctx, c.remote, c.req.Auth)
}

func (n *Node) serveKeyLookup(ctx context.Context, _ *caller, req *wire.KeyLookupRequest) (*wire.KeyLookupResponse, error) {
	u, err := n.kst().ks.Lookup(ctx, req.User)
	if err != nil {
		return nil, err
	}
	return &wire.KeyLookupResponse{Record: keylog.EncodeRecord(u)}, nil
}

func (n *Node) serveKeyPut(ctx context.Context, c *caller, req *wire.KeyPutRequest) (*wire.KeyPutResponse, error) {
	if err := n.putKey(ctx, c.remote, c.req, req); err != nil {
		return nil, err
	}
	n.keyPutDone(req.Record)
	return &wire.KeyPutResponse{}, nil
}

func (n *Node) serveKeyDomain(ctx context.Context, _ *caller, req *wire.KeyDomainRequest) (*wire.KeyDomainResponse, error) {
	users, err := n.kst().ks.Domain(ctx, req.Domain)
	return &wire.KeyDomainResponse{Users: users}, err
}

func (n *Node) serveKeyHistory(ctx context.Context, _ *caller, req *wire.KeyHistoryRequest) (*wire.KeyHistoryResponse, error) {
	held, err := n.keyHistory(ctx, req.User)
	resp := &wire.KeyHistoryResponse{}
	for _, h := range held {
		resp.Keys = append(resp.Keys, h.Key)
	}
	return resp, err
}

func (n *Node) serveKeyProof(ctx context.Context, _ *caller, req *wire.KeyProofRequest) (*wire.KeyProofResponse, error) {
	p, err := n.kst().ks.LookupProof(ctx, req.User)
	if err != nil {
		return nil, err
	}
	data, err := p.MarshalBinary()
	resp := &wire.KeyProofResponse{Proof: data}
	if err == nil && req.Gossip {
		// Within the budget a client gives its own gossip: a slow DHT
		// holds up no key proof by more.
		gctx, cancel := context.WithTimeout(ctx, keyProofGossipBudget)
		hs, gerr := n.gossipKeyHead(gctx, p.Head, true)
		cancel()
		if gerr != nil {
			n.log.Debug("cannot gossip the head of a key proof", "err", oneLine(gerr.Error()))
		} else {
			resp.Heads, resp.Gossiped = hs, true
		}
	}
	return resp, err
}

// keyProofGossipBudget bounds the gossip a key proof does for its client
// (wire.KeyProofRequest.Gossip), as the client bounds its own.
const keyProofGossipBudget = 2 * time.Second

func (n *Node) serveKeyProofs(ctx context.Context, _ *caller, req *wire.KeyProofsRequest) (*wire.KeyProofsResponse, error) {
	ps, err := n.kst().ks.History(ctx, req.User)
	if err != nil {
		return nil, err
	}
	data, err := keylog.MarshalProofs(ps)
	return &wire.KeyProofsResponse{Proofs: data}, err
}

func (n *Node) serveKeyConsistency(ctx context.Context, _ *caller, req *wire.KeyConsistencyRequest) (*wire.KeyConsistencyResponse, error) {
	p, err := n.kst().ks.ConsistencyProof(ctx, req.Old, req.New)
	if err != nil {
		return nil, err
	}
	prefix, err := n.kst().ks.PrefixHash(ctx, req.Old)
	if err != nil {
		return nil, err
	}
	return &wire.KeyConsistencyResponse{Proof: keylog.MarshalTreeProof(p), Prefix: prefix[:]}, nil
}

func (n *Node) serveKeyVerifier(ctx context.Context, _ *caller, _ *wire.KeyVerifierRequest) (*wire.KeyVerifierResponse, error) {
	return &wire.KeyVerifierResponse{Verifier: []byte(n.kst().ks.VerifierKey())}, nil
}

func (n *Node) serveKeyHead(ctx context.Context, _ *caller, _ *wire.KeyHeadRequest) (*wire.KeyHeadResponse, error) {
	head, err := n.kst().ks.Head(ctx)
	return &wire.KeyHeadResponse{Head: head}, err
}

func (n *Node) serveKeyConfig(ctx context.Context, _ *caller, req *wire.KeyConfigRequest) (*wire.KeyConfigResponse, error) {
	ps, err := n.kst().ks.ConfigProofs(ctx, req.After, req.Head)
	if err != nil {
		return nil, err
	}
	data, err := keylog.MarshalProofs(ps)
	return &wire.KeyConfigResponse{Proofs: data}, err
}

func (n *Node) serveKeyCosign(ctx context.Context, c *caller, req *wire.KeyCosignRequest) (*wire.KeyCosignResponse, error) {
	keys := n.kst().keys
	if keys == nil {
		return nil, spindle.E(spindle.NotExist, "this node is not a member of a key cluster")
	}
	// Only members gather signatures; a stranger could otherwise keep
	// this member waiting for trees it has not applied.
	if !keys.IsMember(c.remote.String()) {
		return nil, spindle.E(spindle.Permission, fmt.Sprintf("peer %s is not a member of this key cluster: only members ask for cosignatures", c.remote))
	}
	signed, err := keys.SignHead(ctx, req.Head)
	return &wire.KeyCosignResponse{Signed: signed}, err
}

func (n *Node) servePublished(ctx context.Context, _ *caller, req *wire.DirPublishedRequest) (*wire.DirPublishedResponse, error) {
	// Anyone may read the DHT; the node saves its signed-in users a DHT
	// of their own.
	h, err := n.PublishedHead(ctx, req.User)
	return &wire.DirPublishedResponse{Head: h}, err
}

func (n *Node) serveDirHead(ctx context.Context, c *caller, req *wire.DirHeadRequest) (*wire.DirHeadResponse, error) {
	// A log's head is its position: only users with a right in the tree
	// get it (writers need it to sign their next entry).
	h, err := n.dir.HeadFor(ctx, c.user, req.User)
	if err == nil && h.Seq == 0 && !n.writers.admits(req.User) {
		// A tree this node does not host and holds nothing of: say so,
		// rather than vouch for an empty log.
		return nil, spindle.E(wire.NotHostedOp, spindle.PathName(req.User+"/"), c.user, spindle.Permission, "this node does not host the tree of "+string(req.User)+": it does not admit the user as a writer")
	}
	// Clients check this head as they check an answer's: it becomes
	// their floor, and a writer's next entry follows it.
	if werr := n.witnessed(ctx, &h); err == nil && werr != nil {
		return nil, werr
	}
	return &wire.DirHeadResponse{Head: h}, err
}

func (n *Node) serveDirStep(ctx context.Context, c *caller, req *wire.DirStepRequest) (*wire.DirStepResponse, error) {
	p, err := n.dir.StepFor(ctx, c.user, req.User, req.From, req.To)
	if err != nil {
		return nil, err
	}
	return &wire.DirStepResponse{Proof: p.Marshal()}, nil
}

func (n *Node) serveDirMapStep(ctx context.Context, c *caller, req *wire.DirMapStepRequest) (*wire.DirMapStepResponse, error) {
	b, err := n.dir.MapStepFor(ctx, c.user, req.User, req.From)
	if err != nil {
		return nil, err
	}
	return &wire.DirMapStepResponse{Step: b}, nil
}

func (n *Node) serveDirEntries(ctx context.Context, c *caller, req *wire.DirEntriesRequest) (*wire.DirEntriesResponse, error) {
	es, err := n.dir.Entries(ctx, c.user, req.User, req.From, int(min(req.Max, 1<<16)))
	resp := &wire.DirEntriesResponse{}
	for _, e := range es {
		resp.Log = append(resp.Log, e.Marshal())
	}
	return resp, err
}

func (n *Node) serveDirCheckpoint(ctx context.Context, c *caller, req *wire.DirCheckpointRequest) (*wire.DirCheckpointResponse, error) {
	cp, err := n.dir.Checkpoint(ctx, c.user, req.User)
	resp := &wire.DirCheckpointResponse{}
	if cp != nil {
		resp.Checkpoint = cp.Marshal()
	}
	return resp, err
}

func (n *Node) serveDirAppend(ctx context.Context, c *caller, req *wire.DirAppendRequest) (*wire.DirAppendResponse, error) {
	e, err := n.appendable(ctx, c.user, req.Entry)
	if err != nil {
		return nil, err
	}
	de, err := n.dir.Append(ctx, e)
	if err == nil {
		n.mirrors.nudge(e.Tree())
		n.headChanged(e.Tree())
	}
	return &wire.DirAppendResponse{Entry: de}, err
}

func (n *Node) serveDirBatch(ctx context.Context, c *caller, req *wire.DirBatchRequest) (*wire.DirBatchResponse, error) {
	if len(req.Entries) > dirlog.MaxBatch {
		return nil, spindle.E(spindle.Op("node.AppendBatch"), c.user, spindle.Invalid, fmt.Sprintf("%d entries in a batch, limit is %d", len(req.Entries), dirlog.MaxBatch))
	}
	if err := n.putInline(ctx, c, req.Blocks); err != nil {
		return nil, err
	}
	// Append the entries before the first bad one, and report it.
	var es []*dirlog.Entry
	var bad error
	for _, data := range req.Entries {
		e, err := n.appendable(ctx, c.user, data)
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
	return &wire.DirBatchResponse{Entries: des}, err
}

func (n *Node) serveDirLookup(ctx context.Context, c *caller, req *wire.DirLookupRequest) (*wire.DirLookupResponse, error) {
	var de *spindle.DirEntry
	var pr *dirlog.Proved
	var err error
	if req.At != 0 || req.AtTime != 0 {
		de, pr, err = n.dir.LookupProvedAt(ctx, c.user, req.Name, req.At, atTime(req.AtTime))
	} else {
		de, pr, err = n.dir.LookupProved(ctx, c.user, req.Name)
	}
	resp := &wire.DirLookupResponse{Entry: de}
	if pr != nil {
		resp.Head, resp.Proofs = pr.Head, [][]byte{pr.Marshal()}
		for _, a := range pr.Above {
			resp.Proofs = append(resp.Proofs, a.Marshal())
		}
	}
	if werr := n.witnessed(ctx, &resp.Head); werr != nil {
		return nil, werr
	}
	if req.WithBlocks && err == nil {
		resp.Blocks, resp.BlockErr = n.inlineBlocks(ctx, c, de)
	}
	if req.At == 0 && req.AtTime == 0 {
		resp.Step = n.stepAnswers(ctx, c, req.Name, req.StepFrom, resp.Head)
	}
	return resp, err
}

// maxStepLog bounds the entries StepAnswers carry; the client asks for
// the rest.
const maxStepLog = 256

// stepAnswers returns the answers to the requests a client that has seen
// the head at sequence from of name's tree makes to check the step to
// head (see wire.StepAnswers), or nil if there is none to check.
func (n *Node) stepAnswers(ctx context.Context, c *caller, name spindle.PathName, from int64, head *dirlog.Head) *wire.StepAnswers {
	if from <= 0 || head == nil || head.Seq <= from {
		return nil
	}
	p, err := spindle.Parse(name)
	if err != nil || p.User() != head.User {
		return nil
	}
	owner := p.User()
	sa := &wire.StepAnswers{From: from}
	if st, err := n.serveDirStep(ctx, c, &wire.DirStepRequest{User: owner, From: from, To: head.Seq}); err == nil {
		sa.Proof = st.Proof
	}
	if c.user == owner {
		if ms, err := n.serveDirMapStep(ctx, c, &wire.DirMapStepRequest{User: owner, From: from}); err == nil {
			sa.MapStep = ms.Step
		}
		if es, err := n.serveDirEntries(ctx, c, &wire.DirEntriesRequest{User: owner, From: from + 1, Max: min(head.Seq-from, maxStepLog)}); err == nil {
			sa.Log = es.Log
		}
	}
	return sa
}

// putInline stores the blocks a client sent with its entries
// (wire.DirBatchRequest.Blocks) as the block protocol would store them
// from the client's peer: only from the client itself, signed in as a
// writer the node admits, never from a node carrying a request.
func (n *Node) putInline(ctx context.Context, c *caller, blocks [][]byte) error {
	const op spindle.Op = "node.AppendBlocks"
	if len(blocks) == 0 {
		return nil
	}
	switch {
	case c.req.To != "":
		return spindle.E(op, c.user, spindle.Invalid, "blocks travel with entries only to the client's own node")
	case len(blocks) > wire.MaxInlineBlocks:
		return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("%d blocks with the entries, limit is %d", len(blocks), wire.MaxInlineBlocks))
	case !n.canStore(c.remote):
		// As the block protocol refuses them (cmd/spin's hint knows it).
		return spindle.E(p2p.BlockServerOp, c.user, spindle.Permission, fmt.Sprintf("peer %s may not store blocks here", c.remote))
	}
	for i, b := range blocks {
		if len(b) > wire.MaxInlineBlock {
			return spindle.E(op, c.user, spindle.Invalid, fmt.Sprintf("block %d of %d bytes with the entries, limit is %d", i, len(b), wire.MaxInlineBlock))
		}
	}
	for _, b := range blocks {
		if _, err := n.userBlocks.Put(p2p.WithBlockPeer(ctx, c.remote), b); err != nil {
			return spindle.E(op, c.user, err)
		}
	}
	return nil
}

// inlineBlocks returns the blocks of e for a lookup's answer
// (wire.DirLookupRequest.WithBlocks), those held here: none if e is not
// a small file, and only those before the first not held here. (A block
// held elsewhere is not fetched for the answer, which would wait on the
// network: the client fetches it as before.) A copy here that is damaged
// is got, for the client's own node, as the client's block get would
// get it, from elsewhere; if it cannot be, the error is the answer's
// BlockErr (see wire.DirLookupResponse).
func (n *Node) inlineBlocks(ctx context.Context, c *caller, e *spindle.DirEntry) ([][]byte, []byte) {
	if e == nil || e.Attr.IsDir() || e.Attr.IsLink() || len(e.Blocks) == 0 || len(e.Blocks) > wire.MaxInlineBlocks {
		return nil, nil
	}
	var out [][]byte
	for _, b := range e.Blocks {
		if b.Size > wire.MaxInlineBlock {
			return out, nil
		}
		data, err := n.store.Get(ctx, b.Ref)
		if errors.Is(err, spindle.Integrity) && c.req.To == "" && n.session(c.remote) != "" {
			bad := err
			if data, err = n.userBlocks.Get(p2p.WithBlockPeer(ctx, c.remote), b.Ref); err != nil {
				return out, wire.ErrBytes(bad)
			}
			if blocks.RefOf(data) != b.Ref {
				// Passed on from elsewhere unchecked, as a user's get
				// is: the client's own get asks again for a wrong one.
				return out, nil
			}
		}
		if err != nil || len(data) > wire.MaxInlineBlock {
			return out, nil
		}
		out = append(out, data)
	}
	return out, nil
}

func (n *Node) serveDirGlob(ctx context.Context, c *caller, req *wire.DirGlobRequest) (*wire.DirGlobResponse, error) {
	var des []*spindle.DirEntry
	var prs []*dirlog.Proved
	var h *dirlog.Head
	var err error
	if req.At != 0 || req.AtTime != 0 {
		des, prs, h, err = n.dir.GlobProvedAt(ctx, c.user, req.Pattern, req.At, atTime(req.AtTime))
	} else {
		des, prs, h, err = n.dir.GlobProved(ctx, c.user, req.Pattern)
	}
	resp := &wire.DirGlobResponse{Entries: des, Head: h}
	for _, pr := range prs {
		resp.Proofs = append(resp.Proofs, pr.Marshal())
	}
	if werr := n.witnessed(ctx, &resp.Head); werr != nil {
		return nil, werr
	}
	return resp, err
}

// atTime is the time of a request's AtTime, zero if it is 0.
func atTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

func (n *Node) serveDirWhich(ctx context.Context, c *caller, req *wire.DirWhichRequest) (*wire.DirWhichResponse, error) {
	de, ap, err := n.dir.WhichAccessProved(ctx, c.user, req.Name)
	resp := &wire.DirWhichResponse{Entry: de}
	if ap != nil {
		resp.Head = ap.Head
		resp.Proofs = [][]byte{nil}
		if ap.Found != nil {
			resp.Proofs[0] = ap.Found.Marshal()
		}
		for _, pr := range ap.Absent {
			resp.Proofs = append(resp.Proofs, pr.Marshal())
		}
	}
	if werr := n.witnessed(ctx, &resp.Head); werr != nil {
		return nil, werr
	}
	resp.Step = n.stepAnswers(ctx, c, req.Name, req.StepFrom, resp.Head)
	if req.WithKeys && err == nil {
		resp.KeyProofs = n.readerProofs(ctx, c, de)
	}
	return resp, err
}

// readerProofs returns the proofs of the key records of the readers that
// the Access file e names (see wire.DirWhichRequest.WithKeys): those it
// can have, of at most wire.MaxKeyProofs users.
func (n *Node) readerProofs(ctx context.Context, c *caller, e *spindle.DirEntry) [][]byte {
	if e == nil {
		return nil
	}
	a, err := access.Parse(e.Name, e.Inline)
	if err != nil {
		return nil
	}
	noGroups := func(spindle.PathName) (*access.Group, error) { return nil, spindle.E(spindle.NotExist) }
	users, _, err := a.KnownUsers(access.Read, noGroups)
	if err != nil {
		return nil
	}
	var out [][]byte
	for _, u := range users {
		if u == c.user || u == spindle.AllUsers || strings.HasPrefix(string(u), "*@") {
			continue
		}
		if len(out) == wire.MaxKeyProofs {
			break
		}
		p, err := n.kst().ks.LookupProof(ctx, u)
		if err != nil {
			continue
		}
		if data, err := p.MarshalBinary(); err == nil {
			out = append(out, data)
		}
	}
	return out
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
		return nil, spindle.E(op, e.Entry.Name, user, spindle.E(wire.NotHostedOp, spindle.Permission, "this node does not host the tree of "+string(owner)+": it does not admit the user as a writer"))
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
	var env wire.Request
	if err := wire.Decode(data, &env); err != nil {
		return err
	}
	var req wire.WatchRequest
	if err := wire.Decode(env.Body, &req); err != nil {
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
		msg, err := wire.Encode(&wire.WatchEvent{Entry: ev.Entry, Delete: ev.Delete, Err: wire.ErrBytes(ev.Err)})
		if err != nil {
			return err
		}
		if err := c.Send(msg); err != nil {
			return err
		}
	}
	return nil
}
