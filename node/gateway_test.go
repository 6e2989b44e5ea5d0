package node

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

// gatewayReader makes the reader a node's gateway reads with, as spin node
// does.
func gatewayReader(t testing.TB) func(*Node) (PublicReader, error) {
	return func(n *Node) (PublicReader, error) {
		return client.NewAnonymous(client.AnonConfig{Node: n.Host().ID(), Send: n.AnonSend, Get: n.GetBlock, Verifier: n.VerifierKey(), Logger: testLogger(t)})
	}
}

// newGatewayReader is gatewayReader for n.
func newGatewayReader(t testing.TB, n *Node) PublicReader {
	t.Helper()
	rd, err := gatewayReader(t)(n)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// TestGateway checks that the gateway serves a file all may read, with its
// content type and ranges, and answers 404 alike for a private file, a
// directory, an Access file and a name that does not exist.
func TestGateway(t *testing.T) {
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	c := dialAs(t, n, "ann@example.com")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	put := func(name, data string) {
		t.Helper()
		if _, err := c.Put(ctx, ann(name), strings.NewReader(data), 0, nil); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	for _, d := range []string{"pub", "private"} {
		if _, err := c.MakeDirectory(ctx, ann(d)); err != nil {
			t.Fatal(err)
		}
	}
	put("pub/Access", "r: all\n*: ann@example.com\n")
	public := strings.Repeat("a picture of the sea. ", 1000)
	put("pub/sea.txt", public)
	put("private/Access", "r: bob@example.com\n*: ann@example.com\n")
	put("private/diary.txt", "dear diary")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	gctx, gstop := context.WithCancel(context.Background())
	rd := newGatewayReader(t, n)
	go func() { served <- n.ServeGateway(gctx, ln, rd) }()
	t.Cleanup(func() {
		gstop()
		if err := <-served; err != nil {
			t.Errorf("ServeGateway: %v", err)
		}
		// Stopped, it leaves nothing waiting for the node to close.
		waitGone(t, "spindle.dev/node.(*Node).ServeGateway")
	})
	base := "http://" + ln.Addr().String() + "/"
	get := func(name, rng string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", base+name, nil)
		if err != nil {
			t.Fatal(err)
		}
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}

	resp, body := get("ann@example.com/pub/sea.txt", "")
	if resp.StatusCode != 200 || string(body) != public {
		t.Fatalf("public file: status %d, %d bytes, want 200 and %d bytes", resp.StatusCode, len(body), len(public))
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("public file: Content-Type %q, want text/plain", ct)
	}
	resp, body = get("ann@example.com/pub/sea.txt", "bytes=100-199")
	if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, []byte(public[100:200])) {
		t.Errorf("range: status %d, body %q, want 206 and %q", resp.StatusCode, body, public[100:200])
	}

	notFound, nfBody := get("ann@example.com/pub/nosuch.txt", "")
	if notFound.StatusCode != 404 {
		t.Fatalf("missing file: status %d, want 404", notFound.StatusCode)
	}
	for _, name := range []string{
		"ann@example.com/private/diary.txt",
		"ann@example.com/private/nosuch.txt",
		"ann@example.com/private/",
		"ann@example.com/pub",
		"ann@example.com/pub/Access",
		"ann@example.com/",
		"nobody@example.com/x",
		"not a name",
	} {
		resp, body := get(name, "")
		if resp.StatusCode != 404 || !bytes.Equal(body, nfBody) {
			t.Errorf("%s: status %d, body %q; want 404 and %q", name, resp.StatusCode, body, nfBody)
		}
		for _, h := range []string{"Content-Type", "Content-Length"} {
			if resp.Header.Get(h) != notFound.Header.Get(h) {
				t.Errorf("%s: header %s %q differs from a missing file's %q", name, h, resp.Header.Get(h), notFound.Header.Get(h))
			}
		}
	}
}

// gatewayGet fetches name from the gateway at base and returns the status,
// the body, and the whole response as sent, without its Date line. It may
// be called from any goroutine.
func gatewayGet(t *testing.T, base, name string) (int, []byte, string) {
	t.Helper()
	resp, err := http.Get(base + name)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return 0, nil, ""
	}
	defer resp.Body.Close()
	dump, err := httputil.DumpResponse(resp, true)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return 0, nil, ""
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(dump), "\n") {
		if !strings.HasPrefix(l, "Date: ") {
			kept = append(kept, l)
		}
	}
	_, b, _ := strings.Cut(string(dump), "\r\n\r\n")
	return resp.StatusCode, []byte(b), strings.Join(kept, "")
}

// A gateway on a node that hosts no tree serves what all may read of a
// tree hosted elsewhere, as an anonymous reader: from the sequencer, then
// from a mirror once the sequencer is down. Every name all may not read,
// and a name whose dir hosts are all down, gets the byte-identical 404.
func TestGatewayOnAnyNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	_, h := mirrorNodes(t, 3)
	seq, mirror, gw := h[0], h[1], h[2]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC := dialAs(t, seq, annU)
	if err := annC.SetDirHosts(ctx, hostAddrs(seq, mirror)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"pub", "pub/sub", "private"} {
		if _, err := annC.MakeDirectory(ctx, ann(d)); err != nil {
			t.Fatal(err)
		}
	}
	packings := map[string]spindle.Packing{"pub/sea.txt": spindle.UnknownPack, "pub/plain.txt": spindle.PlainPack, "pub/ee.txt": spindle.EEPack, "pub/old.txt": spindle.UnknownPack}
	put := func(name, data string, packing spindle.Packing) {
		t.Helper()
		if _, err := annC.Put(ctx, ann(name), strings.NewReader(data), packing, nil); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	put("pub/Access", "r: all\n*: ann@example.com\n", spindle.PlainPack)
	put("private/Access", "r: bob@example.com\n*: ann@example.com\n", spindle.PlainPack)
	put("private/diary.txt", "dear diary", spindle.UnknownPack)
	files := map[string]string{} // Contents by name.
	for name, packing := range packings {
		files[name] = strings.Repeat(name+" is for all. ", 5000)
		put(name, files[name], packing)
	}
	if err := annC.Rename(ctx, ann("pub/old.txt"), ann("pub/moved.txt")); err != nil {
		t.Fatal(err)
	}
	files["pub/moved.txt"] = files["pub/old.txt"]
	delete(files, "pub/old.txt")
	if _, err := annC.PutLink(ctx, ann("pub/sea.txt"), ann("pub/link")); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, seq, mirror)
	if h, err := gw.dir.Head(ctx, annU); err != nil || h.Seq != 0 {
		t.Fatalf("the gateway's node holds ann's log: %+v, %v; it is to host nothing", h, err)
	}

	srv := httptest.NewServer(gw.GatewayHandler(newGatewayReader(t, gw)))
	defer srv.Close()
	base := srv.URL + "/"
	served := func(when string) {
		t.Helper()
		var wg sync.WaitGroup // All at once: the gateway serves many.
		for name, want := range files {
			wg.Go(func() {
				if code, body, _ := gatewayGet(t, base, string(ann(name))); code != 200 || string(body) != want {
					t.Errorf("%s, %s: status %d, %d bytes; want 200 and %d bytes", when, name, code, len(body), len(want))
				}
			})
		}
		wg.Wait()
	}
	notFound := func(when string, names ...string) {
		t.Helper()
		_, _, want := gatewayGet(t, base, "ann@example.com/pub/nosuch.txt")
		if !strings.HasPrefix(want, "HTTP/1.1 404 ") {
			t.Fatalf("%s: a missing file gets %q, want a 404", when, want)
		}
		for _, name := range names {
			if _, _, got := gatewayGet(t, base, name); got != want {
				t.Errorf("%s, %s: the gateway answered\n%s\nand for a missing file\n%s", when, name, got, want)
			}
		}
	}
	served("sequencer up")
	notFound("sequencer up",
		"ann@example.com/private/diary.txt",
		"ann@example.com/private/nosuch.txt",
		"ann@example.com/private/",
		"ann@example.com/pub/",
		"ann@example.com/pub/sub",
		"ann@example.com/pub/Access",
		"ann@example.com/pub/link",
		"ann@example.com/pub/old.txt",
		"ann@example.com/",
		"nobody@example.com/pub/sea.txt",
		"not a name",
	)

	// The sequencer down: its mirror answers, the other holders serve the
	// blocks.
	seq.Close()
	served("sequencer down")
	notFound("sequencer down", "ann@example.com/private/diary.txt", "ann@example.com/pub/link")

	// Every dir host down: a file all could read is now as missing.
	mirror.Close()
	notFound("every dir host down", "ann@example.com/pub/sea.txt", "ann@example.com/pub/plain.txt")
}
