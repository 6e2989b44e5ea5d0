// Package ui is spin ui: a web app on this machine through which a user who
// never types commands browses, views, uploads, manages and shares files.
// It is a client of a [spindle.Client], the same one the spin command
// uses, so it sees and does exactly what the user could with spin.
//
// # Who may use it
//
// The server listens on loopback only. Every address of the app starts
// with a random secret, /SECRET/, as a Jupyter URL carries its token: a
// request without it gets nothing. There is no cookie, since browsers
// send a cookie to every port of a host, a web server of another account
// on another loopback port included. Requests that change anything
// (every method but GET and HEAD) must also come from the app's own
// origin: an Origin header naming this server, or, without one,
// Sec-Fetch-Site same-origin. A Host header that is not loopback is
// refused, so that a web page cannot reach the server through a DNS name
// of its own. So neither another account on the machine (which lacks the
// secret) nor a web page open in the same browser (which can neither read
// the app's pages to learn the secret nor forge the origin of a request)
// can act through it. Pages send no Referer to other sites.
//
// Files are served with a Content-Security-Policy sandbox and nosniff,
// and anything but pictures, video, audio and plain text is sent as an
// attachment, so a file someone shared cannot run scripts in the app.
//
// # What it holds
//
// Nothing but thumbnails: they are made on this machine from the
// decrypted picture and kept in Config.CacheDir. Files stream to and
// from the client block by block; an upload of any size is never held
// in memory.
package ui

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
)

//go:embed static templates
var assets embed.FS

// A Config says what a Server serves.
type Config struct {
	// Client acts for the user. Required.
	Client spindle.Client
	// CacheDir holds the thumbnails. Required.
	CacheDir string
	// Logger receives one line per failed request; nil discards.
	Logger *slog.Logger
	// Secret is the secret of the URL; empty means a new random one.
	Secret string
}

// A Server is the web app of one user. Its Handler is safe for
// concurrent use.
type Server struct {
	c      spindle.Client
	user   spindle.UserName
	log    *slog.Logger
	secret string
	base   string // "/" + secret: what every address starts with.
	thumbs *thumbCache
	pages  *template.Template
	mux    *http.ServeMux
}

// New returns the web app for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("ui: Config.Client is required")
	}
	if cfg.CacheDir == "" {
		return nil, errors.New("ui: Config.CacheDir is required")
	}
	if err := os.MkdirAll(filepath.Join(cfg.CacheDir, "thumbs"), 0o700); err != nil {
		return nil, fmt.Errorf("ui: thumbnail cache: %w", err)
	}
	secret := cfg.Secret
	if strings.Trim(secret, "0123456789abcdefABCDEF") != "" || secret != "" && len(secret) < 16 {
		return nil, errors.New("ui: Config.Secret must be at least 16 hexadecimal digits")
	}
	if secret == "" {
		var b [24]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, err
		}
		secret = hex.EncodeToString(b[:])
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		c:      cfg.Client,
		user:   cfg.Client.User(),
		log:    log,
		secret: secret,
		base:   "/" + secret,
		thumbs: &thumbCache{dir: filepath.Join(cfg.CacheDir, "thumbs")},
	}
	pages, err := template.New("").Funcs(funcs(s.base)).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: templates: %w", err)
	}
	s.pages = pages
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", s.home)
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /b/{name...}", s.browse)
	m.HandleFunc("GET /v/{name...}", s.viewer)
	m.HandleFunc("GET /f/{name...}", s.file)
	m.HandleFunc("GET /t/{name...}", s.thumb)
	m.HandleFunc("GET /share/{name...}", s.sharePage)
	m.HandleFunc("GET /versions/{name...}", s.versionsPage)
	m.HandleFunc("GET /deleted/{name...}", s.deletedPage)
	m.HandleFunc("GET /go", s.goTo)
	m.HandleFunc("POST /api/put", s.put)
	m.HandleFunc("POST /api/mkdir", s.mkdir)
	m.HandleFunc("POST /api/rename", s.rename)
	m.HandleFunc("POST /api/delete", s.delete)
	m.HandleFunc("POST /api/link", s.link)
	m.HandleFunc("POST /api/share", s.share)
	m.HandleFunc("POST /api/fix", s.fix)
	m.HandleFunc("POST /api/restore", s.restore)
	s.mux = m
	return s, nil
}

// Secret returns the secret the URL carries.
func (s *Server) Secret() string { return s.secret }

// URL returns the address to open in a browser for a server listening
// on addr (host:port).
func (s *Server) URL(addr string) string {
	return "http://" + addr + s.base + "/"
}

// Handler returns the app's HTTP handler, with the checks the package
// comment describes in front of everything.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	// Not no-referrer: with it a browser sends "Origin: null" on form posts.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Content-Type-Options", "nosniff")
	if !loopbackHost(r.Host) {
		http.Error(w, "spin ui answers only at 127.0.0.1, localhost or [::1]", http.StatusForbidden)
		return
	}
	rest, ok := s.strip(r.URL.Path)
	if !ok {
		s.denied(w, "This address needs the secret that spin ui printed when it started: open the whole address it printed.")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
		s.denied(w, "This request came from another web site and was refused.")
		return
	}
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.Path, u.RawPath = rest, ""
	r2.URL = &u
	s.mux.ServeHTTP(w, r2)
}

// strip returns path without the secret it must start with.
func (s *Server) strip(path string) (string, bool) {
	first, rest, _ := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	if subtle.ConstantTimeCompare([]byte(first), []byte(s.secret)) != 1 {
		return "", false
	}
	return "/" + rest, true
}

func (s *Server) denied(w http.ResponseWriter, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintln(w, msg)
}

// sameOrigin reports whether a state-changing request r comes from a page
// of this server.
func sameOrigin(r *http.Request) bool {
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		return err == nil && u.Scheme == "http" && u.Host == r.Host && u.Path == "" && u.RawQuery == ""
	}
	return r.Header.Get("Sec-Fetch-Site") == "same-origin"
}

// loopbackHost reports whether the Host header names a loopback address.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// home sends the user to their own root.
func (s *Server) home(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, s.base+browseURL(spindle.PathName(string(s.user)+"/")), http.StatusSeeOther)
}

// goTo opens the tree or path the form names: a user name or a full path.
func (s *Server) goTo(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimSpace(r.URL.Query().Get("name"))
	if name != "" && !strings.Contains(name, "/") {
		name += "/"
	}
	http.Redirect(w, r, s.base+browseURL(spindle.PathName(name)), http.StatusSeeOther)
}

// pathValue returns the clean Spindle name of the request's {name}.
func (s *Server) pathValue(r *http.Request) (spindle.Parsed, error) {
	return spindle.Parse(spindle.PathName(r.PathValue("name")))
}

// escapePath escapes each element of name for use in a URL path.
func escapePath(name spindle.PathName) string {
	parts := strings.Split(string(name), "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func browseURL(name spindle.PathName) string { return "/b/" + escapePath(name) }
