package ui_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"spindle.dev"
)

// The browser test drives Debian's chromium through the app as ann, bob
// and carol would. It is skipped, saying so, where no chromium can be
// had; .ci/run installs it.

// browserPath returns the chromium to drive, or "".
func browserPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// started runs the first action on a chromedp context, which starts the
// browser or tab and binds it to ctx, with a deadline of its own.
func started(t *testing.T, ctx context.Context, cancel context.CancelFunc, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- chromedp.Do(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			cancel()
			t.Skipf("chromium could not be started (%s): %v", what, err)
		}
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatalf("chromium did not start (%s) in 2 minutes", what)
	}
}

// newBrowser starts a headless chromium that ends with the test.
func newBrowser(t *testing.T) context.Context {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	path := browserPath()
	if path == "" {
		t.Skip("no chromium on this machine (apt-get install chromium): the browser test cannot run")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // Root in CI containers.
		chromedp.DisableGPU,
		chromedp.WindowSize(1200, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	started(t, bctx, bcancel, "browser")
	return bctx
}

// newTab opens a tab of the browser.
func newTab(t *testing.T, browser context.Context) context.Context {
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	started(t, ctx, cancel, "tab")
	return ctx
}

// dropFiles drops files from outside the browser at x, y, as a drag from
// the desktop does.
func dropFiles(x, y float64, files ...string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		data := &input.DragData{Items: []*input.DragDataItem{}, Files: files, DragOperationsMask: 1}
		for _, typ := range []input.DispatchDragEventType{input.DispatchDragEventTypeDragEnter, input.DispatchDragEventTypeDragOver, input.DispatchDragEventTypeDrop} {
			if _, err := cdp.Call(ctx, t, input.DispatchDragEvent, input.DispatchDragEventParams{Type: typ, X: x, Y: y, Data: data}); err != nil {
				return chromedp.Void{}, fmt.Errorf("%s: %w", typ, err)
			}
		}
		return chromedp.Void{}, nil
	}
}

const stepTimeout = 2 * time.Minute

// step runs actions in tab with a deadline.
func step(t *testing.T, tab context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// run runs one action that returns a value, with a deadline.
func run[T any](t *testing.T, tab context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// waitFor evaluates a JavaScript predicate until it holds, through page
// loads (which interrupt an evaluation), failing after stepTimeout.
func waitFor(t *testing.T, tab context.Context, what, predicate string) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(tab, 10*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](predicate))
		cancel()
		if err == nil && ok {
			return
		}
		if err != nil {
			last = err
		}
		if tab.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not so after %v (last error: %v)", what, stepTimeout, last)
}

// screenshot captures the tab's viewport, keeps it (in $SPINDLE_UI_SHOTS
// if set) and returns it decoded.
func screenshot(t *testing.T, tab context.Context, name string) image.Image {
	t.Helper()
	data := run(t, tab, "screenshot "+name, chromedp.CaptureScreenshot())
	dir := os.Getenv("SPINDLE_UI_SHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	return img
}

// colored counts the pixels of img within 40 of c in each channel.
func colored(img image.Image, c color.RGBA) int {
	n := 0
	b := img.Bounds()
	near := func(a uint32, b uint8) bool { d := int(a>>8) - int(b); return d > -40 && d < 40 }
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, c.R) && near(g, c.G) && near(bl, c.B) {
				n++
			}
		}
	}
	return n
}

// The pictures ann uploads: each of one strong color the page itself
// never uses, so that a screenshot shows whether it was drawn.
var pictures = []struct {
	name  string
	color color.RGBA
}{
	{"forest.png", color.RGBA{20, 200, 40, 255}},
	{"sea.jpg", color.RGBA{230, 20, 230, 255}},
	{"sunset.jpg", color.RGBA{250, 140, 10, 255}},
}

func writePictures(t *testing.T, dir string) map[string][]byte {
	out := map[string][]byte{}
	for _, p := range pictures {
		img := image.NewRGBA(image.Rect(0, 0, 900, 600))
		for i := 0; i < len(img.Pix); i += 4 {
			copy(img.Pix[i:], []uint8{p.color.R, p.color.G, p.color.B, 255})
		}
		var b bytes.Buffer
		var err error
		if strings.HasSuffix(p.name, ".png") {
			err = png.Encode(&b, img)
		} else {
			err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 95})
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		out[p.name] = b.Bytes()
	}
	return out
}

// checkThumbs waits until the page's thumbnails have loaded and checks,
// in a screenshot, that each picture's color is on screen.
func checkThumbs(t *testing.T, tab context.Context, shot string) {
	t.Helper()
	waitFor(t, tab, shot+": thumbnails load", `(() => {
		const imgs = Array.from(document.querySelectorAll('.thumb img'));
		return imgs.length === 3 && imgs.every(i => i.complete && i.naturalWidth > 0);
	})()`)
	img := screenshot(t, tab, shot)
	for _, p := range pictures {
		if n := colored(img, p.color); n < 5000 {
			t.Errorf("%s: %d pixels of %s's color on screen, want a thumbnail's worth (5000 or more)", shot, n, p.name)
		}
	}
}

// TestBrowser is the scenario of issue 18: ann uploads a folder of
// pictures, sees their thumbnails, opens the viewer and shares the folder
// with bob in the dialog; bob's app lists it and downloads a picture whose
// bytes match; carol's says it is private.
func TestBrowser(t *testing.T) {
	browser := newBrowser(t)
	env := newEnv(t)
	apps := map[string]*app{"ann": newApp(t, env, ann), "bob": newApp(t, env, bob), "carol": newApp(t, env, carol)}
	local := filepath.Join(t.TempDir(), "photos")
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	data := writePictures(t, local)
	openApp := func(who string) context.Context {
		tab := newTab(t, browser)
		a := apps[who]
		step(t, tab, who+" opens the app", chromedp.Navigate(a.srv.URL(strings.TrimPrefix(a.origin, "http://"))))
		waitFor(t, tab, who+" sees their files", `document.querySelector('.me') && document.querySelector('.me').textContent.includes('@example.com')`)
		return tab
	}

	// Ann uploads the folder through the folder input.
	annTab := openApp("ann")
	// The folder input, as the browser fills it when ann picks the folder.
	step(t, annTab, "ann uploads the folder", chromedp.SetUploadFiles(chromedp.ID("upload-folder"), []string{local}))
	waitFor(t, annTab, "the folder is listed", `!!document.querySelector('tr[data-name="photos"] a')`)
	step(t, annTab, "ann opens the folder", chromedp.Click(chromedp.CSS(`tr[data-name="photos"] a`)))
	waitFor(t, annTab, "the upload ends and the page shows them", `document.querySelectorAll('.thumb img').length === 3`)
	checkThumbs(t, annTab, "1-ann-folder")

	// Ann drops a file from her desktop onto the page.
	note := filepath.Join(t.TempDir(), "note.txt")
	if err := os.WriteFile(note, []byte("dropped in"), 0o644); err != nil {
		t.Fatal(err)
	}
	x := run(t, annTab, "find the drop zone", chromedp.Evaluate[[]float64](`(() => { const r = document.getElementById('drop').getBoundingClientRect(); return [r.x + r.width/2, r.y + r.height/2]; })()`))
	step(t, annTab, "ann drops a file", dropFiles(x[0], x[1], note))
	waitFor(t, annTab, "the dropped file is listed", `!!document.querySelector('tr[data-name="note.txt"]')`)
	if f, err := apps["ann"].c.Open(ctxT(t), "ann@example.com/photos/note.txt"); err != nil {
		t.Errorf("the dropped file: %v", err)
	} else {
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != "dropped in" {
			t.Errorf("the dropped file holds %q, want %q", got, "dropped in")
		}
	}

	// The viewer: the first picture, then the next.
	step(t, annTab, "ann opens the viewer", chromedp.Click(chromedp.CSS(".thumb")))
	waitFor(t, annTab, "the picture shows", `(() => { const i = document.getElementById('picture'); return !!i && i.complete && i.naturalWidth === 900; })()`)
	view := screenshot(t, annTab, "2-ann-viewer")
	if n := colored(view, pictures[0].color); n < 100000 {
		t.Errorf("viewer: %d pixels of %s's color, want the picture drawn large", n, pictures[0].name)
	}
	step(t, annTab, "ann steps to the next picture", chromedp.Click(chromedp.ID("next")))
	waitFor(t, annTab, "the next picture shows", `location.pathname.endsWith('/sea.jpg') && document.getElementById('picture').complete`)

	// The share dialog: bob may read and list.
	step(t, annTab, "ann opens the share dialog", chromedp.Navigate(apps["ann"].base+"/share/ann@example.com/photos"))
	step(t, annTab, "ann names bob", chromedp.SetValue(chromedp.ID("whonew"), "bob@example.com"))
	step(t, annTab, "ann ticks read and list",
		chromedp.Click(chromedp.ID("rnew")),
		chromedp.Click(chromedp.ID("lnew")),
		chromedp.Click(chromedp.ID("save-share")))
	waitFor(t, annTab, "the dialog says saved", `!!document.getElementById('saved')`)
	people := run(t, annTab, "read who may do what", chromedp.Text(chromedp.ID("people")))
	if !strings.Contains(people, "bob@example.com") {
		t.Errorf("after sharing, the dialog's people table does not name bob:\n%s", people)
	}
	screenshot(t, annTab, "3-ann-share")

	// Bob lists ann's folder and downloads a picture.
	bobTab := openApp("bob")
	step(t, bobTab, "bob opens ann's folder", chromedp.Navigate(apps["bob"].base+"/b/ann@example.com/photos"))
	checkThumbs(t, bobTab, "4-bob-folder")
	sum := run(t, bobTab, "bob downloads sea.jpg", chromedp.Evaluate[string](`
		fetch(document.querySelector('tr[data-name="sea.jpg"] a.download').href)
			.then(r => { if (!r.ok) throw new Error('status ' + r.status); return r.arrayBuffer(); })
			.then(b => crypto.subtle.digest('SHA-256', b))
			.then(d => Array.from(new Uint8Array(d), x => x.toString(16).padStart(2, '0')).join(''))`,
		chromedp.EvalAwaitPromise))
	want := sha256.Sum256(data["sea.jpg"])
	if sum != hex.EncodeToString(want[:]) {
		t.Errorf("bob's download of sea.jpg has SHA-256 %s, want %x", sum, want)
	}

	// Carol is told it is private.
	carolTab := openApp("carol")
	step(t, carolTab, "carol opens ann's folder", chromedp.Navigate(apps["carol"].base+"/b/ann@example.com/photos"))
	title := run(t, carolTab, "carol reads the page", chromedp.Text(chromedp.CSS("#problem h1")))
	if title != "Private" {
		t.Errorf("carol sees %q, want Private", title)
	}
	if n := colored(screenshot(t, carolTab, "5-carol-private"), pictures[1].color); n != 0 {
		t.Errorf("carol's screen shows %d pixels of ann's picture", n)
	}
}

// folderColor is the fill of the folder icon, a color the page uses
// nowhere else.
var folderColor = color.RGBA{232, 163, 61, 255}

// TestFolderIconRenders checks that a folder's icon is drawn (an emoji
// shows as an empty box where no emoji font is installed) and that the
// header names the user once.
func TestFolderIconRenders(t *testing.T) {
	browser := newBrowser(t)
	env := newEnv(t)
	a := newApp(t, env, ann)
	if _, err := a.c.MakeDirectory(ctxT(t), "ann@example.com/docs"); err != nil {
		t.Fatal(err)
	}
	tab := newTab(t, browser)
	step(t, tab, "ann opens the app", chromedp.Navigate(a.srv.URL(strings.TrimPrefix(a.origin, "http://"))))
	waitFor(t, tab, "the folder is listed", `!!document.querySelector('tr[data-name="docs"] a')`)
	if n := colored(screenshot(t, tab, "folder-icon"), folderColor); n < 150 {
		t.Errorf("%d pixels of the folder icon's color on screen, want an icon's worth (150 or more)", n)
	}
	header := run(t, tab, "read the header", chromedp.Evaluate[string](`document.querySelector('header').textContent`))
	if n := strings.Count(header, string(ann)); n != 1 {
		t.Errorf("the header names %s %d times, want once: %q", ann, n, header)
	}
}

// TestBrowserRestoreDeleted is issue 29 item 5 in a browser: ann deletes
// a folder, finds it under Recently deleted, presses Restore, and the
// folder and its files are listed again and read back the same.
func TestBrowserRestoreDeleted(t *testing.T) {
	browser := newBrowser(t)
	env := newEnv(t)
	a := newApp(t, env, ann)
	ctx := ctxT(t)
	files := map[string]string{
		"ann@example.com/album/note.txt":    "a note kept in the album",
		"ann@example.com/album/day1/a.txt":  "the first day",
		"ann@example.com/album/day1/b.text": strings.Repeat("b", 5000),
	}
	for name, data := range files {
		code, body := a.do("POST", "/api/put?parents=1&name="+url.QueryEscape(name), strings.NewReader(data), map[string]string{"Origin": a.origin})
		if code != 200 {
			t.Fatalf("upload %s: %d %s", name, code, body)
		}
	}
	for _, n := range []spindle.PathName{"ann@example.com/album/day1/a.txt", "ann@example.com/album/day1/b.text", "ann@example.com/album/day1", "ann@example.com/album/note.txt", "ann@example.com/album"} {
		if err := a.c.Delete(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	tab := newTab(t, browser)
	step(t, tab, "ann opens the app", chromedp.Navigate(a.srv.URL(strings.TrimPrefix(a.origin, "http://"))))
	waitFor(t, tab, "her files are listed", `!!document.getElementById('recently-deleted')`)
	if n := run(t, tab, "look for the album", chromedp.Evaluate[int](`document.querySelectorAll('tr[data-name="album"]').length`)); n != 0 {
		t.Fatalf("the deleted album is listed %d times", n)
	}
	step(t, tab, "ann opens Recently deleted", chromedp.Click(chromedp.ID("recently-deleted")))
	waitFor(t, tab, "the album is listed as deleted", `!!document.querySelector('#deleted tr[data-name="album"] button.restore')`)
	rows := run(t, tab, "count the deleted rows", chromedp.Evaluate[int](`document.querySelectorAll('#deleted tr[data-path]').length`))
	if rows != 1 {
		t.Errorf("Recently deleted lists %d rows, want the album once", rows)
	}
	screenshot(t, tab, "deleted-1-listed")
	step(t, tab, "ann presses Restore", chromedp.Click(chromedp.CSS(`#deleted tr[data-name="album"] button.restore`)))
	waitFor(t, tab, "the page says it is back", `!!document.getElementById('restored')`)
	screenshot(t, tab, "deleted-2-restored")
	step(t, tab, "ann opens her files", chromedp.Navigate(a.base+"/b/ann@example.com/"))
	waitFor(t, tab, "the album is listed again", `!!document.querySelector('tr[data-name="album"] a')`)
	step(t, tab, "ann opens the album", chromedp.Click(chromedp.CSS(`tr[data-name="album"] a`)))
	waitFor(t, tab, "its files are listed again", `!!document.querySelector('tr[data-name="note.txt"]') && !!document.querySelector('tr[data-name="day1"] a')`)
	sum := run(t, tab, "download note.txt", chromedp.Evaluate[string](`
		fetch(document.querySelector('tr[data-name="note.txt"] a.download').href)
			.then(r => { if (!r.ok) throw new Error('status ' + r.status); return r.arrayBuffer(); })
			.then(b => crypto.subtle.digest('SHA-256', b))
			.then(d => Array.from(new Uint8Array(d), x => x.toString(16).padStart(2, '0')).join(''))`,
		chromedp.EvalAwaitPromise))
	if want := sha256.Sum256([]byte(files["ann@example.com/album/note.txt"])); sum != hex.EncodeToString(want[:]) {
		t.Errorf("note.txt downloaded after the restore has SHA-256 %s, want %x", sum, want)
	}
	step(t, tab, "ann opens day1", chromedp.Click(chromedp.CSS(`tr[data-name="day1"] a`)))
	waitFor(t, tab, "day1's files are listed again", `!!document.querySelector('tr[data-name="a.txt"]') && !!document.querySelector('tr[data-name="b.text"]')`)
	for name, data := range files {
		f, err := a.c.Open(ctx, spindle.PathName(name))
		if err != nil {
			t.Errorf("after the restore: %v", err)
			continue
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != data {
			t.Errorf("%s holds %d bytes after the restore, want the %d it held", name, len(got), len(data))
		}
	}
}
