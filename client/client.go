// Package client is the client side of Spindle, the one the spin command
// drives: it holds the user's keys, packs, signs and verifies everything
// itself, and reaches the network through one node over the protocol of
// node/wire. It trusts that node with nothing it can check: key records
// are proved against the key cluster's log (keylog.go), answers about
// directories are checked against the newest state seen (dirheads.go),
// and every entry it uses must prove that it belongs at the name asked
// for: Access and Group files by their owner's signed log entry, moved
// entries by the signed renames that moved them (verify.go).
// The server side is package node.
package client

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"golang.org/x/text/unicode/norm"

	"spindle.dev"
	"spindle.dev/blocks/shard"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// Config configures a Client.
type Config struct {
	// Keys are the user's keys; required.
	Keys *pack.Keys
	// Node is the peer the client reaches the network through; required.
	Node spindle.PeerAddr
	// Packing is the default packing of new files; UnknownPack means ee.
	Packing spindle.Packing
	// Host, if set, is the libp2p host to dial from (tests use mocknet);
	// the client does not close it. If nil the client makes its own.
	Host host.Host
	// Logger receives the client's diagnostics; nil means slog.Default().
	Logger *slog.Logger
	// KeyLog, if set, is the file that holds the key cluster's verifier
	// key and the newest signed tree head seen (see keylog.go). Every key
	// record is then proved to be in the cluster's transparency log. If
	// the file does not exist, the node's verifier key is trusted and
	// written there, unless RequireKeyLog is set. Without a KeyLog, the
	// client trusts its node's records.
	KeyLog string
	// Verifier, if set, pins the key cluster's note verifier key: a key
	// log or a node that names another is an Integrity error, and a
	// missing key log is started with this key, not the node's.
	Verifier string
	// RequireKeyLog makes a missing KeyLog file an error, unless Verifier
	// pins the key to start a new one with: the node's word is never
	// taken again silently once the first use is past (see keylog.go).
	RequireKeyLog bool
	// DirHeads, if set, is the file that holds the newest head of each
	// user's directory log the client has seen (see dirheads.go). Every
	// answer is then checked not to come from an older state of the log.
	DirHeads string
	// PlainForwarding sends the requests for dir hosts other than the
	// client's node through the node in plain, as clients did before
	// tunnels (see tunnel.go): the node then reads the names, sizes,
	// writers, listings and Access files asked for and answered, though
	// it still cannot forge or replay them. Only for a node too old to
	// carry tunnels; without it such a node is refused.
	PlainForwarding bool
	// Evidence, if set, is the directory in which the client saves the
	// evidence of a dir host's rollback, fork or bad entry (see
	// evidence.go).
	Evidence string
	// Home, if set, is the client's home (spin's config directory), whose
	// format version is checked, and migrated, before anything in it is
	// read (see OpenHome).
	Home string
}

// homeFormat is the version of a client home's on-disk formats (see
// spindle.HomeFormat): config, keys/, keylog, dirheads and evidence.
// A change to any of them adds a version and a migration step here; see
// "Upgrades" in docs/operating.md.
func homeFormat() spindle.HomeFormat {
	return spindle.HomeFormat{Kind: "client home", Version: 1}
}

// OpenHome checks the format of the client home dir, migrates an older
// one and refuses one written by a newer spin.
func OpenHome(dir string) error {
	return homeFormat().OpenHome(dir)
}

// A Client implements spindle.Client: it packs, signs and verifies with the
// user's keys and reaches everything else through one node.
type Client struct {
	cfg     Config
	user    spindle.UserName
	keys    *pack.Keys
	log     *slog.Logger
	h       host.Host
	ownHost bool
	svc     *remote
	dir     *serialDir
	blocks  *p2p.RemoteStore // Nil for the anonymous reader.
	get     pack.GetFunc     // Fetches blocks: blocks.Fetch, or the anonymous reader's own.
	refetch pack.GetFunc     // Fetches a block whose bytes were wrong again: blocks.Refetch, or nil.
	ahead   int              // Blocks an open file reads ahead; zero means readAhead.
	keyLog  *keyLog          // Nil if the client trusts its node's key records.
	heads   *dirHeads        // Nil if the client does not check for rollbacks.

	// nodeKeyLog is, for a client without a key log, the key log's size
	// as the node last told it, at which its entries are anchored.
	nodeKeyLog atomic.Int64

	// gossiped is the size of the key log whose head the client last
	// gossiped (see keygossip.go).
	gossiped atomic.Int64

	bufs     sync.Pool     // Block buffers for putPipe.
	putSlots chan struct{} // Blocks on their way to the node, from all puts together.

	// erasure is the erasure code the node asked for at the last sign-in
	// (a *shard.Scheme; nil for whole blocks): see stripe.go.
	erasure atomic.Pointer[shard.Scheme]
	// takesBlocks is set if the node said at the last sign-in that it
	// takes and gives the blocks of small files with their entries
	// (see inline.go).
	takesBlocks atomic.Bool

	// disconnected is set when the connection to the node drops; the
	// node forgets the session then, and Put signs in again.
	disconnected atomic.Bool

	mu           sync.Mutex
	userKeys     map[spindle.UserName]cachedUser    // Key records looked up so far.
	proofs       map[spindle.UserName]keptProof     // Key proofs that came with answers (see keepProofs).
	readersCache map[spindle.PathName]cachedReaders // Reader keys by directory, for Put.
	verified     map[[32]byte]time.Time             // Entries verifyEntry passed, by verifiedDigest.
	headsOK      map[[32]byte]time.Time             // Heads whose signature verifyHead checked, by digest.
}

var _ spindle.Client = (*Client)(nil)

// Dial connects to the node cfg.Node names and signs in as the keys' user,
// if the user is registered (else Signup will).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	return dial(ctx, cfg, true)
}

// TrustKeyCluster starts the key log cfg.KeyLog, or checks the one there
// is, with the key cluster's verifier key: the one cfg.Verifier pins or,
// without a pin, the one cfg.Node gives (trust on first use). It returns
// the key, for the user to compare or pin (see [VerifierFingerprint]).
// It does not sign in, so it works before the user signs up.
func TrustKeyCluster(ctx context.Context, cfg Config) (string, error) {
	const op spindle.Op = "client.TrustKeyCluster"
	if cfg.KeyLog == "" {
		return "", spindle.E(op, spindle.Invalid, "no key log file")
	}
	cfg.RequireKeyLog = false
	c, err := dial(ctx, cfg, false)
	if err != nil {
		return "", spindle.E(op, err)
	}
	defer c.Close()
	return c.keyLog.boot, nil
}

// VerifierFingerprint returns a short form of a key cluster's verifier
// key for people to compare: SHA256: and the base64 of its SHA-256.
func VerifierFingerprint(vkey string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(vkey)))
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(sum[:])
}

func dial(ctx context.Context, cfg Config, signIn bool) (*Client, error) {
	const op spindle.Op = "client.Dial"
	if cfg.Keys == nil {
		return nil, spindle.E(op, spindle.Invalid, "no keys")
	}
	if cfg.Home != "" {
		if err := OpenHome(cfg.Home); err != nil {
			return nil, spindle.E(op, err)
		}
	}
	c := &Client{cfg: cfg, user: cfg.Keys.UserName(), keys: cfg.Keys, log: cfg.Logger, userKeys: map[spindle.UserName]cachedUser{}, putSlots: make(chan struct{}, clientPutInFlight)}
	if c.log == nil {
		c.log = slog.Default()
	}
	if cfg.Node == "" {
		return nil, spindle.E(op, spindle.Invalid, "no node address configured")
	}
	switch {
	case cfg.Host != nil:
		c.h = cfg.Host
	case p2p.IsLocalAddr(cfg.Node):
		// The node's socket on this machine: no TLS, no TCP.
		h, err := p2p.NewLocalHost(ctx, p2p.LocalConfig{})
		if err != nil {
			return nil, spindle.E(op, err)
		}
		c.h, c.ownHost = h, true
	default:
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			return nil, spindle.E(op, err)
		}
		c.h, c.ownHost = h, true
	}
	start := time.Now()
	pid, err := p2p.Connect(ctx, c.h, cfg.Node)
	if err != nil {
		c.Close()
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("cannot reach node %s: %w", cfg.Node, err))
	}
	c.log.Debug("connected to node", "node", cfg.Node, "took", roundDur(time.Since(start)))
	c.h.Network().Notify(&network.NotifyBundle{
		DisconnectedF: func(_ network.Network, conn network.Conn) {
			if conn.RemotePeer() == pid {
				c.disconnected.Store(true)
			}
		},
	})
	c.svc = &remote{h: c.h, peer: pid, reauth: c.auth, verifyHead: c.verifyHead, ownStep: c.checkOwnStep, log: c.log, route: c.dirHostsOf, routeCached: c.recordCached, routeFresh: c.dirHostsFresh, hostAddrs: c.dirHostAddrs, sign: c.signRequest}
	if !cfg.PlainForwarding {
		c.svc.tunnels = newTunnels(c.h, pid)
	}
	c.dir = &serialDir{Client: dirlog.NewClient(c.svc, c.keys)}
	c.dir.FollowKeyLog(c.keyLogSize, c.catchUpKeyLog)
	c.blocks = p2p.NewRemoteStore(c.h, pid)
	c.svc.held = &heldRegistry{store: c.putter()}
	c.get = c.blocks.Fetch
	// The node passes on what holders send without checking it, since
	// the reader checks each block; a block's wrong bytes are asked for
	// again, which the node checks (blocks/replica/unchecked.go).
	c.refetch = c.blocks.Refetch
	// Without a file, the heads seen are kept for this client's life.
	c.heads = &dirHeads{heads: make(map[spindle.UserName]*dirlog.Head), anchors: make(map[spindle.UserName]*dirlog.Head)}
	if cfg.DirHeads != "" {
		d, err := openDirHeads(cfg.DirHeads)
		if err != nil {
			c.Close()
			return nil, spindle.E(op, err)
		}
		c.heads = d
		// The user's own tree is usually where the last run left it:
		// sign the next change there without asking (see RememberHead).
		if h := d.floor(c.user); h != nil {
			c.dir.RememberHead(h)
		}
	}
	c.svc.heads = c.heads
	c.svc.evidence = cfg.Evidence
	// Sign in before the key log is opened: the node's answer names its
	// key cluster's verifier key, which openKeyLog then checks without a
	// round trip of its own. A key log that does not match is reported
	// before whatever the sign-in found.
	var theirs string
	var authErr error
	if signIn {
		theirs, authErr = c.signIn(ctx)
	}
	if cfg.KeyLog != "" {
		l, err := c.openKeyLog(ctx, cfg.KeyLog, theirs)
		if err != nil {
			c.Close()
			return nil, spindle.E(op, err)
		}
		c.keyLog = l
	}
	if authErr != nil && !errors.Is(authErr, spindle.NotExist) {
		authErr = c.explainAuth(ctx, authErr)
		c.Close()
		return nil, spindle.E(op, c.user, authErr)
	}
	return c, nil
}

// A KeyMismatchError says why a client could not sign in: its key is not
// the one its user's key record holds, as after new keys were made for a
// registered name (spin init -force without -recover) or keys of another
// machine were copied over. It comes wrapped in a Permission error.
type KeyMismatchError struct {
	User       spindle.UserName
	Registered spindle.PublicKey // The key of the user's record.
	Have       spindle.PublicKey // The client's current key.
}

func (e *KeyMismatchError) Error() string {
	return "the key in use is not the key registered for " + string(e.User)
}

// explainAuth returns the reason for a refused sign-in: a
// *KeyMismatchError when the user's proved key record names another key
// than the client's, else err. The node says only that the signature does
// not verify, which the wrong key and a damaged key file alike cause.
func (c *Client) explainAuth(ctx context.Context, err error) error {
	if !errors.Is(err, spindle.Permission) {
		return err
	}
	u, lerr := c.lookupUser(ctx, c.user, true)
	if lerr != nil || u.PublicKey == c.keys.PublicKey() {
		return err
	}
	return spindle.E(spindle.Permission, &KeyMismatchError{User: c.user, Registered: u.PublicKey, Have: c.keys.PublicKey()})
}

// auth signs in to the node as the client's user.
func (c *Client) auth(ctx context.Context) error {
	_, err := c.signIn(ctx)
	return err
}

// signIn signs in to the node as the client's user, and returns the
// verifier key of the node's key cluster, which the node sends with its
// answer whether the sign-in succeeded or not (an older node sends none).
func (c *Client) signIn(ctx context.Context) (vkey string, err error) {
	a, err := c.possession(c.user, c.keys)
	if err != nil {
		return "", err
	}
	resp, err := callAuth[wire.AuthRequest, wire.AuthResponse](ctx, c.svc, wire.Auth, a, &wire.AuthRequest{})
	if resp != nil {
		vkey = strings.TrimSpace(string(resp.Verifier))
	}
	if err == nil {
		c.setErasure(resp.Erasure)
		c.takesBlocks.Store(resp.TakesBlocks)
	}
	return vkey, err
}

// possession returns a proof, valid on this connection only and for a few
// minutes, that the client holds signer's key as user: it signs the
// client in, and goes with every key record the client puts.
func (c *Client) possession(user spindle.UserName, signer spindle.Signer) (*wire.AuthMsg, error) {
	a := &wire.AuthMsg{
		User:       user,
		ClientPeer: c.h.ID().String(),
		NodePeer:   c.svc.peer.String(),
		Time:       spindle.Now(),
	}
	sig, err := signer.Sign(a.Digest())
	if err != nil {
		return nil, err
	}
	a.Sig = sig
	return a, nil
}

// User implements spindle.Client.
func (c *Client) User() spindle.UserName { return c.user }

// Close implements spindle.Client.
func (c *Client) Close() error {
	var errs []error
	if c.keyLog != nil {
		errs = append(errs, c.keyLog.save())
	}
	if c.heads != nil {
		errs = append(errs, c.heads.save())
	}
	if c.blocks != nil {
		errs = append(errs, c.blocks.Close())
	}
	if c.svc != nil && c.svc.tunnels != nil {
		c.svc.tunnels.close()
	}
	if c.ownHost && c.h != nil {
		errs = append(errs, c.h.Close())
	}
	return errors.Join(errs...)
}

// clean expands "@" and cleans name, converting it to Unicode NFC: nodes
// hold names in NFC only, so the name a user types finds the file whichever
// form the user's system typed it in.
func (c *Client) clean(name spindle.PathName) (spindle.Parsed, error) {
	if err := sendable(string(name)); err != nil {
		return spindle.Parsed{}, err
	}
	return spindle.Parse(c.expand(spindle.PathName(norm.NFC.String(string(name)))))
}

// sendable reports whether name, a path name or pattern, can go to a node:
// the protocol carries names as CBOR text, which must be UTF-8, and no
// name is longer than dirlog.MaxNameLen. Refusing here names the problem;
// the node could only answer that the message was malformed.
func sendable(name string) error {
	if len(name) > dirlog.MaxNameLen {
		return spindle.E(spindle.Invalid, spindle.PathName(name), fmt.Sprintf("name too long: %d bytes, the limit is %d", len(name), dirlog.MaxNameLen))
	}
	if utf8.ValidString(name) {
		return nil
	}
	for _, elem := range strings.Split(name, "/") {
		for i, r := range elem {
			if r == utf8.RuneError && !strings.HasPrefix(elem[i:], string(utf8.RuneError)) {
				// Worded as spindle.CheckElem words it for a new name.
				return spindle.E(spindle.Invalid, spindle.PathName(name), fmt.Sprintf("element %q is not valid UTF-8 (byte %d)", elem, i))
			}
		}
	}
	return nil
}

// cleanFile is clean for the name of a file or link about to be written.
// A name whose last element is empty, "." or ".." names a directory, and
// "put F @/dir/w/" must fail rather than write the file w. The name must
// also be one a new file may take ([spindle.CheckName]); checking that
// before any block is stored keeps a bad name from costing an upload.
func (c *Client) cleanFile(name spindle.PathName) (spindle.Parsed, error) {
	p, err := c.clean(name)
	if err != nil {
		return p, err
	}
	s := string(name)
	last := s[strings.LastIndexByte(s, '/')+1:]
	if p.IsRoot() || last == "" || last == "." || last == ".." {
		return p, spindle.E(spindle.Invalid, name, "a directory path given for a file: the name ends in /, . or .. or is a root; name the file itself, as in dir/file")
	}
	if err := spindle.CheckName(p.Path()); err != nil {
		return p, err
	}
	return p, nil
}

// expand expands "@" alone or at the start of name to the user's root.
func (c *Client) expand(name spindle.PathName) spindle.PathName {
	s := string(name)
	if s == "@" || strings.HasPrefix(s, "@/") {
		s = string(c.user) + "/" + strings.TrimPrefix(s[1:], "/")
	}
	return spindle.PathName(s)
}

// Signup implements spindle.Client: it registers the user's key with the
// node as dir host, creates the user's root, and signs in.
//
// The key can be registered only before the node is asked to host the
// tree, since the node checks who signs in against the key cluster. If the
// node then refuses to host it (its -writers do not admit the user), the
// key stays registered and Signup fails with Permission, saying so; the
// node is taken off the record's dir hosts again if this call put it
// there, so that signing up with another node makes that one the first
// dir host, and a later Signup with this node, once it admits the user,
// adds it back and completes.
func (c *Client) Signup(ctx context.Context) error {
	return c.signup(ctx, nil, nil)
}

// SignupRequest returns the first key record Signup would register for
// the client's user, signed: under the key cluster's domain policy, the
// domain's admin countersigns it (keylog.GrantDigest), and SignupGranted
// registers it with that grant. The record must go unchanged: a record
// signed again is another record.
func (c *Client) SignupRequest() (*spindle.User, error) {
	u := &spindle.User{Name: c.user, PublicKey: c.keys.PublicKey(), DirHosts: []spindle.PeerAddr{p2p.PeerAddrOf(c.svc.peer)}, Version: 1}
	if err := keylog.Sign(u, c.keys); err != nil {
		return nil, spindle.E(spindle.Op("client.SignupRequest"), c.user, err)
	}
	return u, nil
}

// SignupGranted is Signup for a new name under the domain policy: it
// registers first, a record made by SignupRequest, with grant, the
// countersignature of the domain's admin key, and goes on as Signup. If
// the name is registered already, the grant is not needed and not used.
func (c *Client) SignupGranted(ctx context.Context, first *spindle.User, grant spindle.Signature) error {
	const op spindle.Op = "client.SignupGranted"
	if first == nil || first.Name != c.user || first.PublicKey != c.keys.PublicKey() || first.Version != 1 {
		return spindle.E(op, c.user, spindle.Invalid, "the granted record is not this user's first record with this key")
	}
	return c.signup(ctx, first, grant)
}

func (c *Client) signup(ctx context.Context, first *spindle.User, grant spindle.Signature) error {
	const op spindle.Op = "client.Signup"
	addr := p2p.PeerAddrOf(c.svc.peer)
	cur, err := c.lookupUser(ctx, c.user, true)
	added := false
	switch {
	case err == nil && cur.PublicKey != c.keys.PublicKey():
		return spindle.E(op, c.user, spindle.Exist, "the name is registered with another key")
	case err == nil:
		if !slices.Contains(cur.DirHosts, addr) {
			next := keylog.Next(cur)
			next.DirHosts = append(next.DirHosts, addr)
			if err := c.putUser(ctx, next); err != nil {
				return spindle.E(op, c.user, err)
			}
			added = true
		}
	case errors.Is(err, spindle.NotExist) && first != nil:
		if err := c.putSigned(ctx, first, grant); err != nil {
			return spindle.E(op, c.user, err)
		}
		added = slices.Contains(first.DirHosts, addr)
	case errors.Is(err, spindle.NotExist):
		u := &spindle.User{Name: c.user, PublicKey: c.keys.PublicKey(), DirHosts: []spindle.PeerAddr{addr}, Version: 1}
		if err := c.putUser(ctx, u); err != nil {
			return spindle.E(op, c.user, err)
		}
		added = true
	default:
		return spindle.E(op, c.user, err)
	}
	if err := c.auth(ctx); err != nil {
		return spindle.E(op, c.user, err)
	}
	root := spindle.PathName(string(c.user) + "/")
	_, err = c.dir.MakeDirectory(ctx, root)
	switch {
	case err == nil, errors.Is(err, spindle.Exist):
		return nil
	case errors.Is(err, spindle.Permission):
		cause := fmt.Errorf("your key is registered, but this node does not host your tree: %w", ErrNotAdmitted)
		if added {
			if derr := c.dropDirHost(ctx, addr); derr != nil {
				cause = fmt.Errorf("%w%s)", cause, because(" (and the node is still named as your dir host", derr))
			}
		}
		return spindle.E(op, c.user, spindle.Permission, cause)
	}
	return spindle.E(op, c.user, err)
}

// dropDirHost takes addr off the user's key record.
func (c *Client) dropDirHost(ctx context.Context, addr spindle.PeerAddr) error {
	cur, err := c.lookupUser(ctx, c.user, true)
	if err != nil {
		return err
	}
	next := keylog.Next(cur)
	next.DirHosts = slices.DeleteFunc(next.DirHosts, func(a spindle.PeerAddr) bool { return a == addr })
	return c.putUser(ctx, next)
}

func (c *Client) putUser(ctx context.Context, u *spindle.User) error {
	if err := keylog.Sign(u, c.keys); err != nil {
		return err
	}
	return c.putSigned(ctx, u, nil)
}

// leaderChange reports whether err is the key cluster's answer while its
// leader changes.
func leaderChange(err error) bool {
	return errors.Is(err, spindle.Transient) && strings.Contains(err.Error(), "leader")
}

// keyPutRetry bounds how long a record is put again while the key
// cluster answers Transient (a leader change).
const keyPutRetry = 10 * time.Second

// putSigned registers a signed record, with a domain admin's grant if
// not nil.
func (c *Client) putSigned(ctx context.Context, u *spindle.User, grant spindle.Signature) error {
	a, err := c.possession(u.Name, c.keys)
	if err != nil {
		return err
	}
	// A change of the key cluster's leader answers Transient; the same
	// signed record put again is no second change, so it is put again
	// for a few seconds, as an election takes. (Other Transient answers,
	// a node's limits on key changes and sign-ups, are not: trying again
	// would only spend the limit.)
	for deadline := time.Now().Add(keyPutRetry); ; {
		_, err = callAuth[wire.KeyPutRequest, wire.KeyPutResponse](ctx, c.svc, wire.KeyPut, a, &wire.KeyPutRequest{Record: keylog.EncodeRecord(u), Grant: grant})
		if !leaderChange(err) || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		c.log.Debug("key cluster busy; putting the record again", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	c.mu.Lock()
	delete(c.userKeys, u.Name)
	c.mu.Unlock()
	return err
}

// LookupUser implements spindle.Client.
func (c *Client) LookupUser(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	u, err := c.lookupUser(ctx, name, true)
	if err != nil {
		return nil, spindle.E(spindle.Op("client.LookupUser"), err)
	}
	cp := *u
	return &cp, nil
}

func (c *Client) lookupUser(ctx context.Context, name spindle.UserName, fresh bool) (*spindle.User, error) {
	name, err := spindle.CleanUser(name)
	if err != nil {
		return nil, err
	}
	if !fresh {
		c.mu.Lock()
		cu := c.userKeys[name]
		c.mu.Unlock()
		if cu.u != nil && time.Since(cu.at) < keyCacheTTL {
			return cu.u, nil
		}
	}
	var u *spindle.User
	if c.keyLog != nil {
		if !fresh {
			// A lookup afresh asks: it is made when a record may have
			// changed since an answer came.
			u, err = c.keptRecord(ctx, name)
		}
		if u == nil && err == nil {
			u, err = c.provedRecord(ctx, name)
		}
	} else {
		var resp *wire.KeyLookupResponse
		if resp, err = call[wire.KeyLookupRequest, wire.KeyLookupResponse](ctx, c.svc, wire.KeyLookup, "", &wire.KeyLookupRequest{User: name}); err == nil {
			u, err = keylog.DecodeRecord(resp.Record)
		}
	}
	if err != nil {
		return nil, err
	}
	if u.Name != name {
		return nil, spindle.E(name, spindle.Integrity, "key cluster answered with the record of "+string(u.Name))
	}
	c.mu.Lock()
	c.userKeys[name] = cachedUser{u, time.Now()}
	c.mu.Unlock()
	return u, nil
}

// keyCacheTTL is how long a client uses a key record it looked up before
// it looks again. A short-lived command never notices; a long-lived client
// (a mount, the web UI) wraps new files for a reader's rotated key within
// this time, and stops trusting a key its owner replaced.
var keyCacheTTL = time.Minute

// A cachedUser is a key record and when it was looked up.
type cachedUser struct {
	u  *spindle.User
	at time.Time
}

func (c *Client) userKey(ctx context.Context, name spindle.UserName) (spindle.PublicKey, error) {
	u, err := c.lookupUser(ctx, name, false)
	if err != nil {
		return "", err
	}
	return u.PublicKey, nil
}

// writerKeys returns the keys accepted for the writer's signature on e:
// the current key and, with history, the keys the writer held before a
// rotation, as the key cluster's log records them, that may sign e: an
// entry of the writer's own tree only up to the sequence number the
// rotation recorded (see dirlog.HeldKeys), so that files written before a
// rotation stay readable and a rotated-away key signs nothing new.
//
// at is where the writer signed e: its position in its tree and its
// anchor in the key log; a key the writer replaced signs only entries
// anchored before the record that replaced it, in every tree.
func (c *Client) writerKeys(ctx context.Context, e *spindle.DirEntry, at signedPos, history bool) ([]spindle.PublicKey, error) {
	cur, err := c.userKey(ctx, e.Writer)
	if err != nil {
		return nil, err
	}
	keys := []spindle.PublicKey{cur}
	if !history {
		return keys, nil
	}
	versions, index, err := c.provedHistoryAt(ctx, e.Writer)
	if errors.Is(err, spindle.Integrity) {
		return nil, err
	}
	if err != nil {
		return keys, nil // The current key still verifies everything written since.
	}
	tree, _, _ := strings.Cut(string(e.Name), "/")
	for _, h := range dirlog.HeldKeys(versions, index) {
		if h.Signs(e.Writer, spindle.UserName(tree), at.seq, at.keyAt, at.legacy) && !c.svc.puts.behind(spindle.UserName(tree), at) && !slices.Contains(keys, h.Key) {
			keys = append(keys, h.Key)
		}
	}
	return keys, nil
}

// tryWriterKeys calls try with the writer's current key and, if that
// fails with Integrity, again with every key the writer held that may have
// signed e (see writerKeys): most entries verify with the current key, and
// only for the others is the key history fetched. It returns try's last
// error, or why the keys could not be had.
func (c *Client) tryWriterKeys(ctx context.Context, e *spindle.DirEntry, at signedPos, try func([]spindle.PublicKey) error) error {
	var err error
	for _, history := range []bool{false, true} {
		keys, kerr := c.writerKeys(ctx, e, at, history)
		if kerr != nil {
			return fmt.Errorf("key of writer %s: %w", e.Writer, kerr)
		}
		if err = try(keys); err == nil || !errors.Is(err, spindle.Integrity) {
			return err
		}
	}
	return err
}

// Lookup implements spindle.Client.
func (c *Client) Lookup(ctx context.Context, name spindle.PathName, follow bool) (*spindle.DirEntry, error) {
	return onPath(c, "client.Lookup", name, func(p spindle.PathName) (*spindle.DirEntry, error) {
		return c.lookupTyped(ctx, name, p, follow)
	})
}

// lookupTyped is lookup of p, the clean NFC form of name, that falls back
// to name as typed (see asTyped).
func (c *Client) lookupTyped(ctx context.Context, name, p spindle.PathName, follow bool) (*spindle.DirEntry, error) {
	e, err := c.lookup(ctx, p, follow)
	if typed, ok := c.asTyped(name, p, err); ok {
		if e, terr := c.lookup(ctx, typed, follow); terr == nil {
			return e, nil
		}
	}
	return e, err
}

// maxLinkHops bounds the links followed in one lookup.
const maxLinkHops = 20

// lookup looks name up, following links beneath it, and the final link
// itself if follow is set.
func (c *Client) lookup(ctx context.Context, name spindle.PathName, follow bool) (*spindle.DirEntry, error) {
	for hops := 0; ; hops++ {
		if hops > maxLinkHops {
			return nil, spindle.E(name, spindle.BrokenLink, "too many links")
		}
		e, err := c.dir.Lookup(ctx, name)
		if err != nil {
			if e != nil && e.Attr.IsLink() && errors.Is(err, spindle.NotDir) {
				// name lies beneath the link e: continue from its target.
				rest, ok := under(name, e.Name)
				if !ok || rest == "" {
					return nil, spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered with link %s, which is not above the name", e.Name))
				}
				if err := c.verifyEntry(ctx, e); err != nil {
					return nil, err
				}
				name = spindle.PathName(string(e.Link) + rest)
				continue
			}
			return nil, err
		}
		if err := answerFor(e, name); err != nil {
			return nil, err
		}
		if err := c.verifyEntry(ctx, e); err != nil {
			return nil, err
		}
		if follow && e.Attr.IsLink() {
			name = e.Link
			continue
		}
		return e, nil
	}
}

// Glob implements spindle.Client.
func (c *Client) Glob(ctx context.Context, pattern string) ([]*spindle.DirEntry, error) {
	if err := sendable(pattern); err != nil {
		return nil, spindle.E(spindle.Op("client.Glob"), err)
	}
	pattern = norm.NFC.String(pattern) // Names are in NFC (see clean).
	if pattern == "@" || strings.HasPrefix(pattern, "@/") {
		pattern = string(c.user) + "/" + strings.TrimPrefix(pattern[1:], "/")
	}
	es, err := c.glob(ctx, pattern)
	if err != nil {
		return nil, spindle.E(spindle.Op("client.Glob"), spindle.PathName(pattern), err)
	}
	return es, nil
}

// glob asks the node for the entries matching pattern and checks each:
// that the pattern matches its name, and verifyEntry.
func (c *Client) glob(ctx context.Context, pattern string) ([]*spindle.DirEntry, error) {
	es, err := c.dir.Glob(ctx, pattern)
	if err != nil {
		return nil, err
	}
	if err := checkGlob(pattern, es); err != nil {
		return nil, err
	}
	for _, e := range es {
		if err := c.verifyEntry(ctx, e); err != nil {
			return nil, err
		}
	}
	return es, nil
}

// onPath cleans name and runs fn on the clean path, naming op and the
// path in any error.
func onPath[T any](c *Client, op spindle.Op, name spindle.PathName, fn func(spindle.PathName) (T, error)) (T, error) {
	var zero T
	p, err := c.clean(name)
	if err != nil {
		return zero, spindle.E(op, err)
	}
	v, err := fn(p.Path())
	if err != nil {
		return zero, spindle.E(op, p.Path(), err)
	}
	return v, nil
}

// MakeDirectory implements spindle.Client.
func (c *Client) MakeDirectory(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return onPath(c, "client.MakeDirectory", name, func(p spindle.PathName) (*spindle.DirEntry, error) {
		return c.dir.MakeDirectory(ctx, p)
	})
}

// Delete implements spindle.Client. A name stored before names had to be
// in NFC is deleted as typed if its NFC form does not exist.
func (c *Client) Delete(ctx context.Context, name spindle.PathName) error {
	_, err := onPath(c, "client.Delete", name, func(p spindle.PathName) (*spindle.DirEntry, error) {
		e, err := c.dir.Delete(ctx, p)
		if typed, ok := c.asTyped(name, p, err); ok {
			if e, terr := c.dir.Delete(ctx, typed); terr == nil {
				return e, nil
			}
		}
		return e, err
	})
	return err
}

// asTyped returns name cleaned but not converted to NFC, if that differs
// from p, its NFC form, and err says p does not exist: the name may be one
// stored before names had to be in NFC, which its owner must still be able
// to delete or rename.
func (c *Client) asTyped(name spindle.PathName, p spindle.PathName, err error) (spindle.PathName, bool) {
	if !errors.Is(err, spindle.NotExist) {
		return "", false
	}
	q, perr := spindle.Parse(c.expand(name))
	if perr != nil || q.Path() == p {
		return "", false
	}
	return q.Path(), true
}

// PutLink implements spindle.Client.
func (c *Client) PutLink(ctx context.Context, target, linkName spindle.PathName) (*spindle.DirEntry, error) {
	const op spindle.Op = "client.PutLink"
	t, err := c.clean(target)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	l, err := c.cleanFile(linkName)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	e, err := c.dir.PutLink(ctx, t.Path(), l.Path())
	if err != nil {
		return nil, spindle.E(op, l.Path(), err)
	}
	return e, nil
}

// Rename implements spindle.Client.
func (c *Client) Rename(ctx context.Context, oldName, newName spindle.PathName) error {
	const op spindle.Op = "client.Rename"
	o, err := c.clean(oldName)
	if err != nil {
		return spindle.E(op, err)
	}
	n, err := c.clean(newName)
	if err != nil {
		return spindle.E(op, err)
	}
	_, err = c.dir.Rename(ctx, o.Path(), n.Path())
	if typed, ok := c.asTyped(oldName, o.Path(), err); ok {
		if _, terr := c.dir.Rename(ctx, typed, n.Path()); terr == nil {
			err = nil
		}
	}
	if err != nil {
		return spindle.E(op, o.Path(), err)
	}
	return nil
}

// DirHead returns the head of owner's directory log as the node reports
// it. The node gives it only to a signed-in user with some right in the
// tree; others get Private.
func (c *Client) DirHead(ctx context.Context, owner spindle.UserName) (*dirlog.Head, error) {
	return c.svc.Head(ctx, owner)
}

// WhichAccess implements spindle.Client.
func (c *Client) WhichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	return onPath(c, "client.WhichAccess", name, func(p spindle.PathName) (*spindle.DirEntry, error) {
		return c.whichAccess(ctx, p)
	})
}

// Watch implements spindle.Client.
func (c *Client) Watch(ctx context.Context, name spindle.PathName, fromSeq int64) (<-chan spindle.Event, error) {
	return onPath(c, "client.Watch", name, func(p spindle.PathName) (<-chan spindle.Event, error) {
		return c.dir.Watch(ctx, p, fromSeq)
	})
}

// readAhead is the number of blocks an open file fetches ahead of a
// sequential reader. Fetching a block takes a round trip to the node and
// its disk; twelve in flight keep both busy through the stalls of a
// shared machine, for 13 MiB of buffers. (Over loopback TLS eight gave
// less throughput than sixteen; through the node's socket twelve and
// sixteen were alike, and twelve keeps the CLI's memory lower:
// docs/performance.md.)
const readAhead = 12

// Open implements spindle.Client.
func (c *Client) Open(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	const op spindle.Op = "client.Open"
	p, err := c.clean(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	ctx, gossip := deferGossip(ctx)
	if c.takesBlocks.Load() && c.blocks != nil {
		ctx, _ = withLookupBlocks(ctx)
	}
	f, err := c.open(ctx, p.Path(), name)
	if gerr := gossip.wait(); err == nil && gerr != nil {
		f.Close()
		f, err = nil, gerr
	}
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	return f, nil
}

// open is Open of the clean name p, which the user named name.
func (c *Client) open(ctx context.Context, p, name spindle.PathName) (spindle.File, error) {
	e, err := c.lookupTyped(ctx, name, p, true)
	if err != nil {
		return nil, err
	}
	if e.Attr.IsDir() {
		return nil, spindle.E(spindle.IsDir)
	}
	if e.Attr.IsIncomplete() {
		return nil, spindle.E(spindle.Permission, "you may list this file but not read it")
	}
	if isRules(e.Name) {
		// lookup verified the text as the owner's.
		return newInlineFile(e), nil
	}
	r, err := c.openFile(ctx, e)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// openFile opens the file e, which lookup returned, checking its writer's
// signature and, as it reads, each block.
func (c *Client) openFile(ctx context.Context, e *spindle.DirEntry) (*pack.Reader, error) {
	var r *pack.Reader
	get := c.fetcher()
	if lb := lookupBlocksOf(ctx); lb != nil {
		get = lb.fetcher(get)
	}
	err := c.tryWriterKeys(ctx, e, c.svc.puts.signedAt(e), func(wkeys []spindle.PublicKey) (err error) {
		r, err = pack.NewReader(ctx, e, pack.ReadConfig{
			Keys:       c.keys,
			WriterKeys: wkeys,
			Get:        get, // pack.Reader checks each block's hash and tag itself.
			GetStripe:  c.getStripe,
			Release:    p2p.RecycleBlock,
			ReadAhead:  cmp.Or(c.ahead, readAhead),
			Refetch:    c.refetch,
		})
		return err
	})
	return r, err
}

// Readers implements spindle.Client.
func (c *Client) Readers(ctx context.Context, name spindle.PathName) ([]spindle.UserName, error) {
	const op spindle.Op = "client.Readers"
	p, err := c.clean(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	e, err := c.lookupTyped(ctx, name, p.Path(), true)
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	// Without the readers, the owner and writer are still named.
	readers, groups, rerr := c.readerUsers(ctx, e.Name)
	wrapped, unknown, err := c.wrappedUsers(ctx, e, readers)
	if err != nil {
		return nil, spindle.E(op, p.Path(), err)
	}
	var w warnings
	if rerr != nil {
		w.add(spindle.E(e.Name, spindle.KindOf(rerr), because("cannot work out who may read it", rerr)))
	}
	for _, g := range groups {
		w.group("that grants read on "+string(e.Name), pathOf(g), g)
	}
	if len(unknown) > 0 {
		w.add(spindle.E(e.Name, keyHolders(len(unknown))))
	}
	return wrapped, w.err()
}

// inlineFile is an Access or Group file, whose text is in its entry.
type inlineFile struct {
	*strings.Reader
	e *spindle.DirEntry
}

func newInlineFile(e *spindle.DirEntry) *inlineFile {
	return &inlineFile{Reader: strings.NewReader(string(e.Inline)), e: e}
}

func (f *inlineFile) Entry() *spindle.DirEntry { return f.e }
func (f *inlineFile) Close() error             { return nil }

var _ io.ReaderAt = (*inlineFile)(nil)

// pathDir returns the directory of a clean path name.
func pathDir(name spindle.PathName) spindle.PathName {
	p, err := spindle.Parse(name)
	if err != nil {
		return spindle.PathName(path.Dir(string(name)))
	}
	return p.Dir().Path()
}

// keyHolders says that n key holders could not be named, in a warning.
func keyHolders(n int) string {
	if n == 1 {
		return "1 key holder could not be named"
	}
	return fmt.Sprintf("%d key holders could not be named", n)
}
