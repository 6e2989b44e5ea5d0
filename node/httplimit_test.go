package node

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// waitClosed waits until the server closes c, or limit passes, and
// returns how long it took.
func waitClosed(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept a connection open for %v", limit)
	}
	return time.Since(start)
}

// Every phase of a connection has its timeout: a client that sends no
// request, half a header, half a body, or takes nothing of an answer, and
// a connection kept alive idle, are cut off after the limit, while the
// server keeps serving.
func TestHTTPLimitsCutIdleSlowAndStalledClients(t *testing.T) {
	const d = 500 * time.Millisecond
	lim := HTTPLimits{ReadHeaderTimeout: d, IdleTimeout: d, ReadTimeout: d, WriteTimeout: d, MaxHeaderBytes: 4 << 10, PerAddr: 16, Conns: 32}
	var mu sync.Mutex
	var readErr, writeErr error
	var wg sync.WaitGroup
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/upload":
			_, err := io.Copy(io.Discard, r.Body)
			mu.Lock()
			readErr = err
			mu.Unlock()
		case "/work":
			// Reads its body, then works longer than the read timeout.
			io.Copy(io.Discard, r.Body)
			time.Sleep(3 * d)
			if err := r.Context().Err(); err != nil {
				io.WriteString(w, "ended: "+err.Error())
				return
			}
			io.WriteString(w, "done")
		case "/big":
			chunk := make([]byte, 64<<10)
			var err error
			for i := 0; i < 4096 && err == nil; i++ { // 256 MiB at most.
				_, err = w.Write(chunk)
			}
			mu.Lock()
			writeErr = err
			mu.Unlock()
		default:
			io.WriteString(w, "ok")
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, l := NewHTTPServer(ln, h, lim)
	wg.Go(func() { srv.Serve(l) })
	t.Cleanup(func() { srv.Close(); wg.Wait() })
	addr := ln.Addr().String()
	dial := func(send string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if send != "" {
			io.WriteString(c, send)
		}
		return c
	}
	const slack = 5 * d
	for _, tc := range []struct{ name, send string }{
		{"no request", ""},
		{"half a header", "GET / HTTP/1.1\r\nHost: x\r\n"},
	} {
		if took := waitClosed(t, dial(tc.send), slack); took < d/2 {
			t.Errorf("%s: closed after %v, before the timeout %v", tc.name, took, d)
		}
	}

	// Kept alive idle after an answer.
	c := dial("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitClosed(t, c, slack)

	// Half a body.
	c = dial("POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	waitClosed(t, c, slack)
	mu.Lock()
	if readErr == nil {
		t.Error("a body that stopped halfway was read to its end without error")
	}
	mu.Unlock()

	// A handler that works on after reading its body is not cut off.
	c = dial("POST /work HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "done" {
		t.Errorf("a handler working on after reading its body: %q, want done", body)
	}

	// An answer nobody reads.
	c = dial("GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
	c.(*net.TCPConn).SetReadBuffer(4 << 10)
	deadline := time.Now().Add(slack + 2*time.Second)
	for {
		mu.Lock()
		err := writeErr
		mu.Unlock()
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server kept writing to a client that reads nothing")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// And the server still answers.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok" {
		t.Errorf("after the timeouts: %q", body)
	}
}

// The listener caps connections per address and in all, makes room by
// closing the longest idle one, refuses when every one is busy, and
// counts a connection closed twice once.
func TestConnLimiterCapsAndEvicts(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimiter(ln, 2, 3)
	defer l.Close()
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	next := func() net.Conn {
		t.Helper()
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("a connection within the caps was not accepted")
			return nil
		}
	}
	var clients []net.Conn
	dial := func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial()
	a := next()
	dial()
	b := next()
	l.connState(a, http.StateActive)
	// A third from the address: b, idle, gives way.
	dial()
	c := next()
	if open, refused, evicted := l.stats(); open != 2 || refused != 0 || evicted != 1 {
		t.Fatalf("after a third connection: %d open, %d refused, %d evicted; want 2, 0, 1", open, refused, evicted)
	}
	b.Close()
	b.Close()
	if open, _, _ := l.stats(); open != 2 {
		t.Fatalf("an evicted connection closed again changed the count to %d", open)
	}
	// Both busy: a fourth is refused.
	l.connState(c, http.StateActive)
	dial()
	waitFor(t, 5*time.Second, func() string { return "a refusal" }, func() bool { _, refused, _ := l.stats(); return refused == 1 })
	a.Close()
	a.Close()
	if open, _, _ := l.stats(); open != 1 {
		t.Fatalf("after closing one of two twice: %d open, want 1", open)
	}
}

// The gateway sets every timeout and cap, none longer than a minute.
func TestGatewayLimitsAreSet(t *testing.T) {
	lim := GatewayLimits()
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": lim.ReadHeaderTimeout, "IdleTimeout": lim.IdleTimeout, "ReadTimeout": lim.ReadTimeout, "WriteTimeout": lim.WriteTimeout} {
		if d <= 0 || d > time.Minute {
			t.Errorf("GatewayLimits().%s = %v, want within (0, 1m]", name, d)
		}
	}
	if lim.PerAddr <= 0 || lim.Conns < lim.PerAddr || lim.MaxHeaderBytes <= 0 {
		t.Errorf("GatewayLimits() caps: %d per address, %d in all, %d header bytes", lim.PerAddr, lim.Conns, lim.MaxHeaderBytes)
	}
}

// Beyond the cap in all, a connection from a new address takes the
// place of the longest idle one of any address, and is refused if every
// one is busy.
func TestConnLimiterTotalCap(t *testing.T) {
	l := newConnLimiter(nil, 2, 3)
	conns := make([]*limitedConn, 0, 5)
	at := time.Unix(1e9, 0)
	for i, ip := range []string{"a", "b", "c"} {
		c := &limitedConn{l: l, ip: ip, idle: true, since: at.Add(time.Duration(i) * time.Second)}
		if victim, ok := l.admit(c); !ok || victim != nil {
			t.Fatalf("connection %d within the caps: admitted %v, victim %v", i, ok, victim)
		}
		conns = append(conns, c)
	}
	d := &limitedConn{l: l, ip: "d", idle: true, since: at.Add(time.Hour)}
	victim, ok := l.admit(d)
	if !ok || victim != conns[0] {
		t.Fatalf("a fourth connection in all: admitted %v, victim %v; want the longest idle (a)", ok, victim)
	}
	for _, c := range append(conns[1:], d) {
		c.idle = false
	}
	if victim, ok := l.admit(&limitedConn{l: l, ip: "e"}); ok || victim != nil {
		t.Fatalf("a connection while every one is busy: admitted %v, victim %v", ok, victim)
	}
	if open, _, _ := l.stats(); open != 3 {
		t.Fatalf("%d connections counted, cap 3", open)
	}
}
