package ui_test

import (
	"errors"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/nodetest"
	"spindle.dev/pack"
)

// dialNew makes keys for a user the environment does not have, signs the
// user up and returns the user's client.
func dialNew(t *testing.T, env *nodetest.Env, u spindle.UserName) spindle.Client {
	keys, _, err := pack.Generate(u)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctxT(t), client.Config{Keys: keys, Node: env.Addr(), Logger: slog.New(slog.DiscardHandler), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Signup(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestShareDialog shares a folder with a group through the dialog, sees
// the group expanded, checks that bob can then read, and takes it back.
func TestShareDialog(t *testing.T) {
	env := newEnv(t)
	a := newApp(t, env, ann)
	ctx := ctxT(t)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.c.MakeDirectory(ctx, "ann@example.com/Group"))
	must(a.c.Put(ctx, "ann@example.com/Group/family", strings.NewReader("bob@example.com\n"), 0, nil))
	must(a.c.MakeDirectory(ctx, "ann@example.com/album"))
	must(a.c.Put(ctx, "ann@example.com/album/a.txt", strings.NewReader("hello bob"), 0, nil))

	code, page := a.do("GET", "/share/ann@example.com/album/a.txt", nil, nil)
	if code != 200 || !strings.Contains(page, "No Access file governs this yet") || !strings.Contains(page, "ann@example.com/album/Access") {
		t.Fatalf("share dialog before: %d\n%s", code, page)
	}
	form := url.Values{
		"name": {"ann@example.com/album/a.txt"}, "rows": {"1"},
		"who0": {"ann@example.com"}, "r0": {"on"}, "w0": {"on"}, "l0": {"on"}, "c0": {"on"}, "d0": {"on"},
		"whonew": {"family"}, "rnew": {"on"}, "lnew": {"on"},
	}
	code, page = a.post("/api/share", form)
	if code != 200 || !strings.Contains(page, `id="saved"`) {
		t.Fatalf("saving the dialog: %d\n%s", code, page)
	}
	f, err := a.c.Open(ctx, "ann@example.com/album/Access")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(f)
	f.Close()
	if !strings.Contains(string(text), "read, list: family\n") || !strings.Contains(string(text), "read, write, list, create, delete: ann@example.com\n") {
		t.Errorf("the Access file written:\n%s", text)
	}
	if !strings.Contains(page, "group: bob@example.com") || !strings.Contains(page, "<td>bob@example.com</td>") {
		t.Errorf("the dialog does not show the group expanded to bob:\n%s", page)
	}
	if !strings.Contains(page, `id="keys-ok"`) {
		t.Errorf("after saving, readers still lack keys:\n%s", page)
	}
	bobc, err := env.Client(bob)
	if err != nil {
		t.Fatal(err)
	}
	bf, err := bobc.Open(ctx, "ann@example.com/album/a.txt")
	if err != nil {
		t.Fatalf("bob cannot open the shared file: %v", err)
	}
	got, _ := io.ReadAll(bf)
	bf.Close()
	if string(got) != "hello bob" {
		t.Fatalf("bob reads %q", got)
	}

	// Bob sees who may do what, but may not change it.
	b := newApp(t, env, bob)
	code, page = b.do("GET", "/share/ann@example.com/album", nil, nil)
	if code != 200 || strings.Contains(page, `id="share-form"`) {
		t.Errorf("bob's share dialog of ann's folder: %d, offers a form: %v", code, strings.Contains(page, `id="share-form"`))
	}
	code, page = b.post("/api/share", form)
	if code != 403 || !strings.Contains(page, "Not allowed") {
		t.Errorf("bob saving ann's dialog: %d\n%s", code, page)
	}

	// Dave, granted read before he joined Spindle, holds no key: the
	// dialog lists him, and its button gives him one.
	dave := spindle.UserName("dave@example.com")
	form.Set("rows", "2")
	form.Set("who1", "family")
	form.Set("r1", "on")
	form.Set("l1", "on")
	form.Set("whonew", string(dave))
	if code, page := a.post("/api/share", form); code != 200 || !strings.Contains(page, "dave@example.com") {
		t.Fatalf("granting dave: %d\n%s", code, page)
	}
	davec := dialNew(t, env, dave)
	code, page = a.do("GET", "/share/ann@example.com/album", nil, nil)
	if code != 200 || !strings.Contains(page, `<ul id="missing"><li>ann@example.com/album/a.txt: dave@example.com</li></ul>`) {
		t.Errorf("the dialog does not list dave as lacking a key: %d\n%s", code, page)
	}
	if _, err := davec.Open(ctx, "ann@example.com/album/a.txt"); !errors.Is(err, spindle.CannotDecrypt) {
		t.Errorf("dave opens the file before the fix: %v, want a CannotDecrypt error", err)
	}
	code, page = a.post("/api/fix", url.Values{"name": {"ann@example.com/album"}})
	if code != 200 || !strings.Contains(page, `id="fixed">Keys given: 1 files repaired.`) || !strings.Contains(page, `id="keys-ok"`) {
		t.Errorf("fix: %d\n%s", code, page)
	}
	df, err := davec.Open(ctx, "ann@example.com/album/a.txt")
	if err != nil {
		t.Fatalf("dave cannot open the file after the fix: %v", err)
	}
	df.Close()
	delete(form, "whonew")

	// Unticking the group takes bob's rights away.
	form.Del("r1")
	form.Del("l1")
	code, page = a.post("/api/share", form)
	if code != 200 || strings.Contains(page, "<td>bob@example.com</td>") {
		t.Errorf("after removing the group: %d, bob still listed:\n%s", code, page)
	}
	if _, err := bobc.Open(ctx, "ann@example.com/album/a.txt"); !errors.Is(err, spindle.Private) && !errors.Is(err, spindle.Permission) {
		t.Errorf("bob opens the file after the group was removed: %v", err)
	}
	// A line the Access syntax refuses is said in words; nothing changes.
	code, page = a.post("/api/share", url.Values{"name": {"ann@example.com/album"}, "rows": {"0"}, "whonew": {"ann@example.com/Group/../x"}, "rnew": {"on"}})
	if code != 400 || !strings.Contains(page, "Not a valid request") {
		t.Errorf("a bad name: %d\n%s", code, page)
	}
}
