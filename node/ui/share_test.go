package ui_test

import (
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"

	"spindle.dev"
)

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

	// The fix button runs, and takes nothing away.
	code, page = a.post("/api/fix", url.Values{"name": {"ann@example.com/album"}})
	if code != 200 || !strings.Contains(page, `id="fixed"`) {
		t.Errorf("fix: %d\n%s", code, page)
	}

	// Unticking the group takes bob's rights away.
	delete(form, "whonew")
	form.Set("rows", "2")
	form.Set("who1", "family")
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
