package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/node/media"
	"spindle.dev/pack"
)

// The gateway hands files to people who run no Spindle: over plain HTTP,
// at /USER/PATH, it serves the files the Access rules let all read and
// whose key is wrapped for all, and nothing else. Every other name,
// whether private, a directory, a link, missing or in a tree whose dir
// hosts cannot be reached, gets the same 404, so that the gateway never
// tells whether a private file exists.
//
// It works on any node, whether or not the node hosts the tree: it reads
// as the anonymous reader (see forward.go), through the network like any
// client through any peer: the tree's dir hosts answer, the holders of
// the blocks serve them, and every answer is checked as a client checks
// it.

// A PublicReader reads what all may read, checking every answer as a
// client does. The gateway reads with a client.Anonymous made with
// AnonSend and GetBlock, which whoever starts the gateway makes: package
// node cannot import package client, whose tests start nodes.
type PublicReader interface {
	// Lookup returns the entry at name, not following a link at its end.
	Lookup(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error)
	// WhichAccess returns the Access file that governs name, or nil.
	WhichAccess(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error)
	// OpenFile opens the file e, which Lookup returned.
	OpenFile(ctx context.Context, e *spindle.DirEntry) (spindle.File, error)
}

// GatewayHandler returns the HTTP handler of the gateway (see
// ServeGateway), which reads with rd.
func (n *Node) GatewayHandler(rd PublicReader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.serveGateway(w, r, rd)
	})
}

// AnonSend carries an encoded request of the client protocol (package
// node/wire) that an anonymous reader in this node sends to the node to:
// to this node's own protocol handler, or to another node.
func (n *Node) AnonSend(ctx context.Context, to peer.ID, data []byte) ([]byte, error) {
	if to == n.host.ID() {
		return n.ServeClient(ctx, to, data)
	}
	return n.callPeer(ctx, peer.AddrInfo{ID: to}, data)
}

// GetBlock fetches a block through the node's replica store: from this
// node, or from its holders, found through the DHT. It checks the hash.
func (n *Node) GetBlock(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	return n.replica.Get(ctx, ref)
}

// ServeGateway serves the gateway on ln, reading with rd, until ctx is
// cancelled or the node closes. It returns nil when stopped that way.
func (n *Node) ServeGateway(ctx context.Context, ln net.Listener, rd PublicReader) error {
	srv := &http.Server{
		Handler:           n.GatewayHandler(rd),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return n.ctx },
	}
	// Stop with ctx or the node; neither waiter outlives Serve.
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	stopNode := context.AfterFunc(n.ctx, func() { srv.Close() })
	defer stopNode()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// gatewayNotFound is the one answer for every name the gateway does not
// serve.
func gatewayNotFound(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusNotFound)
	w.Write([]byte("404 not found\n"))
}

func (n *Node) serveGateway(w http.ResponseWriter, r *http.Request, rd PublicReader) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	f, err := openPublic(r.Context(), rd, spindle.PathName(name))
	if err != nil {
		n.log.Debug("gateway: not served", "name", name, "err", err)
		gatewayNotFound(w)
		return
	}
	defer f.Close()
	e := f.Entry()
	ctype := media.Type(string(e.Name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("X-Content-Type-Options", "nosniff")
	// A file served here may be anything its owner put: keep it from
	// running scripts in the gateway's origin.
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self'; media-src 'self'; style-src 'unsafe-inline'")
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, "", e.Time.Go(), f)
}

// anonReader is the user an anonymous read acts as (see forward.go). It
// may register nowhere (.invalid is reserved), so what it may read, the
// Access rules grant everyone.
const anonReader spindle.UserName = "gateway@gateway.invalid"

// openPublic opens name if all may read it: the Access rules grant all
// read, and the file's key is wrapped for all (or it is not encrypted).
func openPublic(ctx context.Context, rd PublicReader, name spindle.PathName) (spindle.File, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, err
	}
	if p.IsRoot() {
		return nil, errors.New("a root is not a file")
	}
	// The dir hosts answer what all may read. That is checked here too:
	// only a grant of read to all, directly in the governing Access file,
	// opens a file.
	e, err := rd.Lookup(ctx, p.Path())
	if err != nil {
		return nil, err
	}
	if e.Attr.IsDir() || e.Attr.IsLink() || e.Attr.IsIncomplete() || e.Name != p.Path() ||
		access.IsAccessFile(e.Name) || access.IsGroupFile(e.Name) {
		return nil, errors.New("not a readable file")
	}
	ae, err := rd.WhichAccess(ctx, e.Name)
	if err != nil {
		return nil, err
	}
	if ae == nil {
		return nil, errors.New("no Access file: only the owner may read")
	}
	a, err := access.Parse(ae.Name, ae.Inline)
	if err != nil {
		return nil, err
	}
	readers, _, err := a.KnownUsers(access.Read, func(spindle.PathName) (*access.Group, error) {
		return nil, errors.New("the gateway follows no groups")
	})
	if err != nil {
		return nil, err
	}
	if !slices.Contains(readers, spindle.AllUsers) {
		return nil, errors.New("all may not read")
	}
	if e.Packing == spindle.EEPack {
		ok, err := pack.IsWrappedForAll(e)
		if err != nil || !ok {
			return nil, errors.New("key not wrapped for all")
		}
	}
	return rd.OpenFile(ctx, e)
}
