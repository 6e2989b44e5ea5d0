package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/node/media"
	"spindle.dev/pack"
)

// The gateway hands files to people who run no Spindle: over plain HTTP,
// at /USER/PATH, it serves the files the Access rules let all read and
// whose key is wrapped for all, and nothing else. Every other name,
// whether private, a directory, a link or missing, gets the same 404, so
// that the gateway never tells whether a private file exists.

// GatewayHandler returns the HTTP handler of the gateway (see
// ServeGateway).
func (n *Node) GatewayHandler() http.Handler {
	return http.HandlerFunc(n.serveGateway)
}

// ServeGateway serves the gateway on ln until ctx is cancelled or the
// node closes. It returns nil when stopped that way.
func (n *Node) ServeGateway(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           n.GatewayHandler(),
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return n.ctx },
	}
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	go func() {
		<-n.ctx.Done()
		srv.Close()
	}()
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

func (n *Node) serveGateway(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, "/")
	f, err := n.openPublic(r.Context(), spindle.PathName(name))
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

// gatewayUser is the user the gateway asks as.
const gatewayUser spindle.UserName = "gateway@gateway.invalid"

// openPublic opens name if all may read it: the Access rules grant all
// read, and the file's key is wrapped for all (or it is not encrypted).
func (n *Node) openPublic(ctx context.Context, name spindle.PathName) (spindle.File, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, err
	}
	if p.IsRoot() {
		return nil, errors.New("a root is not a file")
	}
	// gatewayUser may register nowhere (.invalid is reserved), so what it
	// may read, the Access rules grant everyone. That is checked below
	// too: only a grant of read to all, directly in the governing Access
	// file, opens a file here.
	e, err := n.dir.Lookup(ctx, gatewayUser, p.Path())
	if err != nil {
		return nil, err
	}
	if e.Attr.IsDir() || e.Attr.IsLink() || e.Attr.IsIncomplete() || e.Name != p.Path() ||
		access.IsAccessFile(e.Name) || access.IsGroupFile(e.Name) {
		return nil, errors.New("not a readable file")
	}
	ae, err := n.dir.WhichAccess(ctx, gatewayUser, e.Name)
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
	held, err := n.keyHistory(ctx, e.Writer)
	if err != nil {
		return nil, err
	}
	var wkeys []spindle.PublicKey
	for _, h := range held {
		wkeys = append(wkeys, h.Key)
	}
	return pack.NewReader(ctx, e, pack.ReadConfig{
		WriterKeys: wkeys,
		Get:        n.replica.Get,
	})
}
