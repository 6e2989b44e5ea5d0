package node

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
)

// gatewayWithFile starts a node whose gateway serves a public file of
// size random bytes, and returns the gateway's address, the file's name
// on it and its contents.
func gatewayWithFile(t *testing.T, size int) (addr, name string, data []byte) {
	t.Helper()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	c := dialAs(t, n, "ann@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.MakeDirectory(ctx, ann("pub")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, ann("pub/Access"), strings.NewReader("r: all\n*: ann@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	data = make([]byte, size)
	rand.Read(data)
	if _, err := c.Put(ctx, ann("pub/big.bin"), strings.NewReader(string(data)), 0, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, gstop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	rd := newGatewayReader(t, n)
	go func() { served <- n.ServeGateway(gctx, ln, rd) }()
	t.Cleanup(func() {
		gstop()
		if err := <-served; err != nil {
			t.Errorf("ServeGateway: %v", err)
		}
	})
	return ln.Addr().String(), "ann@example.com/pub/big.bin", data
}

// openFiles returns the number of file descriptors the process holds.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(ents)
}

// needFiles raises the process's limit of open files to at least n, or
// skips the test.
func needFiles(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot read the limit of open files: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	if lim.Max < n {
		t.Skipf("this test holds %d open files; the hard limit is %d (raise it with ulimit -Hn)", n, lim.Max)
	}
	old := lim
	lim.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("cannot raise the limit of open files to %d: %v", n, err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// dialMany opens n connections to addr, 64 at a time, and returns them;
// the test closes them when it ends.
func dialMany(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 64 {
		wg.Go(func() {
			d := net.Dialer{Timeout: 10 * time.Second}
			for i := range next {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					continue
				}
				conns[i] = c
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	close(errs)
	for err := range errs {
		t.Fatalf("dialing the gateway: %v", err)
	}
	return conns
}

// gatewayFetch asks the gateway at addr for name with a new connection and
// returns the status and body.
func gatewayFetch(ctx context.Context, addr, name, rng string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/"+name, nil)
	if err != nil {
		return nil, nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

// Ten thousand idle connections from one address, more than the node
// could hold open, leave the gateway serving: it holds at most
// GatewayLimits().PerAddr of them, giving way to new connections, and a
// real request is answered at once.
func TestGatewayTenThousandIdleConnectionsLeaveItServing(t *testing.T) {
	if testing.Short() {
		t.Skip("holds ten thousand connections")
	}
	const idle = 10000
	lim := GatewayLimits()
	needFiles(t, idle+uint64(lim.Conns)+1024)
	addr, name, data := gatewayWithFile(t, 64<<10)
	before := openFiles(t)
	start := time.Now()
	dialMany(t, addr, idle)
	dialed := time.Since(start)

	// Every connection is accepted and the server's ends beyond the cap
	// closed: wait until the count of open files settles.
	var held int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		held = openFiles(t) - before - idle
		if held <= lim.PerAddr || time.Now().After(deadline) {
			break
		}
	}
	if held > lim.PerAddr+8 {
		t.Fatalf("after %d idle connections the gateway holds %d open (cap %d from one address)", idle, held, lim.PerAddr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	resp, body, err := gatewayFetch(ctx, addr, name, "")
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("a real request among %d idle connections: %v", idle, err)
	}
	if resp.StatusCode != 200 || string(body) != string(data) {
		t.Fatalf("a real request among %d idle connections: status %d, %d bytes, want 200 and %d", idle, resp.StatusCode, len(body), len(data))
	}
	if took > 2*time.Second {
		t.Errorf("a real request among %d idle connections took %v, want under 2s", idle, took)
	}
	t.Logf("%d idle connections dialed in %v; gateway holds %d; a real request took %v", idle, dialed.Round(time.Millisecond), held, took.Round(time.Millisecond))
}

// gatewayBodyMemory bounds the growth of the live heap when 800 clients
// ask for a large file and never read: at most gatewayBodiesPerAddr
// answers from one address are under way, each holding the reader's
// ReadAhead+1 blocks and copy buffers, and the other connections hold
// only their HTTP buffers.
const gatewayBodyMemory = 32 << 20

// Eight hundred clients that ask for a 16 MiB file and never read keep
// the node's heap within gatewayBodyMemory of what it was.
func TestGatewayNeverReadingClientsBoundMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 800 connections")
	}
	const clients = 800
	needFiles(t, 4*clients+1024)
	addr, name, _ := gatewayWithFile(t, 16<<20)
	// The live heap: what the node holds, not garbage it has yet to
	// collect.
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	base := heap()
	peak := base
	sample := func() {
		if h := heap(); h > peak {
			peak = h
		}
		if peak > base+gatewayBodyMemory {
			t.Fatalf("live heap grew by %d MiB with never-reading clients, bound %d MiB", (peak-base)>>20, gatewayBodyMemory>>20)
		}
	}
	req := "GET /" + name + " HTTP/1.1\r\nHost: gateway\r\n\r\n"
	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for i := range clients {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		conns = append(conns, c)
		c.(*net.TCPConn).SetReadBuffer(4 << 10)
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Write([]byte(req)) // A connection refused may fail here.
		if i%20 == 0 {
			sample()
		}
	}
	// Let the answers run into the clients' full windows.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		sample()
	}
	// The node still answers: at most the bodies of one address are
	// taken, and a request from the same address is told so at once.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, body, err := gatewayFetch(ctx, addr, name, "bytes=0-9")
	if err != nil {
		t.Fatalf("a request among the never-reading clients: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "at most") {
		t.Errorf("a request from the address whose clients hold every place: status %d %q, want 503 naming the bound", resp.StatusCode, body)
	}
	sample()
	t.Logf("%d never-reading clients: live heap %d MiB, at most %d MiB more (bound %d MiB)", clients, base>>20, (peak-base)>>20, gatewayBodyMemory>>20)
}

// cpuTime returns the CPU time the process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// A Range header of thousands of one-byte parts alternating between two
// blocks, which made every part read and verify its block again, is
// refused at once; sixteen such parts are served, each block read once;
// overlapping and adjacent parts are merged into one.
func TestGatewayManyRangePartsAreRefusedOrMerged(t *testing.T) {
	const block = spindle.MaxBlockSize
	addr, name, data := gatewayWithFile(t, 3*block)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var parts []string
	for i := range 1000 {
		off := int64(2 * i)
		if i%2 == 1 {
			off += block
		}
		parts = append(parts, fmt.Sprintf("%d-%d", off, off))
	}
	cpu := cpuTime(t)
	resp, body, err := gatewayFetch(ctx, addr, name, "bytes="+strings.Join(parts, ","))
	used := cpuTime(t) - cpu
	if err != nil {
		t.Fatalf("%d parts: %v", len(parts), err)
	}
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || !strings.Contains(string(body), "at most 16") {
		t.Fatalf("%d parts: status %d %q, want 416 naming the bound", len(parts), resp.StatusCode, body)
	}
	if used > 500*time.Millisecond {
		t.Errorf("refusing %d parts took %v of CPU, want under 500ms", len(parts), used)
	}
	t.Logf("refusing %d one-byte parts took %v of CPU (the whole process)", len(parts), used)

	// Sixteen parts, alternating between the first and the third block.
	parts = parts[:0]
	var want [][]byte
	for i := range 16 {
		off := int64(100 * i)
		if i%2 == 1 {
			off += 2 * block
		}
		parts = append(parts, fmt.Sprintf("%d-%d", off, off+9))
		want = append(want, data[off:off+10])
	}
	cpu = cpuTime(t)
	resp, body, err = gatewayFetch(ctx, addr, name, "bytes="+strings.Join(parts, ","))
	used = cpuTime(t) - cpu
	if err != nil {
		t.Fatalf("16 parts: %v", err)
	}
	if resp.StatusCode != http.StatusPartialContent {
		t.Fatalf("16 parts: status %d %q, want 206", resp.StatusCode, body)
	}
	_, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil {
		t.Fatal(err)
	}
	mr := multipart.NewReader(strings.NewReader(string(body)), params["boundary"])
	got := map[string]bool{}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		got[string(b)] = true
	}
	for i, w := range want {
		if !got[string(w)] {
			t.Errorf("16 parts: part %d (%s) missing from the answer", i, parts[i])
		}
	}
	t.Logf("serving 16 parts over two blocks took %v of CPU", used)

	// A hundred adjacent one-byte parts and one that overlaps them are
	// one part.
	parts = parts[:0]
	for i := range 100 {
		parts = append(parts, fmt.Sprintf("%d-%d", i, i))
	}
	parts = append(parts, "50-149")
	resp, body, err = gatewayFetch(ctx, addr, name, "bytes="+strings.Join(parts, ","))
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 0-149/%d", len(data)) || string(body) != string(data[:150]) {
		t.Errorf("adjacent parts: status %d, Content-Range %q, %d bytes; want 206, bytes 0-149/%d and 150 bytes", resp.StatusCode, resp.Header.Get("Content-Range"), len(body), len(data))
	}
}

// mergeRanges merges, sorts and bounds the parts of a Range header, and
// leaves what it cannot parse to http.ServeContent.
func TestMergeRanges(t *testing.T) {
	for _, tc := range []struct {
		h, want string
		err     bool
	}{
		{h: "bytes=0-9", want: "bytes=0-9"},
		{h: "bytes=10-19,0-9", want: "bytes=0-19"},
		{h: "bytes=0-9, 5-30 ,40-", want: "bytes=0-30,40-99"},
		{h: "bytes=-10,0-0", want: "bytes=0-0,90-99"},
		{h: "bytes=95-200", want: "bytes=95-99"},
		{h: "bytes=200-300", want: "bytes=200-300"}, // Beyond the end: ServeContent answers 416.
		{h: "bytes=5-2", want: "bytes=5-2"},
		{h: "items=0-1", want: "items=0-1"},
		{h: "bytes=" + strings.Repeat("0-0,2-2,", 512), want: "bytes=0-0,2-2"},
		{h: "bytes=" + strings.Repeat("0-0,2-2,", 512) + "4-4", err: true},
		{h: func() string {
			var b strings.Builder
			b.WriteString("bytes=")
			for i := range 17 {
				fmt.Fprintf(&b, "%d-%d,", 2*i, 2*i)
			}
			return b.String()
		}(), err: true},
	} {
		got, err := mergeRanges(tc.h, 100)
		if (err != nil) != tc.err || !tc.err && got != tc.want {
			t.Errorf("mergeRanges(%.40q): %q, %v; want %q, error %v", tc.h, got, err, tc.want, tc.err)
		}
	}
}

// The places for answers with contents are bounded per address and in
// all, and given back once.
func TestGatewayBodySlots(t *testing.T) {
	b := newBodySlots(2, 3)
	r1, err := b.take("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.take("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.take("a"); err == nil || !strings.Contains(err.Error(), "at most 2 files at once to one address") {
		t.Fatalf("a third answer to one address: %v", err)
	}
	if _, err := b.take("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.take("c"); err == nil || !strings.Contains(err.Error(), "at most 3 files at once") {
		t.Fatalf("a fourth answer in all: %v", err)
	}
	r1()
	r1()
	if _, err := b.take("c"); err != nil {
		t.Fatalf("after one was given back: %v", err)
	}
	if _, err := b.take("d"); err == nil {
		t.Fatal("a place given back twice counted twice")
	}
}

// Config.GatewayPerAddr, set by spin node -gatewayconns, takes the place
// of the default cap on one address's connections.
func TestGatewayPerAddrConfigured(t *testing.T) {
	const perAddr, idle = 4, 40
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), NoSocket: true, Writers: []string{"all"}, Logger: testLogger(t), GatewayPerAddr: perAddr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, gstop := context.WithCancel(context.Background())
	defer gstop()
	go n.ServeGateway(gctx, ln, newGatewayReader(t, n))
	before := openFiles(t)
	dialMany(t, ln.Addr().String(), idle)
	// The server takes the connections from its backlog within moments;
	// then count its ends (the idle ones are not cut for 10 s).
	time.Sleep(time.Second)
	held := openFiles(t) - before - idle
	if held > perAddr+2 {
		t.Fatalf("after %d idle connections the gateway holds %d open; configured cap %d from one address", idle, held, perAddr)
	}
}
