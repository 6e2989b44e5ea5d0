package node

import (
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// What a stranger may hold of an HTTP server the node runs (the gateway)
// or spin ui runs: every phase of a connection has a timeout, the
// connections one address and all addresses may hold are capped, and an
// idle connection gives way to a new one.

// HTTPLimits bounds what the clients of an HTTP server may cost it.
type HTTPLimits struct {
	// ReadHeaderTimeout bounds the reading of a request's header, and
	// IdleTimeout the wait for the next request on a connection kept
	// alive.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// ReadTimeout bounds each read of a request's body, and WriteTimeout
	// each write of an answer: a client that sends or takes nothing for
	// that long is cut off, while one that keeps going may take as long
	// as a large file needs.
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes int
	// PerAddr bounds the connections open from one IP address, and
	// Conns those open in all. A connection beyond either is taken in
	// place of the connection of that address (or of any) that has
	// waited longest for a request, and refused (closed at once) if
	// every one is busy with a request.
	PerAddr int
	Conns   int
}

// GatewayLimits returns the limits of the gateway, which serves anyone,
// for GET and HEAD only.
func GatewayLimits() HTTPLimits {
	return HTTPLimits{
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       30 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		PerAddr:           64,
		Conns:             1024,
	}
}

// NewHTTPServer returns a server of h bounded by lim, and ln wrapped to
// hold lim's caps on connections: serve it with srv.Serve(l).
func NewHTTPServer(ln net.Listener, h http.Handler, lim HTTPLimits) (srv *http.Server, l net.Listener) {
	cl := newConnLimiter(ln, lim.PerAddr, lim.Conns)
	srv = &http.Server{
		Handler:           progressDeadlines(h, lim.ReadTimeout, lim.WriteTimeout),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		ConnState:         cl.connState,
	}
	return srv, cl
}

// progressDeadlines wraps h so that each read of a request's body must
// progress within read, and each write of the answer within write.
func progressDeadlines(h http.Handler, read, write time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: write}
		dw.extend()
		// The answer is flushed after h returns: give it time too.
		defer dw.extend()
		if read > 0 && r.Body != nil && r.Body != http.NoBody {
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, d: read}
		}
		h.ServeHTTP(dw, r)
	})
}

// A deadlineWriter moves the write deadline before each write.
type deadlineWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	d  time.Duration
}

func (w *deadlineWriter) extend() {
	if w.d > 0 {
		w.rc.SetWriteDeadline(time.Now().Add(w.d))
	}
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *deadlineWriter) Flush() {
	w.extend()
	w.rc.Flush()
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A deadlineBody moves the read deadline before each read.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	// Once the body is read to its end, net/http clears the deadline
	// itself as it reads on in the background.
	return b.ReadCloser.Read(p)
}

// A connLimiter is a listener that caps the connections open from one
// address and in all (see HTTPLimits.PerAddr).
type connLimiter struct {
	net.Listener
	perAddr, max int

	mu      sync.Mutex // Guards open and perIP, and each conn's idle, since and counted.
	open    map[*limitedConn]struct{}
	perIP   map[string]int
	refused atomic.Int64 // Connections closed at once, every one busy.
	evicted atomic.Int64 // Idle connections closed to make room.
}

func newConnLimiter(ln net.Listener, perAddr, max int) *connLimiter {
	return &connLimiter{Listener: ln, perAddr: perAddr, max: max, open: make(map[*limitedConn]struct{}), perIP: make(map[string]int)}
}

// A limitedConn is a connection a connLimiter counts until it is closed.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	ip      string
	idle    bool      // Waiting for a request.
	since   time.Time // Of the last change of idle.
	counted bool      // In l.open.
	once    sync.Once
}

// Accept implements net.Listener.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := c.RemoteAddr().String()
		if h, _, err := net.SplitHostPort(ip); err == nil {
			ip = h
		}
		lc := &limitedConn{Conn: c, l: l, ip: ip, idle: true, since: time.Now()}
		victim, ok := l.admit(lc)
		if victim != nil {
			l.evicted.Add(1)
			victim.Conn.Close()
		}
		if !ok {
			l.refused.Add(1)
			c.Close()
			continue
		}
		return lc, nil
	}
}

// admit counts c if the caps allow it, or if an idle connection (of c's
// address if that cap is reached) can make room, which it returns to be
// closed, uncounted already.
func (l *connLimiter) admit(c *limitedConn) (victim *limitedConn, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sameIP := l.perAddr > 0 && l.perIP[c.ip] >= l.perAddr
	if sameIP || l.max > 0 && len(l.open) >= l.max {
		for o := range l.open {
			if o.idle && (!sameIP || o.ip == c.ip) && (victim == nil || o.since.Before(victim.since)) {
				victim = o
			}
		}
		if victim == nil {
			return nil, false
		}
		l.uncount(victim)
	}
	c.counted = true
	l.open[c] = struct{}{}
	l.perIP[c.ip]++
	return victim, true
}

// uncount stops counting c. l.mu is held.
func (l *connLimiter) uncount(c *limitedConn) {
	if !c.counted {
		return
	}
	c.counted = false
	delete(l.open, c)
	if l.perIP[c.ip]--; l.perIP[c.ip] <= 0 {
		delete(l.perIP, c.ip)
	}
}

// connState follows the connections of an http.Server (its ConnState).
func (l *connLimiter) connState(c net.Conn, s http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	lc.idle = s == http.StateNew || s == http.StateIdle
	lc.since = time.Now()
	l.mu.Unlock()
}

// Close implements net.Conn. It stops counting the connection once,
// however often it is called.
func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.uncount(c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// stats returns the connections open, and those refused and evicted so far.
func (l *connLimiter) stats() (open int, refused, evicted int64) {
	l.mu.Lock()
	open = len(l.open)
	l.mu.Unlock()
	return open, l.refused.Load(), l.evicted.Load()
}
