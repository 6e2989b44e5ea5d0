package ui_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/client/ui"
	"spindle.dev/node/nodetest"
)

const (
	ann   spindle.UserName = "ann@example.com"
	bob   spindle.UserName = "bob@example.com"
	carol spindle.UserName = "carol@example.com"
)

// An app is one user's spin ui, served on loopback.
type app struct {
	t      testing.TB
	srv    *ui.Server
	origin string // http://127.0.0.1:PORT
	base   string // origin + "/" + the secret: where the app's addresses start
	client *http.Client
	c      spindle.Client
}

func newEnv(t testing.TB) *nodetest.Env {
	return nodetest.New(t, nodetest.Setup{Kind: nodetest.InProc, Users: []spindle.UserName{ann, bob, carol}})
}

// newApp starts user's app and checks that its URL opens it.
func newApp(t testing.TB, env *nodetest.Env, user spindle.UserName) *app {
	t.Helper()
	c, err := env.Client(user)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ui.New(ui.Config{Client: c, CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	a := &app{t: t, srv: srv, origin: hs.URL, base: hs.URL + "/" + srv.Secret(), client: &http.Client{Timeout: 5 * time.Minute}, c: c}
	resp, err := a.client.Get(srv.URL(strings.TrimPrefix(hs.URL, "http://")))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("opening the app with its secret: status %d", resp.StatusCode)
	}
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// do sends a request with the app's cookies and the given headers and
// returns the status and body.
func (a *app) do(method, path string, body io.Reader, header map[string]string) (int, string) {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// post sends a form from the app's own origin.
func (a *app) post(path string, form url.Values) (int, string) {
	a.t.Helper()
	return a.do("POST", path, strings.NewReader(form.Encode()), map[string]string{
		"Content-Type": "application/x-www-form-urlencoded",
		"Origin":       a.origin,
	})
}

func exists(t *testing.T, c spindle.Client, name spindle.PathName) bool {
	t.Helper()
	_, err := c.Lookup(ctxT(t), name, false)
	return err == nil
}

// TestSecretAndOrigin checks that nothing changes through the app without
// its secret, from a foreign origin, or through a foreign Host, and that
// the same request with all three right does.
func TestSecretAndOrigin(t *testing.T) {
	env := newEnv(t)
	a := newApp(t, env, ann)
	form := url.Values{"name": {"ann@example.com/made"}}
	stranger := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	// Without the secret: no page, no change.
	for _, path := range []string{"/", "/b/ann@example.com/", "/0123456789abcdef0123456789abcdef/b/ann@example.com/", "/?token=" + a.srv.Secret()} {
		resp, err := stranger.Get(a.origin + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s without the secret: status %d, want 403", path, resp.StatusCode)
		}
	}
	req, _ := http.NewRequest("POST", a.origin+"/api/mkdir", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", a.origin)
	resp, err := stranger.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without the secret: status %d, want 403", resp.StatusCode)
	}
	req, _ = http.NewRequest("POST", a.origin+"/api/put?name="+url.QueryEscape("ann@example.com/planted.txt"), strings.NewReader("x"))
	req.Header.Set("Origin", a.origin)
	if resp, err = stranger.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	// With the secret, from elsewhere: no change.
	hdr := func(kv ...string) map[string]string {
		m := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, h := range []map[string]string{
		hdr("Origin", "http://evil.example"),
		hdr("Origin", "null"),
		hdr("Origin", strings.Replace(a.origin, "127.0.0.1", "localhost", 1)),
		hdr(),                               // No Origin at all.
		hdr("Sec-Fetch-Site", "cross-site"), // A browser's cross-site form.
		hdr("Origin", a.origin, "Host", "evil.example"), // DNS rebinding.
	} {
		code, body := a.do("POST", "/api/mkdir", strings.NewReader(form.Encode()), h)
		if code != http.StatusForbidden {
			t.Errorf("POST with %v: status %d (%s), want 403", h, code, body)
		}
		code, _ = a.do("POST", "/api/put?name="+url.QueryEscape("ann@example.com/planted.txt"), strings.NewReader("x"), h)
		if code != http.StatusForbidden {
			t.Errorf("put with %v: status %d, want 403", h, code)
		}
	}
	if exists(t, a.c, "ann@example.com/made") || exists(t, a.c, "ann@example.com/planted.txt") {
		t.Fatal("a refused request changed the tree")
	}
	// Everything right: it changes.
	if code, body := a.post("/api/mkdir", form); code != 200 {
		t.Fatalf("POST from the app: status %d: %s", code, body)
	}
	if !exists(t, a.c, "ann@example.com/made") {
		t.Fatal("mkdir from the app made nothing")
	}
}

// TestBrowseAndManage uploads, makes a folder, renames, links and
// deletes through the API, and checks the listing and the errors in words.
func TestBrowseAndManage(t *testing.T) {
	env := newEnv(t)
	a := newApp(t, env, ann)
	up := func(name, data string) {
		t.Helper()
		code, body := a.do("POST", "/api/put?parents=1&name="+url.QueryEscape(name), strings.NewReader(data), map[string]string{"Origin": a.origin})
		if code != 200 {
			t.Fatalf("upload %s: %d %s", name, code, body)
		}
	}
	up("ann@example.com/trip/day1/notes.txt", "sunny")
	up("ann@example.com/trip/b.txt", "bee")
	up("ann@example.com/trip/A.txt", "ay")
	if code, body := a.post("/api/mkdir", url.Values{"name": {"ann@example.com/trip/zfolder"}}); code != 200 {
		t.Fatal(code, body)
	}
	code, page := a.do("GET", "/b/ann@example.com/trip/", nil, nil)
	if code != 200 {
		t.Fatalf("browse: %d", code)
	}
	order := []string{"</svg> day1<", "</svg> zfolder<", ">A.txt<", ">b.txt<"}
	last := -1
	for _, s := range order {
		i := strings.Index(page, s)
		if i < 0 || i < last {
			t.Fatalf("listing: %q missing or out of order (folders first, then by name):\n%s", s, page)
		}
		last = i
	}
	crumbs := `href="/` + a.srv.Secret() + `/b/ann@example.com/">My files</a><span class="sep">/</span><a href="/` + a.srv.Secret() + `/b/ann@example.com/trip">trip</a>`
	if !strings.Contains(page, crumbs) {
		t.Errorf("breadcrumbs missing:\n%s", page)
	}
	if code, body := a.post("/api/rename", url.Values{"old": {"ann@example.com/trip/b.txt"}, "new": {"ann@example.com/trip/bee.txt"}}); code != 200 {
		t.Fatal(code, body)
	}
	if code, body := a.post("/api/link", url.Values{"target": {"ann@example.com/trip/bee.txt"}, "name": {"ann@example.com/trip/to-bee"}}); code != 200 {
		t.Fatal(code, body)
	}
	if code, body := a.do("GET", "/f/ann@example.com/trip/to-bee", nil, nil); code != 200 || body != "bee" {
		t.Errorf("through the link: %d %q, want bee", code, body)
	}
	if code, body := a.post("/api/delete", url.Values{"name": {"ann@example.com/trip/A.txt"}}); code != 200 {
		t.Fatal(code, body)
	}
	if exists(t, a.c, "ann@example.com/trip/A.txt") || !exists(t, a.c, "ann@example.com/trip/bee.txt") {
		t.Fatal("rename or delete did not take effect")
	}
	// A failure is said in words, as JSON for the scripts.
	code, body := a.post("/api/delete", url.Values{"name": {"ann@example.com/trip/day1"}})
	if code != http.StatusConflict || !strings.Contains(body, "Folder not empty") {
		t.Errorf("deleting a full folder: %d %s", code, body)
	}
	// Another user's tree, opened by name from the box at the top.
	noFollow := *a.client
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(a.base + "/go?name=" + url.QueryEscape("bob@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || loc != "/"+a.srv.Secret()+"/b/bob@example.com/" {
		t.Errorf("opening bob's tree: %d to %q, want 303 to /b/bob@example.com/", resp.StatusCode, loc)
	}
	// Carol sees ann's folder as private, in words, without a trace.
	c := newApp(t, env, carol)
	code, page = c.do("GET", "/b/ann@example.com/trip/", nil, nil)
	if code != http.StatusForbidden || !strings.Contains(page, "<h1>Private</h1>") || !strings.Contains(page, "Ask its owner to share it with you") {
		t.Errorf("carol browsing ann's folder: status %d:\n%s", code, page)
	}
	code, page = a.do("GET", "/b/ann@example.com/nosuch/", nil, nil)
	if code != http.StatusNotFound || !strings.Contains(page, "<h1>Not found</h1>") {
		t.Errorf("a missing folder: %d:\n%s", code, page)
	}
	if strings.Contains(page, "goroutine") {
		t.Error("a stack trace on the page")
	}
	// A file that could run scripts is sandboxed and sent as an attachment.
	up("ann@example.com/trip/evil.html", "<script>alert(1)</script>")
	req, _ := http.NewRequest("GET", a.base+"/f/ann@example.com/trip/evil.html", nil)
	resp, err = a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, cd, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"), resp.Header.Get("Content-Security-Policy"); ct != "application/octet-stream" || !strings.HasPrefix(cd, "attachment") || !strings.HasPrefix(csp, "sandbox") {
		t.Errorf("an HTML file is served as %q, %q, CSP %q", ct, cd, csp)
	}
}

// patterned is a file of n pseudo-random bytes that can be read at any
// offset without holding it: byte i is byte i%32 of sha256(i/32).
type patterned struct{ off, n int64 }

func (p *patterned) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	b = b[:min(int64(len(b)), p.n-p.off)]
	fillPattern(b, p.off)
	p.off += int64(len(b))
	return len(b), nil
}

func fillPattern(b []byte, off int64) {
	var blk [8]byte
	for i := 0; i < len(b); {
		k := off + int64(i)
		binary.BigEndian.PutUint64(blk[:], uint64(k/32))
		sum := sha256.Sum256(blk[:])
		i += copy(b[i:], sum[k%32:])
	}
}

// TestRange100MiB reads ranges of a 100 MiB file through the app.
func TestRange100MiB(t *testing.T) {
	if testing.Short() {
		t.Skip("stores 100 MiB")
	}
	env := newEnv(t)
	a := newApp(t, env, ann)
	const n = 100 << 20
	code, body := a.do("POST", "/api/put?name="+url.QueryEscape("ann@example.com/big.bin"), &patterned{n: n}, map[string]string{"Origin": a.origin})
	if code != 200 {
		t.Fatalf("upload: %d %s", code, body)
	}
	for _, r := range []struct {
		header     string
		start, end int64 // Inclusive.
	}{
		{"bytes=0-99", 0, 99},
		{"bytes=4194300-4194400", 4194300, 4194400}, // Across a block boundary.
		{"bytes=52428800-53477375", 52428800, 53477375},
		{"bytes=-1000", n - 1000, n - 1},
		{fmt.Sprintf("bytes=%d-", n-5), n - 5, n - 1},
	} {
		req, _ := http.NewRequest("GET", a.base+"/f/ann@example.com/big.bin", nil)
		req.Header.Set("Range", r.header)
		resp, err := a.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, r.end-r.start+1)
		fillPattern(want, r.start)
		wantCR := fmt.Sprintf("bytes %d-%d/%d", r.start, r.end, n)
		if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(got, want) || resp.Header.Get("Content-Range") != wantCR {
			t.Errorf("Range %s: status %d, %d bytes, Content-Range %q; want 206, the %d bytes asked, %q",
				r.header, resp.StatusCode, len(got), resp.Header.Get("Content-Range"), len(want), wantCR)
		}
	}
}

// testJPEG returns a w×h JPEG, red on the left half and blue on the
// right, with an EXIF orientation tag if orient is not 0.
func testJPEG(t testing.TB, w, h, orient int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			c := color.RGBA{220, 20, 60, 255}
			if x >= w/2 {
				c = color.RGBA{20, 60, 220, 255}
			}
			img.SetRGBA(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	if orient == 0 {
		return b.Bytes()
	}
	return withOrientation(b.Bytes(), orient, binary.BigEndian)
}

// withOrientation inserts an EXIF segment with the orientation tag.
func withOrientation(j []byte, orient int, bo binary.ByteOrder) []byte {
	var tiff bytes.Buffer
	if bo == binary.BigEndian {
		tiff.WriteString("MM")
	} else {
		tiff.WriteString("II")
	}
	w := func(v any) { binary.Write(&tiff, bo, v) }
	w(uint16(42))
	w(uint32(8))
	w(uint16(1))      // One entry.
	w(uint16(0x0112)) // Orientation.
	w(uint16(3))      // SHORT.
	w(uint32(1))
	w(uint16(orient))
	w(uint16(0))
	w(uint32(0)) // No next IFD.
	seg := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	out := append([]byte{}, j[:2]...)
	out = append(out, 0xFF, 0xE1, byte((len(seg)+2)>>8), byte(len(seg)+2))
	out = append(out, seg...)
	return append(out, j[2:]...)
}

// TestThumbnail checks that a thumbnail is made, turned upright by its
// EXIF orientation, and kept.
func TestThumbnail(t *testing.T) {
	env := newEnv(t)
	a := newApp(t, env, ann)
	pic := testJPEG(t, 800, 400, 6) // Stored sideways: shown 400 wide, 800 high.
	if code, body := a.do("POST", "/api/put?name="+url.QueryEscape("ann@example.com/side.jpg"), bytes.NewReader(pic), map[string]string{"Origin": a.origin}); code != 200 {
		t.Fatal(code, body)
	}
	for i := 0; i < 2; i++ { // Made, then from the cache.
		code, body := a.do("GET", "/t/ann@example.com/side.jpg", nil, nil)
		if code != 200 {
			t.Fatalf("thumbnail: %d %s", code, body)
		}
		img, err := jpeg.Decode(strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if b := img.Bounds(); b.Dx() != 160 || b.Dy() != 320 {
			t.Fatalf("thumbnail is %dx%d, want 160x320 (upright)", b.Dx(), b.Dy())
		}
		// Turned right: the red left half is now on top.
		r, _, bl, _ := img.At(80, 40).RGBA()
		if r < bl {
			t.Errorf("thumbnail not turned: top is not red")
		}
	}
	code, _ := a.do("GET", "/t/ann@example.com/nosuch.jpg", nil, nil)
	if code != http.StatusNotFound {
		t.Errorf("thumbnail of a missing file: %d", code)
	}
}

// TestVersionsAndDeleted lists a file's versions, downloads and restores
// an old one, lists a folder deleted whole once under Recently deleted
// and restores it; a restore from another origin changes nothing, and
// another user gets the Private page for each, not a crash.
func TestVersionsAndDeleted(t *testing.T) {
	env := newEnv(t)
	a := newApp(t, env, ann)
	ctx := ctxT(t)
	up := func(name, data string) {
		t.Helper()
		code, body := a.do("POST", "/api/put?parents=1&name="+url.QueryEscape(name), strings.NewReader(data), map[string]string{"Origin": a.origin})
		if code != 200 {
			t.Fatalf("upload %s: %d %s", name, code, body)
		}
	}
	read := func(name spindle.PathName) string {
		t.Helper()
		f, err := a.c.Open(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		return string(b)
	}
	up("ann@example.com/trip/a.txt", "first draft")
	up("ann@example.com/trip/a.txt", "second draft")
	up("ann@example.com/trip/sub/b.txt", "in the sub folder")
	hs, err := a.c.(*client.Client).History(ctx, "ann@example.com/trip/a.txt")
	if err != nil || len(hs) != 2 {
		t.Fatalf("history: %v, %v", hs, err)
	}
	first := strconv.FormatInt(hs[0].Seq, 10)

	code, page := a.do("GET", "/versions/ann@example.com/trip/a.txt", nil, nil)
	if code != 200 || strings.Count(page, `<tr class="version"`) != 2 || strings.Count(page, ">Restore</button>") != 2 {
		t.Fatalf("versions page: %d:\n%s", code, page)
	}
	if i, j := strings.Index(page, `data-seq="`+strconv.FormatInt(hs[1].Seq, 10)+`"`), strings.Index(page, `data-seq="`+first+`"`); i < 0 || j < i {
		t.Errorf("versions page: not newest first:\n%s", page)
	}
	if code, body := a.do("GET", "/f/ann@example.com/trip/a.txt?dl=1&at="+first, nil, nil); code != 200 || body != "first draft" {
		t.Errorf("download of version %s: %d %q", first, code, body)
	}
	restore := url.Values{"name": {"ann@example.com/trip/a.txt"}, "at": {first}, "then": {"versions"}}
	hdr := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example"}
	if code, _ := a.do("POST", "/api/restore", strings.NewReader(restore.Encode()), hdr); code != http.StatusForbidden || read("ann@example.com/trip/a.txt") != "second draft" {
		t.Errorf("restore from another origin: %d, and the file holds %q", code, read("ann@example.com/trip/a.txt"))
	}
	code, page = a.post("/api/restore", restore)
	if code != 200 || !strings.Contains(page, `id="restored"`) {
		t.Fatalf("restore: %d:\n%s", code, page)
	}
	if got := read("ann@example.com/trip/a.txt"); got != "first draft" {
		t.Errorf("after restoring version %s the file holds %q", first, got)
	}

	// A folder deleted whole is listed once, and comes back whole.
	for _, n := range []string{"ann@example.com/trip/sub/b.txt", "ann@example.com/trip/sub"} {
		if code, body := a.post("/api/delete", url.Values{"name": {n}}); code != 200 {
			t.Fatal(code, body)
		}
	}
	up("ann@example.com/trip/c.txt", "moved away")
	if code, body := a.post("/api/rename", url.Values{"old": {"ann@example.com/trip/c.txt"}, "new": {"ann@example.com/c.txt"}}); code != 200 {
		t.Fatal(code, body)
	}
	code, page = a.do("GET", "/deleted/ann@example.com/trip", nil, nil)
	if code != 200 || !strings.Contains(page, `data-path="ann@example.com/trip/sub"`) || strings.Contains(page, `data-path="ann@example.com/trip/sub/b.txt"`) {
		t.Fatalf("recently deleted: %d:\n%s", code, page)
	}
	if !strings.Contains(page, "moved to ann@example.com/c.txt") {
		t.Errorf("recently deleted does not say where c.txt went:\n%s", page)
	}
	code, page = a.do("GET", "/versions/ann@example.com/trip/c.txt", nil, nil)
	if code != 200 || !strings.Contains(page, "moved to ann@example.com/c.txt") || !strings.Contains(page, "<td>written</td>") {
		t.Errorf("versions of c.txt: %d:\n%s", code, page)
	}
	rs, err := a.c.(*client.Client).Deleted(ctx, "ann@example.com/trip")
	if err != nil || len(rs) != 2 || rs[1].Name != "ann@example.com/trip/sub" {
		t.Fatalf("deleted: %v, %v", rs, err)
	}
	code, page = a.post("/api/restore", url.Values{"name": {"ann@example.com/trip/sub"}, "at": {strconv.FormatInt(rs[1].Seq, 10)}, "then": {"deleted"}})
	if code != 200 || !strings.Contains(page, `id="restored"`) || strings.Contains(page, `data-path="ann@example.com/trip/sub"`) {
		t.Fatalf("restoring the folder: %d:\n%s", code, page)
	}
	if got := read("ann@example.com/trip/sub/b.txt"); got != "in the sub folder" {
		t.Errorf("restored b.txt holds %q", got)
	}
	if code, page := a.do("GET", "/versions/ann@example.com/trip/nosuch.txt", nil, nil); code != http.StatusNotFound || !strings.Contains(page, "<h1>Not found</h1>") {
		t.Errorf("versions of a name never there: %d:\n%s", code, page)
	}
	if code, _ := a.post("/api/restore", url.Values{"name": {"ann@example.com/trip/a.txt"}, "at": {"x"}}); code != http.StatusBadRequest {
		t.Errorf("restore with no sequence: %d, want 400", code)
	}

	// Bob reads no one's past but his own.
	b := newApp(t, env, bob)
	for _, tc := range []struct {
		method, path string
		form         url.Values
	}{
		{"GET", "/versions/ann@example.com/trip/a.txt", nil},
		{"GET", "/deleted/ann@example.com/trip", nil},
		{"GET", "/f/ann@example.com/trip/a.txt?at=" + first, nil},
		{"POST", "/api/restore", url.Values{"name": {"ann@example.com/trip/a.txt"}, "at": {first}}},
	} {
		var code int
		var page string
		if tc.method == "POST" {
			code, page = b.post(tc.path, tc.form)
		} else {
			code, page = b.do("GET", tc.path, nil, nil)
		}
		if code != http.StatusForbidden || !strings.Contains(page, "<h1>Private</h1>") {
			t.Errorf("bob: %s %s: %d:\n%s", tc.method, tc.path, code, page)
		}
	}
}
