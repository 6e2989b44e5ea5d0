package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client/ui"
	"spindle.dev/node"
)

const uiUsage = `Usage:
    spin ui [-listen ADDR]

Serves a web app on this machine, for you alone, in which you browse your
files and anyone's you may read, look at your pictures, upload by drag and
drop, make folders, rename, delete, make links, and share folders with
people by ticking boxes. It prints the address to open in your browser,
which starts with a secret: keep it to yourself. It runs until
interrupted.

The app listens on loopback only, answers only addresses that start with
the secret, and changes things only for requests from its own pages, so
that neither another account on this machine nor a web site open in your
browser can use it. Thumbnails are made on this machine and kept beside
your configuration (CONFIG.ui), with the secret, which stays the same
from one run to the next.

Options:
    -listen ADDR   loopback address and port to listen on (default
                   127.0.0.1:7448; 127.0.0.1:0 picks a free port)
    -h, -help      print this text

Example:
    $ spin ui
    http://127.0.0.1:7448/5f3c0e.../
`

func runUI(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	listen := flags.String("listen", "127.0.0.1:7448", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return usagef("unexpected argument %q", flags.Arg(0))
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return usagef("-listen %s: want HOST:PORT", *listen)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return usagef("-listen %s: spin ui listens on loopback only (127.0.0.1, [::1] or localhost)", *listen)
	}
	cfg, err := st.loadConfig()
	if err != nil {
		return err
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	cache := stateFile(cfg.File, "ui")
	if cfg.File == "" {
		h, err := st.home()
		if err != nil {
			return err
		}
		cache = filepath.Join(h, "spin", "ui")
	}
	// The secret is kept, so that a bookmark of the address keeps working.
	secretFile := filepath.Join(cache, "secret")
	secret, _ := os.ReadFile(secretFile)
	srv, err := ui.New(ui.Config{Client: c, CacheDir: cache, Logger: st.Log, Secret: strings.TrimSpace(string(secret))})
	if err != nil && len(secret) > 0 {
		// A damaged secret file: start with a new secret.
		srv, err = ui.New(ui.Config{Client: c, CacheDir: cache, Logger: st.Log})
	}
	if err != nil {
		st.errorf("%v", err)
		return errFailed
	}
	if string(secret) != srv.Secret()+"\n" {
		if err := spindle.ReplaceFile(secretFile, []byte(srv.Secret()+"\n"), 0o600, true); err != nil {
			st.errorf("%v", err)
			return errFailed
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		st.errorf("%v", err)
		st.hint("another program listens there; give spin ui another port, e.g. -listen 127.0.0.1:0")
		return errFailed
	}
	hs, ln := node.NewHTTPServer(ln, srv.Handler(), uiLimits())
	fmt.Fprintln(st.Stdout, srv.URL(ln.Addr().String()))
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(sctx)
		return nil
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		st.errorf("%v", err)
		return errFailed
	}
}

// uiLimits returns the limits of spin ui's server. It listens on loopback
// and answers only its secret, but any program on the machine can open
// connections to it: each phase of a connection has a timeout, and the
// connections are capped. A browser sends its requests at once and
// reopens a connection closed while idle; an upload or a download may
// take as long as it keeps moving.
func uiLimits() node.HTTPLimits {
	return node.HTTPLimits{
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       20 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		MaxHeaderBytes:    64 << 10,
		PerAddr:           128,
		Conns:             256,
	}
}
