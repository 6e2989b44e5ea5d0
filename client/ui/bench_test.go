package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/client/ui"
)

// BenchmarkBrowse2000 lists and renders a folder of 2,000 files. Cold is
// a new client and a new app for every listing (a fresh connection, no
// state), as after starting spin ui; warm is the same app again.
func BenchmarkBrowse2000(b *testing.B) {
	env := newEnv(b)
	c, err := env.Client(ann)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "ann@example.com/many"); err != nil {
		b.Fatal(err)
	}
	const n = 2000
	var wg sync.WaitGroup
	var failed atomic.Value
	sem := make(chan struct{}, 8)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			name := spindle.PathName(fmt.Sprintf("ann@example.com/many/file%04d.txt", i))
			if _, err := c.Put(ctx, name, strings.NewReader("x"), 0, nil); err != nil {
				failed.Store(err)
			}
		}()
	}
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
	render := func(b *testing.B, a *app) {
		code, page := a.do("GET", "/b/ann@example.com/many/", nil, nil)
		if code != 200 || strings.Count(page, `class="file"`) != n {
			b.Fatalf("listing: status %d, %d rows", code, strings.Count(page, `class="file"`))
		}
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			fresh, err := client.Dial(ctx, client.Config{Keys: env.Keys(ann), Node: env.Addr(), Logger: slog.New(slog.DiscardHandler), KeyLog: filepath.Join(b.TempDir(), "keylog")})
			if err != nil {
				b.Fatal(err)
			}
			a := newAppWith(b, fresh)
			render(b, a)
			fresh.Close()
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
	b.Run("warm", func(b *testing.B) {
		a := newAppWith(b, c)
		render(b, a)
		for b.Loop() {
			render(b, a)
		}
		b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	})
}

// newAppWith is newApp for a client of the caller's.
func newAppWith(tb testing.TB, c spindle.Client) *app {
	srv, err := ui.New(ui.Config{Client: c, CacheDir: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	tb.Cleanup(hs.Close)
	a := &app{t: tb, srv: srv, origin: hs.URL, base: hs.URL + "/" + srv.Secret(), client: &http.Client{}, c: c}
	resp, err := a.client.Get(srv.URL(strings.TrimPrefix(hs.URL, "http://")))
	if err != nil {
		tb.Fatal(err)
	}
	resp.Body.Close()
	return a
}

// peakHeap samples the heap in use until stop is called, which returns
// the largest sample.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		var m runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 { close(done); <-ended; return peak.Load() }
}

// randomBytes returns a reader of n pseudo-random bytes, made faster than
// the node stores them (ChaCha8).
func randomBytes(n int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{1}), n)
}

// BenchmarkUpload1GiB stores 1 GiB through the app's upload (as the
// browser sends it: one streamed POST) and, for comparison, through the
// client's Put as spin put does. The node runs in the same process;
// peak-heap-MiB is the whole process's heap in use, sampled every 20 ms.
func BenchmarkUpload1GiB(b *testing.B) {
	const n = 1 << 30
	env := newEnv(b)
	a := newApp(b, env, ann)
	b.Run("ui", func(b *testing.B) {
		b.SetBytes(n)
		runtime.GC()
		stop := peakHeap()
		for i := 0; b.Loop(); i++ {
			req, _ := http.NewRequest("POST", a.base+"/api/put?name="+url.QueryEscape(fmt.Sprintf("ann@example.com/ui%d.bin", i)), io.NopCloser(randomBytes(n)))
			req.Header.Set("Origin", a.origin)
			resp, err := a.client.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("upload: %d %s", resp.StatusCode, body)
			}
		}
		b.ReportMetric(float64(stop())/(1<<20), "peak-heap-MiB")
	})
	b.Run("put", func(b *testing.B) {
		b.SetBytes(n)
		runtime.GC()
		stop := peakHeap()
		for i := 0; b.Loop(); i++ {
			if _, err := a.c.Put(context.Background(), spindle.PathName(fmt.Sprintf("ann@example.com/put%d.bin", i)), randomBytes(n), 0, nil); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(stop())/(1<<20), "peak-heap-MiB")
	})
}
