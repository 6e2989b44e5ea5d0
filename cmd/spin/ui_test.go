package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// lockedBuffer is a buffer one goroutine writes while another reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUICommand runs spin ui: it prints a URL with its secret, serves the
// user's files there, and stops when interrupted.
func TestUICommand(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/pictures")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.ctx = ctx
	out := &lockedBuffer{}
	e.stdout = out
	done := make(chan int, 1)
	go func() {
		_, _, code := e.run("ui", "-listen", "127.0.0.1:0")
		done <- code
	}()
	var url string
	for deadline := time.Now().Add(30 * time.Second); url == "" && time.Now().Before(deadline); {
		select {
		case code := <-done:
			t.Fatalf("spin ui exited %d before printing its URL", code)
		case <-time.After(20 * time.Millisecond):
		}
		if s := out.String(); strings.HasSuffix(s, "\n") {
			url = strings.TrimSpace(s)
		}
	}
	host, secret, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	if !strings.HasPrefix(host, "127.0.0.1:") || len(secret) < 33 || !strings.HasSuffix(secret, "/") {
		t.Fatalf("spin ui printed %q, want its URL with the secret", url)
	}
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "pictures") {
		t.Errorf("the URL spin ui printed: status %d, page:\n%s", resp.StatusCode, page)
	}
	noSecret, err := http.Get("http://" + host + "/b/ann@example.com/")
	if err != nil {
		t.Fatal(err)
	}
	noSecret.Body.Close()
	if noSecret.StatusCode != http.StatusForbidden {
		t.Errorf("without the secret: status %d, want 403", noSecret.StatusCode)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("spin ui exited %d when interrupted, want 0", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("spin ui did not stop when interrupted")
	}
}

// TestUISecretKept checks that spin ui keeps its secret from one run to
// the next, so that a bookmark of its address works.
func TestUISecretKept(t *testing.T) {
	e := newEnv(t)
	urls := make([]string, 2)
	for i := range urls {
		ctx, cancel := context.WithCancel(context.Background())
		e.ctx = ctx
		out := &lockedBuffer{}
		e.stdout = out
		done := make(chan int, 1)
		go func() {
			_, _, code := e.run("ui", "-listen", "127.0.0.1:0")
			done <- code
		}()
		for deadline := time.Now().Add(30 * time.Second); !strings.HasSuffix(out.String(), "\n"); {
			if time.Now().After(deadline) {
				t.Fatal("spin ui printed no URL in 30 s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		<-done
		_, urls[i], _ = strings.Cut(strings.TrimSpace(out.String()), "/"+"/")
		_, urls[i], _ = strings.Cut(urls[i], "/")
	}
	if urls[0] != urls[1] || len(urls[0]) < 33 {
		t.Errorf("secrets of two runs: %q and %q, want one, kept", urls[0], urls[1])
	}
}

func TestUIListensOnLoopbackOnly(t *testing.T) {
	e := newEnv(t)
	for _, addr := range []string{"0.0.0.0:7448", "192.168.1.2:80", ":7448"} {
		_, errs, code := e.run("ui", "-listen", addr)
		if code != exitUsage || !strings.Contains(errs, "loopback only") {
			t.Errorf("spin ui -listen %s: exit %d, stderr %q; want a usage error about loopback", addr, code, errs)
		}
	}
}

// TestUIIdleConnectionsAreCut holds two thousand idle connections to spin
// ui: it keeps at most its cap from one address, closes every one that
// sends no request within its header timeout, and answers its user
// meanwhile.
func TestUIIdleConnectionsAreCut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds two thousand connections")
	}
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.ctx = ctx
	out := &lockedBuffer{}
	e.stdout = out
	done := make(chan int, 1)
	go func() {
		_, _, code := e.run("ui", "-listen", "127.0.0.1:0")
		done <- code
	}()
	t.Cleanup(func() { cancel(); <-done })
	for deadline := time.Now().Add(30 * time.Second); !strings.HasSuffix(out.String(), "\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("spin ui printed no URL in 30 s")
		}
	}
	url := strings.TrimSpace(out.String())
	host, _, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")

	const idle = 2000
	conns := make([]net.Conn, 0, idle)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	start := time.Now()
	for i := range idle {
		c, err := net.DialTimeout("tcp", host, 10*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
	}
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("the user's request among %d idle connections: %v", idle, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the user's request among %d idle connections: status %d", idle, resp.StatusCode)
	}
	// Each idle connection is closed by the header timeout at the latest,
	// which is a few seconds.
	const limit = 8 * time.Second
	var wg sync.WaitGroup
	var open atomic.Int64
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(start.Add(limit))
			if _, err := io.Copy(io.Discard, c); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					open.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := open.Load(); n > 0 {
		t.Errorf("%d of %d idle connections still open after %v (header timeout %v)", n, idle, limit, uiLimits().ReadHeaderTimeout)
	}
}
