package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

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
// ServeGateway), which reads with rd. It answers at most
// gatewayBodiesPerAddr requests for a file's contents from one address at
// once and gatewayBodies in all (a reader holds a few blocks while it
// sends them), and at most maxRanges parts of a file in one request.
func (n *Node) GatewayHandler(rd PublicReader) http.Handler {
	b := newBodySlots(gatewayBodiesPerAddr, gatewayBodies)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.serveGateway(w, r, rd, b)
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
	lim := GatewayLimits()
	if n.cfg.GatewayPerAddr > 0 {
		lim.PerAddr = n.cfg.GatewayPerAddr
	}
	if n.cfg.GatewayConns > 0 {
		lim.Conns = n.cfg.GatewayConns
	}
	srv, ln := NewHTTPServer(ln, n.GatewayHandler(rd), lim)
	srv.BaseContext = func(net.Listener) context.Context { return n.ctx }
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

func (n *Node) serveGateway(w http.ResponseWriter, r *http.Request, rd PublicReader, bodies *bodySlots) {
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
	if rh := r.Header.Get("Range"); rh != "" {
		merged, err := mergeRanges(rh, e.Size)
		if err != nil {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", e.Size))
			http.Error(w, err.Error(), http.StatusRequestedRangeNotSatisfiable)
			return
		}
		r.Header.Set("Range", merged)
	}
	if r.Method == http.MethodGet {
		release, err := bodies.take(remoteIP(r.RemoteAddr))
		if err != nil {
			h.Set("Retry-After", "10")
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer release()
	}
	http.ServeContent(w, r, "", e.Time.Go(), f)
}

// remoteIP returns the host part of an HTTP request's RemoteAddr.
func remoteIP(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// Answers with a file's contents hold a reader and the blocks it reads
// ahead (client.AnonConfig.ReadAhead), whatever the client takes of them:
// at most gatewayBodiesPerAddr from one address at once, gatewayBodies in
// all. A client that stops reading is cut after the gateway's write
// timeout, which frees its place.
const (
	gatewayBodiesPerAddr = 8
	gatewayBodies        = 32
)

// bodySlots counts the answers with contents in progress.
type bodySlots struct {
	perAddr, max int

	mu    sync.Mutex // Guards n and perIP.
	n     int
	perIP map[string]int
}

func newBodySlots(perAddr, max int) *bodySlots {
	return &bodySlots{perAddr: perAddr, max: max, perIP: make(map[string]int)}
}

// take takes a place for an answer to ip, and returns the function that
// gives it back, or an error saying which bound is reached.
func (b *bodySlots) take(ip string) (release func(), err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.perIP[ip] >= b.perAddr:
		return nil, fmt.Errorf("busy: this gateway sends at most %d files at once to one address", b.perAddr)
	case b.n >= b.max:
		return nil, fmt.Errorf("busy: this gateway sends at most %d files at once", b.max)
	}
	b.n++
	b.perIP[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.n--
			if b.perIP[ip]--; b.perIP[ip] <= 0 {
				delete(b.perIP, ip)
			}
		})
	}, nil
}

// maxRanges bounds the parts of a file one request may ask for, once
// overlapping and adjacent parts are merged; maxRangeSpecs bounds the
// parts written in its Range header.
const (
	maxRanges     = 16
	maxRangeSpecs = 1024
)

// mergeRanges returns the Range header h, of a file of size bytes, with
// its parts sorted and those that overlap or touch merged into one, so
// that each block of the file is read once, in order. It refuses a header
// of more than maxRanges parts so merged, or of more than maxRangeSpecs
// parts before merging. A header it cannot parse is returned as it is,
// for http.ServeContent to answer as it answers any (it refuses them).
func mergeRanges(h string, size int64) (string, error) {
	const prefix = "bytes="
	if !strings.HasPrefix(h, prefix) {
		return h, nil
	}
	type part struct{ start, end int64 } // end exclusive
	var parts []part
	specs := 0
	for spec := range strings.SplitSeq(h[len(prefix):], ",") {
		spec = textproto.TrimString(spec)
		if spec == "" {
			continue
		}
		if specs++; specs > maxRangeSpecs {
			return "", fmt.Errorf("range: more than %d parts asked for; this gateway serves at most %d, once overlapping and adjacent parts are merged", maxRangeSpecs, maxRanges)
		}
		first, last, ok := strings.Cut(spec, "-")
		if !ok {
			return h, nil
		}
		first, last = textproto.TrimString(first), textproto.TrimString(last)
		var p part
		if first == "" {
			if last == "" || last[0] == '-' {
				return h, nil
			}
			n, err := strconv.ParseInt(last, 10, 64)
			if err != nil || n < 0 {
				return h, nil
			}
			p = part{max(size-n, 0), size}
		} else {
			i, err := strconv.ParseInt(first, 10, 64)
			if err != nil || i < 0 {
				return h, nil
			}
			p = part{i, size}
			if last != "" {
				j, err := strconv.ParseInt(last, 10, 64)
				if err != nil || j < i {
					return h, nil
				}
				p.end = min(j+1, size)
			}
		}
		if p.start >= size || p.start >= p.end {
			continue // Outside the file: ServeContent skips it too.
		}
		parts = append(parts, p)
	}
	if len(parts) == 0 {
		return h, nil
	}
	slices.SortFunc(parts, func(a, b part) int { return cmp.Compare(a.start, b.start) })
	merged := parts[:1]
	for _, p := range parts[1:] {
		if last := &merged[len(merged)-1]; p.start <= last.end {
			last.end = max(last.end, p.end)
			continue
		}
		merged = append(merged, p)
	}
	if len(merged) > maxRanges {
		return "", fmt.Errorf("range: %d parts once overlapping and adjacent ones are merged; this gateway serves at most %d", len(merged), maxRanges)
	}
	var b strings.Builder
	b.WriteString(prefix)
	for i, p := range merged {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d-%d", p.start, p.end-1)
	}
	return b.String(), nil
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
