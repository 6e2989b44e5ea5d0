package node

// Any node forwards.
//
// A client reaches the whole network through one node, A. What A does not
// hold it carries to the nodes that do:
//
//   - Key operations. A node started with Config.KeyServers (spin node
//     -keyserver) runs no key cluster of its own: it carries every key
//     request to a member of the remote cluster and its answer back
//     unchanged. A member that is not the leader carries a key.put on to
//     the leader, once more after a leader change. The client proves every
//     record against the cluster's signed tree heads itself, so neither
//     the forwarding node nor the member can forge one.
//   - Directory operations. The owner's key record names the dir host B of
//     each tree. A client whose node A is not B sets Request.To to B and
//     signs the request itself (wire.AuthMsg.Req): A carries the bytes to
//     B and B's answer back unchanged. B acts for the user who signed the
//     request, never for a session that A holds: a session is bound to
//     the connection the client opened to A, and a signed request to one
//     request, to B and to a few minutes, and B refuses to see one twice.
//     So A can delay or refuse a request but cannot make one, change one
//     or replay one at B. Answers carry B's signed head and proofs, which
//     the client checks as it does for its own node, and B's signature
//     of the answer with the request (signAnswer), so that A cannot hand
//     the client an answer B gave to another request, such as an older
//     one from before the owner changed an Access file. A client sends
//     such requests in a tunnel to B (tunnel.go), so that A learns which
//     host is asked, not what; in plain, as here (forwardDir), only if
//     it is configured to (client.Config.PlainForwarding).
//   - Blocks, as before: a put stores them through A's replica store (here
//     and on the r−1 nodes nearest to each block), a get finds their
//     holders through the DHT.
//
// A watch is not carried: it reaches only trees that the client's own node
// hosts.
//
// Anonymous reads. A node's gateway reads as a client with no keys
// (client.Anonymous): its lookups and WhichAccess requests go unsigned,
// straight from its node to the dir host that Request.To names, which
// answers them for anonReader, a user no Access file can name but by
// all: with what all may read, and for every other name the answer any
// stranger gets. Such a request is not carried for another peer.
//
// Staleness of key reads. A member answers lookups from its own replica of
// the cluster's state. A follower applies an entry when the leader tells
// it the entry committed, with the next append or heartbeat: in ordinary
// operation some tens of milliseconds after the leader, at most about one
// heartbeat timeout (250 ms for spin node) behind it; a follower cut off
// from the leader keeps answering from the state it has, however old, and
// the client notices only when a newer tree head reaches it. For a read
// after a write, wire.KeyLookupLeader is answered by the leader itself.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// keyService is what a node needs of the key cluster: the cluster itself,
// for a member, or remoteKeys, for a node started with -keyserver.
type keyService interface {
	Lookup(ctx context.Context, name spindle.UserName) (*spindle.User, error)
	Version(name spindle.UserName) int64
	History(ctx context.Context, name spindle.UserName) ([]*keylog.Proof, error)
	Domain(ctx context.Context, domain string) ([]spindle.UserName, error)
	LookupProof(ctx context.Context, name spindle.UserName) (*keylog.Proof, error)
	ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error)
	PrefixHash(ctx context.Context, n int64) (tlog.Hash, error)
	ConfigProofs(ctx context.Context, after int64, head []byte) ([]*keylog.Proof, error)
	Head(ctx context.Context) ([]byte, error)
	VerifierKey() string
}

var _ keyService = (*keyraft.Cluster)(nil)

// forwardTimeout bounds one request carried to another node. Requests and
// answers are small (blocks travel on their own protocol).
const forwardTimeout = 30 * time.Second

// isKeyMethod reports whether a request's method is answered by the key
// cluster (see method.key).
func isKeyMethod(m string) bool { return clientMethods[m].key }

// isDirMethod reports whether a request's method is answered by the dir
// host of the tree it names (see method.dir).
func isDirMethod(m string) bool { return clientMethods[m].dir }

// remoteKeys is the key cluster of a node that is no member: every
// request goes to one of the members, the one that answered last first.
type remoteKeys struct {
	n *Node

	mu       sync.Mutex
	members  []peer.AddrInfo               // The members asked, in order (see followMembers).
	given    []peer.AddrInfo               // The key servers the node was given, asked last.
	vkey     string                        // The verifier key handed to clients.
	good     int                           // Index of the member that answered last.
	versions map[spindle.UserName]verEntry // Record versions, for sessions.
}

// A verEntry is a record and when it was looked up.
type verEntry struct {
	u  *spindle.User
	at time.Time
}

// versionTTL is how long a node without a key cluster uses a record version
// it looked up to decide that a session still holds: a rotation ends the
// sessions of the old key within this time.
const versionTTL = 5 * time.Second

// openRemoteKeys reaches the key cluster at addrs and asks it for its
// verifier key, trying for at most joinTimeout.
func (n *Node) openRemoteKeys(ctx context.Context, addrs []spindle.PeerAddr) (*remoteKeys, error) {
	const op spindle.Op = "node.KeyServer"
	members, err := parseBootstrap(addrs)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, strings.Replace(err.Error(), "bootstrap address", "key server address", 1))
	}
	if len(members) == 0 {
		return nil, spindle.E(op, spindle.Invalid, "no key server address")
	}
	for _, m := range members {
		if m.ID == n.host.ID() {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("key server %s is this node itself: a node with -keyserver uses another node's key cluster", m.ID))
		}
		n.host.Peerstore().AddAddrs(m.ID, m.Addrs, time.Hour)
	}
	r := &remoteKeys{n: n, members: members, given: members, versions: make(map[spindle.UserName]verEntry)}
	var last error
	deadline := time.Now().Add(joinTimeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, joinTimeout)
		resp, err := callWith[wire.KeyVerifierRequest, wire.KeyVerifierResponse](cctx, r.callRaw, wire.KeyVerifier, &wire.KeyVerifierRequest{})
		cancel()
		if err == nil {
			r.vkey = strings.TrimSpace(string(resp.Verifier))
			break
		}
		last = err
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, spindle.E(op, spindle.IO, fmt.Errorf("no key server answered (%d tried): %w", len(members), last))
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if r.vkey == "" {
		return nil, spindle.E(op, spindle.IO, "the key server sent no verifier key")
	}
	return r, nil
}

// callRaw sends an encoded request to a member and returns its encoded
// answer: to the member that answered last, then to each other.
func (r *remoteKeys) callRaw(ctx context.Context, data []byte) ([]byte, error) {
	r.mu.Lock()
	first, members := r.good, r.members
	r.mu.Unlock()
	var errs []error
	for i := range members {
		k := (first + i) % len(members)
		m := members[k]
		out, err := r.n.callPeer(ctx, m, data)
		if err == nil {
			r.mu.Lock()
			if len(r.members) == len(members) {
				r.good = k
			}
			r.mu.Unlock()
			return out, nil
		}
		errs = append(errs, fmt.Errorf("key server %s: %w", m.ID, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, spindle.E(spindle.IO, errors.Join(errs...))
}

// status asks a member for the cluster's status.
func (r *remoteKeys) status(ctx context.Context) (*wire.KeyStatusResponse, error) {
	return callWith[wire.KeyStatusRequest, wire.KeyStatusResponse](ctx, r.callRaw, wire.KeyStatus, &wire.KeyStatusRequest{})
}

func (r *remoteKeys) Lookup(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	resp, err := callWith[wire.KeyLookupRequest, wire.KeyLookupResponse](ctx, r.callRaw, wire.KeyLookup, &wire.KeyLookupRequest{User: name})
	if err != nil {
		return nil, err
	}
	u, err := keylog.DecodeRecord(resp.Record)
	if err != nil {
		return nil, err
	}
	if u.Name != name {
		return nil, spindle.E(name, spindle.Integrity, "key server answered with the record of "+string(u.Name))
	}
	r.mu.Lock()
	r.versions[name] = verEntry{u, time.Now()}
	r.mu.Unlock()
	return u, nil
}

// Version returns the version of a user's record, looked up again when the
// one known is older than versionTTL; 0 if there is none or the cluster
// cannot be reached (which ends the user's sessions: they sign in again).
func (r *remoteKeys) Version(name spindle.UserName) int64 {
	ctx, cancel := context.WithTimeout(r.n.ctx, forwardTimeout)
	defer cancel()
	u, err := r.recent(ctx, name)
	if err != nil {
		return 0
	}
	return u.Version
}

// recent returns a user's record as looked up at most versionTTL ago, or
// looks it up: the key that a signed request is checked with, as a
// session is, follows a rotation within versionTTL.
func (r *remoteKeys) recent(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	r.mu.Lock()
	e, ok := r.versions[name]
	if len(r.versions) > maxLimitedPeers {
		clear(r.versions) // Bounded: those still in use are looked up again.
	}
	r.mu.Unlock()
	if ok && time.Since(e.at) < versionTTL {
		return e.u, nil
	}
	return r.Lookup(ctx, name)
}

func (r *remoteKeys) History(ctx context.Context, name spindle.UserName) ([]*keylog.Proof, error) {
	resp, err := callWith[wire.KeyProofsRequest, wire.KeyProofsResponse](ctx, r.callRaw, wire.KeyProofs, &wire.KeyProofsRequest{User: name})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalProofs(resp.Proofs)
}

func (r *remoteKeys) Domain(ctx context.Context, domain string) ([]spindle.UserName, error) {
	resp, err := callWith[wire.KeyDomainRequest, wire.KeyDomainResponse](ctx, r.callRaw, wire.KeyDomain, &wire.KeyDomainRequest{Domain: domain})
	if err != nil {
		return nil, err
	}
	return resp.Users, nil
}

func (r *remoteKeys) LookupProof(ctx context.Context, name spindle.UserName) (*keylog.Proof, error) {
	resp, err := callWith[wire.KeyProofRequest, wire.KeyProofResponse](ctx, r.callRaw, wire.KeyProof, &wire.KeyProofRequest{User: name})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalProof(resp.Proof)
}

func (r *remoteKeys) ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	resp, err := callWith[wire.KeyConsistencyRequest, wire.KeyConsistencyResponse](ctx, r.callRaw, wire.KeyConsistency, &wire.KeyConsistencyRequest{Old: oldSize, New: newSize})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalTreeProof(resp.Proof)
}

func (r *remoteKeys) PrefixHash(ctx context.Context, n int64) (tlog.Hash, error) {
	resp, err := callWith[wire.KeyConsistencyRequest, wire.KeyConsistencyResponse](ctx, r.callRaw, wire.KeyConsistency, &wire.KeyConsistencyRequest{Old: n, New: n})
	if err != nil {
		return tlog.Hash{}, err
	}
	return prefixHash(resp.Prefix)
}

// prefixHash decodes a KeyConsistencyResponse's Prefix.
func prefixHash(b []byte) (tlog.Hash, error) {
	var h tlog.Hash
	if len(b) != len(h) {
		return h, spindle.E(spindle.Invalid, fmt.Sprintf("prefix hash of %d bytes", len(b)))
	}
	copy(h[:], b)
	return h, nil
}

func (r *remoteKeys) ConfigProofs(ctx context.Context, after int64, head []byte) ([]*keylog.Proof, error) {
	resp, err := callWith[wire.KeyConfigRequest, wire.KeyConfigResponse](ctx, r.callRaw, wire.KeyConfig, &wire.KeyConfigRequest{After: after, Head: head})
	if err != nil {
		return nil, err
	}
	return keylog.UnmarshalProofs(resp.Proofs)
}

func (r *remoteKeys) Head(ctx context.Context) ([]byte, error) {
	resp, err := callWith[wire.KeyHeadRequest, wire.KeyHeadResponse](ctx, r.callRaw, wire.KeyHead, &wire.KeyHeadRequest{})
	if err != nil {
		return nil, err
	}
	return resp.Head, nil
}

func (r *remoteKeys) VerifierKey() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.vkey
}

// memberRefresh is how often a node without a key cluster asks the
// cluster who its members are.
const memberRefresh = 10 * time.Second

// followMembers keeps a node without a key cluster in step with the
// cluster's members, until the node closes: every memberRefresh it asks
// for the cluster's status, then asks the members it names (leader
// first, the key servers it was started with last) and hands clients a
// current member's verifier key. So a node started with -keyserver A
// goes on working, and tells new clients a key that signs, after A
// leaves the cluster.
func (r *remoteKeys) followMembers() {
	t := time.NewTicker(memberRefresh)
	defer t.Stop()
	for r.n.kst().rkeys == r { // Until the node joins the cluster.
		ctx, cancel := context.WithTimeout(r.n.ctx, forwardTimeout)
		err := r.refreshMembers(ctx)
		cancel()
		if err != nil {
			r.n.log.Debug("cannot learn the key cluster's members", "err", oneLine(err.Error()))
		}
		select {
		case <-r.n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refreshMembers asks the cluster for its members once (see
// followMembers). A cluster that records no members is left as it is.
func (r *remoteKeys) refreshMembers(ctx context.Context) error {
	resp, err := r.status(ctx)
	if err != nil {
		return err
	}
	st := resp.Status
	r.n.learnNetworkStatus(st)
	if st == nil || len(st.Members) == 0 {
		return nil
	}
	ids := slices.Sorted(maps.Keys(st.Members))
	if i := slices.Index(ids, st.Leader); i > 0 {
		ids[0], ids[i] = ids[i], ids[0]
	}
	var members []peer.AddrInfo
	for _, id := range ids {
		pid, err := peer.Decode(id)
		if err != nil || pid == r.n.host.ID() {
			continue
		}
		members = append(members, peer.AddrInfo{ID: pid})
	}
	if len(members) == 0 {
		return nil
	}
	vkey := st.Members[ids[0]]
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.given {
		if !slices.ContainsFunc(members, func(m peer.AddrInfo) bool { return m.ID == g.ID }) {
			members = append(members, g)
		}
	}
	if vkey != r.vkey {
		r.n.log.Info("key cluster members changed; clients are now given the verifier key of a current member", "verifier", vkey, "members", len(st.Members))
	}
	r.members, r.vkey, r.good = members, vkey, 0
	return nil
}

// callPeer sends an encoded client-protocol request to another node and
// returns its encoded answer, connecting first, through the DHT if the
// node's addresses are not known.
func (n *Node) callPeer(ctx context.Context, to peer.AddrInfo, data []byte) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	if n.host.Network().Connectedness(to.ID) != network.Connected {
		if len(to.Addrs) == 0 {
			n.findAddrs(ctx, to.ID)
		}
		if err := n.host.Connect(ctx, to); err != nil {
			return nil, spindle.E(spindle.IO, fmt.Errorf("cannot reach node %s: %w", to.ID, err))
		}
	}
	return p2p.Call(ctx, n.host, to.ID, wire.ClientProtocol, data, wire.MaxMessage)
}

// forward carries a request that another node is to answer and returns
// that node's answer as it came, or this node's own answer saying why it
// could not. It reports false for a request this node answers itself.
func (n *Node) forward(ctx context.Context, remote peer.ID, req *wire.Request, data []byte) ([]byte, bool) {
	ks := n.kst()
	switch {
	case req.To != "" && req.To != n.host.ID().String() && isDirMethod(req.Method):
		out, err := n.forwardDir(ctx, remote, req, data)
		if err != nil {
			return errResponse(err), true
		}
		return out, true
	case ks.keys == nil && ks.rkeys != nil && isKeyMethod(req.Method):
		if req.Method == wire.KeyPut {
			return nil, false // putKey checks it first.
		}
		out, err := ks.rkeys.callRaw(ctx, data)
		if err != nil {
			return errResponse(spindle.E(spindle.Op("node.KeyForward"), err)), true
		}
		return out, true
	case ks.keys != nil && req.Method == wire.KeyLookupLeader && !ks.keys.IsLeader():
		out, err := n.toLeader(ctx, data)
		if err != nil {
			return errResponse(spindle.E(spindle.Op("node.KeyForward"), err)), true
		}
		return out, true
	}
	return nil, false
}

// errResponse encodes a response that carries only err.
func errResponse(err error) []byte {
	out, _ := wire.EncodeResponse(nil, err, false)
	return out
}

// forwardDir carries a signed directory request to the dir host it names.
// Only a signed-in client may have its requests carried, and only its own:
// the node is no open relay.
func (n *Node) forwardDir(ctx context.Context, remote peer.ID, req *wire.Request, data []byte) ([]byte, error) {
	const op spindle.Op = "node.Forward"
	user := n.session(remote)
	if user == "" {
		return nil, spindle.E(wire.SessionOp, spindle.Permission, "not signed in: this node carries requests only for the users signed in to it")
	}
	if req.Auth == nil || len(req.Auth.Req) == 0 {
		return nil, spindle.E(op, user, spindle.Permission, "a request for another node must be signed by its user")
	}
	if req.Auth.User != user {
		return nil, spindle.E(op, user, spindle.Permission, "request signed by "+string(req.Auth.User)+", not by the signed-in user")
	}
	to, err := peer.Decode(req.To)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad dir host peer ID %q: %v", req.To, err))
	}
	out, err := n.callPeer(ctx, peer.AddrInfo{ID: to}, data)
	if err != nil {
		return nil, spindle.E(op, user, spindle.IO, fmt.Errorf("dir host %s did not answer through node %s: %w", to, n.host.ID(), err))
	}
	if tap := n.tap(); tap != nil {
		tap(data)
		tap(out)
	}
	return out, nil
}

// maxSignedSeen bounds the signed requests remembered against replay in
// one generation of seenSigned: some 30 MB at most, and room for over 200
// requests a second.
const maxSignedSeen = 1 << 18

// seenSigned remembers the signed requests a node took, so that none is
// taken twice. A signed request is good for maxClockSkew either side of
// the time it names, so a replay comes within 2·maxClockSkew of the
// original: two generations of that length each hold every request that
// may still come again.
type seenSigned struct {
	mu       sync.Mutex
	cur, old map[[32]byte]struct{}
	since    time.Time // When cur began.
}

// take records sum and reports whether it is new; it fails with
// Transient when the generation is full.
func (s *seenSigned) take(sum [32]byte, now time.Time) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || now.Sub(s.since) > 2*maxClockSkew {
		s.old, s.cur, s.since = s.cur, make(map[[32]byte]struct{}), now
	}
	if _, ok := s.cur[sum]; ok {
		return false, nil
	}
	if _, ok := s.old[sum]; ok {
		return false, nil
	}
	if len(s.cur) >= maxSignedSeen {
		return false, spindle.E(spindle.Transient, fmt.Sprintf("more than %d requests signed for this node in %v", maxSignedSeen, 2*maxClockSkew))
	}
	s.cur[sum] = struct{}{}
	return true, nil
}

// signedUser checks a request its user signed (wire.AuthMsg.Req) for this
// node, and returns the user. A request seen before is refused: the node
// that carried it cannot use it again.
func (n *Node) signedUser(ctx context.Context, req *wire.Request) (spindle.UserName, error) {
	const op spindle.Op = "node.SignedRequest"
	a := req.Auth
	user, err := spindle.CleanUser(a.User)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if a.NodePeer != n.host.ID().String() || req.To != a.NodePeer {
		return "", spindle.E(op, user, spindle.Permission, "request signed for another node")
	}
	if d := time.Since(a.Time.Go()); d > maxClockSkew || d < -maxClockSkew {
		return "", spindle.E(op, user, spindle.Permission, fmt.Sprintf("request signed %v away from this node's clock", d.Round(time.Second)))
	}
	want, err := wire.SignedDigest(req)
	if err != nil {
		return "", spindle.E(op, spindle.Internal, err)
	}
	if string(want) != string(a.Req) {
		return "", spindle.E(op, user, spindle.Permission, "request altered after its user signed it")
	}
	var key spindle.PublicKey
	if rkeys := n.kst().rkeys; rkeys != nil {
		u, err := rkeys.recent(ctx, user)
		if err != nil {
			return "", spindle.E(op, user, err)
		}
		key = u.PublicKey
	} else if key, err = n.userKey(ctx, user); err != nil {
		return "", spindle.E(op, user, err)
	}
	if err := spindle.Verify(key, a.Digest(), a.Sig); err != nil {
		return "", spindle.E(op, user, spindle.Permission, err)
	}
	sum := sha256.Sum256(a.Digest())
	fresh, err := n.signedSeen.take(sum, time.Now())
	if err != nil {
		return "", spindle.E(op, user, err)
	}
	if !fresh {
		return "", spindle.E(op, user, spindle.Permission, "signed request replayed")
	}
	return user, nil
}

// signAnswer signs resp, the answer to the request its user signed with
// a (wire.AuthMsg.Req) for this node, with the node's peer key: the
// client checks it against the node it named (Request.To) and that
// request, so that no node carrying the answer can hand it to another
// request, as it could an older answer (an Access file since changed)
// to a newer one. Every answer is signed, a refusal too: the client
// takes no unsigned answer but a carrier's own IO or Transient error,
// which says no more than a dropped request would.
func (n *Node) signAnswer(a *wire.AuthMsg, resp *wire.Response) error {
	if n.answers == nil {
		return spindle.E(spindle.Op("node.SignAnswer"), spindle.Internal, "no signer for answers")
	}
	sig, err := n.answers.Sign(wire.AnswerDigest(a, resp))
	if err != nil {
		return err
	}
	resp.Sig = sig
	if _, err := n.host.ID().ExtractPublicKey(); err != nil {
		resp.Key = n.answers.HostKey()
	}
	return nil
}

// toLeader carries an encoded key request to the key cluster's leader and
// returns its answer; if the leader answers that it no longer leads, once
// more to the next leader.
func (n *Node) toLeader(ctx context.Context, data []byte) ([]byte, error) {
	keys := n.kst().keys
	if keys == nil {
		return nil, spindle.E(spindle.Transient, "this node left the key cluster")
	}
	var last error
	for try := 0; try < 2; try++ {
		wctx, cancel := context.WithTimeout(ctx, forwardTimeout)
		id, err := keys.WaitLeader(wctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if id == keys.ID() {
			return nil, spindle.E(spindle.Transient, "this member became the leader")
		}
		pid, err := peer.Decode(id)
		if err != nil {
			return nil, spindle.E(spindle.Internal, fmt.Errorf("leader ID %q is not a peer ID: %w", id, err))
		}
		out, err := n.callPeer(ctx, peer.AddrInfo{ID: pid}, data)
		if err == nil && !answersNotLeader(out) {
			return out, nil
		}
		if err == nil {
			err = errors.New("the leader " + id + " no longer leads")
		}
		last = fmt.Errorf("leader %s: %w", id, err)
		// Wait for the cluster to notice the leader change.
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, spindle.E(spindle.Transient, last)
}

// answersNotLeader reports whether an encoded answer says that the member
// that sent it is not the leader.
func answersNotLeader(out []byte) bool {
	var resp wire.Response
	return wire.Decode(out, &resp) == nil && resp.NotLeader
}

// putKeyForwarded hands a checked key record to the cluster: to this
// member, which carries it to the leader if it does not lead, or, on a
// node without a cluster, to a member.
func (n *Node) putKeyForwarded(ctx context.Context, u *spindle.User, env *wire.Request, req *wire.KeyPutRequest) error {
	ks := n.kst()
	data, eerr := wire.Encode(env)
	if eerr != nil {
		return spindle.E(spindle.Internal, eerr)
	}
	if ks.keys == nil {
		out, err := ks.rkeys.callRaw(ctx, data)
		if err == nil {
			_, err = wire.DecodeResponse(out)
		}
		if err == nil {
			ks.rkeys.mu.Lock()
			delete(ks.rkeys.versions, u.Name)
			ks.rkeys.mu.Unlock()
		}
		return err
	}
	err := ks.keys.PutGranted(ctx, u, spindle.Signature(req.Grant))
	if !errors.Is(err, keyraft.ErrNotLeader) {
		return err
	}
	out, ferr := n.toLeader(ctx, data)
	if ferr != nil {
		return ferr
	}
	if _, err = wire.DecodeResponse(out); err != nil {
		return err
	}
	// Read your writes through this member: wait (a little) until its
	// replica has the record, so that the client's sign-in that follows
	// finds it.
	for deadline := time.Now().Add(forwardTimeout); ks.keys.Version(u.Name) < u.Version && time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// forwardedPossession reports whether a key.put whose proof of possession
// was made for another connection may still be taken: when the peer
// sending it is the node the client made it for (which carries it on),
// or a member of this node's key cluster (which checked it).
func (n *Node) forwardedPossession(ctx context.Context, p peer.ID, a *wire.AuthMsg) bool {
	if a == nil {
		return false
	}
	if a.NodePeer == p.String() {
		return true
	}
	return n.isMember(ctx, p)
}

// isMember reports whether p is another member of this node's key cluster.
func (n *Node) isMember(ctx context.Context, p peer.ID) bool {
	keys := n.kst().keys
	if keys == nil || p == n.host.ID() {
		return false
	}
	members, err := keys.Members(ctx)
	return err == nil && slices.Contains(members, p.String())
}

// checkSigned checks a proof of possession carried from another
// connection: made as user, timed within maxClockSkew, signed with key.
func checkSigned(a *wire.AuthMsg, user spindle.UserName, key spindle.PublicKey) error {
	if a == nil || a.User != user {
		return spindle.E(spindle.Permission, user, "no proof of possession of the key")
	}
	if d := time.Since(a.Time.Go()); d > maxClockSkew || d < -maxClockSkew {
		return spindle.E(user, spindle.Permission, fmt.Sprintf("credentials timed %v away from this node's clock", d.Round(time.Second)))
	}
	return spindle.Verify(key, a.Digest(), a.Sig)
}
