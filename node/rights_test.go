package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

// rightsTree starts a node and gives ann a tree, through real clients:
//
//	ann@example.com/Access             *: ann; read: bob; list: cat
//	ann@example.com/pub/f.txt          bob may read, not list (root's Access)
//	ann@example.com/pub/sub/g.txt
//	ann@example.com/pub/lnk            link to ann@example.com/shared
//	ann@example.com/empty/             bob may read, not list
//	ann@example.com/shared/Access      *: ann; read, list: bob
//	ann@example.com/shared/s.txt
//	ann@example.com/shared/inner/      own Access: *: ann; read: bob
//	ann@example.com/shared/inner/i.txt
//	ann@example.com/shared/inner/deep/ own Access: *: ann; read, list: bob
//	ann@example.com/shared/inner/deep/d.txt
//	ann@example.com/team/Access        *: ann; read, list: cat@example.com/Group/team
//	ann@example.com/team/t.txt
//	cat@example.com/Access             *: cat; read: ann
//
// cat's group team existed when ann named it and was deleted afterwards;
// cat's Access file grants ann read and no one else anything, so bob and
// dan may not know of it. dan has no right anywhere in ann's tree.
func rightsTree(t *testing.T) (ann, bob, cat, dan *client.Client) {
	t.Helper()
	n := startNode(t, t.TempDir())
	t.Cleanup(func() { n.Close() })
	ann = dialAs(t, n, "ann@example.com")
	bob = dialAs(t, n, "bob@example.com")
	cat = dialAs(t, n, "cat@example.com")
	dan = dialAs(t, n, "dan@example.com")
	ctx := context.Background()
	put := func(c *client.Client, name, text string) {
		t.Helper()
		if _, err := c.Put(ctx, spindle.PathName(name), bytes.NewReader([]byte(text)), 0, nil); err != nil {
			t.Fatalf("put %s: %v", name, err)
		}
	}
	mkdir := func(c *client.Client, name string) {
		t.Helper()
		if _, err := c.MakeDirectory(ctx, spindle.PathName(name)); err != nil {
			t.Fatalf("mkdir %s: %v", name, err)
		}
	}
	put(ann, "@/Access", "*: ann@example.com\nread: bob@example.com\nlist: cat@example.com\n")
	mkdir(ann, "@/pub")
	put(ann, "@/pub/f.txt", "f")
	mkdir(ann, "@/pub/sub")
	put(ann, "@/pub/sub/g.txt", "g")
	mkdir(ann, "@/empty")
	mkdir(ann, "@/shared")
	put(ann, "@/shared/Access", "*: ann@example.com\nread, list: bob@example.com\n")
	put(ann, "@/shared/s.txt", "s")
	mkdir(ann, "@/shared/inner")
	put(ann, "@/shared/inner/Access", "*: ann@example.com\nread: bob@example.com\n")
	put(ann, "@/shared/inner/i.txt", "i")
	mkdir(ann, "@/shared/inner/deep")
	put(ann, "@/shared/inner/deep/Access", "*: ann@example.com\nread, list: bob@example.com\n")
	put(ann, "@/shared/inner/deep/d.txt", "d")
	if _, err := ann.PutLink(ctx, "ann@example.com/shared", "@/pub/lnk"); err != nil {
		t.Fatal(err)
	}
	put(cat, "@/Access", "*: cat@example.com\nread: ann@example.com\n") // ann's client reads the group to wrap keys.
	mkdir(cat, "@/Group")
	put(cat, "@/Group/team", "dan@example.com\n")
	mkdir(ann, "@/team")
	put(ann, "@/team/Access", "*: ann@example.com\nread, list: cat@example.com/Group/team\n")
	put(ann, "@/team/t.txt", "t")
	if err := cat.Delete(ctx, "@/Group/team"); err != nil {
		t.Fatal(err)
	}
	return ann, bob, cat, dan
}

func names(es []*spindle.DirEntry) string {
	var s []string
	for _, e := range es {
		s = append(s, strings.TrimPrefix(string(e.Name), "ann@example.com/"))
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// TestListNeedsList pins Upspin's listing rules (dir/server listDir and
// serverutil.Glob) through the real client and node: ls, ls -l and ls -R
// are globs, so they show only what these allow.
func TestListNeedsList(t *testing.T) {
	ann, bob, cat, dan := rightsTree(t)
	ctx := context.Background()
	users := map[string]*client.Client{"ann": ann, "bob": bob, "cat": cat, "dan": dan}
	for _, tc := range []struct {
		user, pattern string
		want          string       // The names matched, if kind is Other.
		kind          spindle.Kind // The error, or Other.
		rule          string
	}{
		// Glob requires list on each directory it searches; a directory
		// that may not be listed is Private, whether or not it exists.
		{"bob", "ann@example.com/pub/*", "", spindle.Private, "read without list: no listing"},
		{"bob", "ann@example.com/*", "", spindle.Private, "a root the user cannot list reveals nothing"},
		{"bob", "ann@example.com/empty/*", "", spindle.Private, "an empty directory looks like a full one"},
		{"bob", "ann@example.com/nowhere/*", "", spindle.Private, "a missing directory looks like an unlistable one"},
		{"dan", "ann@example.com/pub/*", "", spindle.Private, "no right at all"},
		{"dan", "ann@example.com/nowhere/*", "", spindle.Private, "no right: missing looks the same"},
		{"dan", "nobody@example.com/*", "", spindle.Private, "a tree that does not exist"},
		// A pattern through a link (links are not followed): as Upspin's
		// errLink, a user with a right on the link is told to follow it,
		// anyone else learns nothing.
		{"bob", "ann@example.com/pub/lnk/*", "", spindle.NotDir, "a right on the link"},
		{"dan", "ann@example.com/pub/lnk/*", "", spindle.Private, "no right on the link"},
		// With list, NotExist may be told.
		{"bob", "ann@example.com/shared/nowhere/*", "", spindle.NotExist, "list right: may know it is missing"},
		// A listable directory shows every name in it, directories with
		// Access files of their own included.
		{"bob", "ann@example.com/shared/*", "shared/Access shared/inner shared/s.txt", spindle.Other, "read and list"},
		{"ann", "ann@example.com/*", "Access empty pub shared team", spindle.Other, "the owner lists everything"},
		{"cat", "ann@example.com/*", "Access empty pub shared team", spindle.Other, "list without read"},
		// A pattern looks only inside directories the user may list, at
		// every level: those below that may not be listed add nothing.
		{"bob", "ann@example.com/shared/*/*", "", spindle.Other, "inner may be read, not listed"},
		{"bob", "ann@example.com/shared/*/*/*", "", spindle.Other, "deep may be listed, but the way to it runs through inner"},
		{"bob", "ann@example.com/shared/inner/deep/*", "shared/inner/deep/Access shared/inner/deep/d.txt", spindle.Other, "a listable directory named in full"},
		{"bob", "ann@example.com/*/s.txt", "", spindle.Private, "the first level is the root, which bob may not list"},
		{"cat", "ann@example.com/*/*", "pub/f.txt pub/lnk pub/sub", spindle.Other, "cat may list the root's directories, not shared's or team's"},
		// Elements without metacharacters after the last listing are
		// looked up, as in Upspin: a known name needs any right on it.
		{"cat", "ann@example.com/*/f.txt", "pub/f.txt", spindle.Other, "listed, then looked up"},
		// A pattern without metacharacters is a Lookup: read alone lets
		// you fetch a file whose name you know.
		{"bob", "ann@example.com/pub/f.txt", "pub/f.txt", spindle.Other, "a known name"},
		{"bob", "ann@example.com/shared/inner/i.txt", "shared/inner/i.txt", spindle.Other, "a known name in an unlistable directory"},
	} {
		es, err := users[tc.user].Glob(ctx, tc.pattern)
		if tc.kind != spindle.Other {
			if !errors.Is(err, tc.kind) {
				t.Errorf("%s: %s globs %s: got %v (%d entries), want %v", tc.rule, tc.user, tc.pattern, err, len(es), tc.kind)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %s globs %s: %v", tc.rule, tc.user, tc.pattern, err)
			continue
		}
		if got := names(es); got != tc.want {
			t.Errorf("%s: %s globs %s = %q, want %q", tc.rule, tc.user, tc.pattern, got, tc.want)
		}
	}

	// Read alone fetches a file whose name is known: sharing a file
	// without showing its neighbours.
	mustRead(t, bob, "ann@example.com/pub/f.txt", []byte("f"))
	mustRead(t, bob, "ann@example.com/shared/inner/i.txt", []byte("i"))
	// List without read shows entries without their blocks; Access
	// files are shown whole, as in Upspin.
	es, err := cat.Glob(ctx, "ann@example.com/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if access := e.Name == "ann@example.com/Access"; access == e.Attr.IsIncomplete() {
			t.Errorf("cat's listing: %s incomplete=%v", e.Name, e.Attr.IsIncomplete())
		}
	}
	if _, err := cat.Open(ctx, "ann@example.com/pub/f.txt"); err == nil {
		t.Error("cat opened a file with list alone")
	}
}

// TestWatchNeedsList pins that a watch shows no more than a listing: the
// watched name as Lookup shows it, an item below it only to a user who may
// list its directory.
func TestWatchNeedsList(t *testing.T) {
	ann, bob, cat, dan := rightsTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	next := func(ch <-chan spindle.Event) string {
		t.Helper()
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch ended")
			}
			if ev.Err != nil {
				t.Fatal(ev.Err)
			}
			op := "put"
			if ev.Delete {
				op = "delete"
			}
			return op + " " + strings.TrimPrefix(string(ev.Entry.Name), "ann@example.com/")
		case <-time.After(20 * time.Second):
			t.Fatal("no event")
		}
		return ""
	}
	// Starting a watch needs a right on the name (Private otherwise). The
	// node's refusal arrives as the watch's first and last event.
	dch, err := dan.Watch(ctx, "ann@example.com/pub", 0)
	if err == nil {
		select {
		case ev := <-dch:
			err = ev.Err
		case <-time.After(20 * time.Second):
		}
	}
	if !errors.Is(err, spindle.Private) {
		t.Errorf("dan watches pub: %v, want Private", err)
	}

	// bob may read empty/ but not list it: he sees empty/ itself, and
	// nothing made in it, up to its own delete.
	bch, err := bob.Watch(ctx, "ann@example.com/empty", 0)
	if err != nil {
		t.Fatal(err)
	}
	// cat may list empty/ (root's Access): he sees everything, incomplete.
	cch, err := cat.Watch(ctx, "ann@example.com/empty", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := next(bch); got != "put empty" {
		t.Fatalf("bob's first event: %s", got)
	}
	if got := next(cch); got != "put empty" {
		t.Fatalf("cat's first event: %s", got)
	}
	for _, step := range []func() error{
		func() error {
			_, err := ann.Put(ctx, "@/empty/x.txt", bytes.NewReader([]byte("x")), 0, nil)
			return err
		},
		func() error { _, err := ann.MakeDirectory(ctx, "@/empty/d"); return err },
		func() error { return ann.Delete(ctx, "@/empty/d") },
		func() error { return ann.Delete(ctx, "@/empty/x.txt") },
		func() error { return ann.Delete(ctx, "@/empty") },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if got := next(bch); got != "delete empty" {
		t.Fatalf("bob, who may not list empty/, saw %q", got)
	}
	var seen []string
	for len(seen) < 5 {
		seen = append(seen, next(cch))
	}
	if got := strings.Join(seen, ", "); got != "put empty/x.txt, put empty/d, delete empty/d, delete empty/x.txt, delete empty" {
		t.Fatalf("cat saw %s", got)
	}

	// The history of shared/ as bob sees it: shared/ itself (his read
	// right), and below it what lies in directories he may list, at every
	// level: not inner/'s file, nor anything in deep/, which he may list
	// but reaches only through inner/.
	hch, err := bob.Watch(ctx, "ann@example.com/shared", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Put(ctx, "@/shared/inner/deep/e.txt", bytes.NewReader([]byte("e")), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Put(ctx, "@/shared/last.txt", bytes.NewReader([]byte("l")), 0, nil); err != nil {
		t.Fatal(err)
	}
	seen = nil
	for len(seen) == 0 || seen[len(seen)-1] != "put shared/last.txt" {
		seen = append(seen, next(hch))
	}
	if got, want := strings.Join(seen, ", "), "put shared, put shared/Access, put shared/s.txt, put shared/inner, put shared/last.txt"; got != want {
		t.Fatalf("bob's history of shared/:\n got %s\nwant %s", got, want)
	}
	// The current state shows the same, and the whole tree, which bob
	// may read but not list, shows only its root. team/ names a group
	// bob may not know of: a right that cannot be decided is not held,
	// and the watch goes on.
	for _, tc := range []struct{ name, want string }{
		{"ann@example.com/shared", "put shared, put shared/Access, put shared/inner, put shared/last.txt, put shared/s.txt"},
		{"ann@example.com/", "put "},
	} {
		wctx, wcancel := context.WithCancel(ctx)
		ch, err := bob.Watch(wctx, spindle.PathName(tc.name), 0)
		if err != nil {
			t.Fatal(err)
		}
		n := strings.Count(tc.want, ",") + 1
		seen = nil
		for len(seen) < n {
			seen = append(seen, next(ch))
		}
		if got := strings.Join(seen, ", "); got != tc.want {
			t.Errorf("bob's current state of %s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
		// Nothing else was sent: a change bob sees comes next.
		if _, err := ann.Put(ctx, "@/shared/s.txt", bytes.NewReader([]byte("s2")), 0, nil); err != nil {
			t.Fatal(err)
		}
		if tc.name != "ann@example.com/" {
			if got := next(ch); got != "put shared/s.txt" {
				t.Errorf("bob's next event on %s: %s", tc.name, got)
			}
		}
		wcancel()
	}

	// cat may list the root, not shared/, and his list right on team/
	// cannot be decided (his group is gone): he sees both directories
	// in the root and nothing in them, and the watch goes on.
	ch, err := cat.Watch(ctx, "ann@example.com/", 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "put , put Access, put pub, put pub/f.txt, put pub/lnk, put pub/sub, put pub/sub/g.txt, put shared, put team"
	seen = nil
	for len(seen) < strings.Count(want, ",")+1 {
		seen = append(seen, next(ch))
	}
	if got := strings.Join(seen, ", "); got != want {
		t.Errorf("cat's current state of ann's tree:\n got %s\nwant %s", got, want)
	}
	if _, err := ann.MakeDirectory(ctx, "@/team/sub"); err != nil {
		t.Fatal(err)
	}
	if _, err := ann.Put(ctx, "@/pub/h.txt", bytes.NewReader([]byte("h")), 0, nil); err != nil {
		t.Fatal(err)
	}
	if got := next(ch); got != "put pub/h.txt" {
		t.Errorf("cat's next event: %s", got)
	}
}

// TestErrorsRevealNoMore pins Upspin's Private / Permission / NotExist
// rules through the real client and node, in errors about names, groups,
// links and rights, and that no log position reaches a user without rights.
func TestErrorsRevealNoMore(t *testing.T) {
	ann, bob, cat, dan := rightsTree(t)
	ctx := context.Background()
	users := map[string]*client.Client{"ann": ann, "bob": bob, "cat": cat, "dan": dan}
	for _, tc := range []struct {
		user, name string
		kind       spindle.Kind // Other: success.
		rule       string
	}{
		// Lookup (Upspin lookupWithPermissions): NotExist only with a
		// right on the name; Private for everyone else, whether or not
		// the name exists.
		{"dan", "ann@example.com/pub/f.txt", spindle.Private, "no right: an existing name is Private"},
		{"dan", "ann@example.com/pub/nothing", spindle.Private, "no right: a missing name looks the same"},
		{"dan", "nobody@example.com/x", spindle.Private, "no right: a missing tree looks the same"},
		{"bob", "ann@example.com/pub/nothing", spindle.NotExist, "a right on the name: may know it is missing"},
		{"bob", "ann@example.com/pub/f.txt", spindle.Other, "read"},
		{"cat", "ann@example.com/pub/f.txt", spindle.Other, "list alone: an incomplete entry"},
		{"cat", "ann@example.com/shared/s.txt", spindle.Private, "a right on the parent, none on the name: Private, as in Upspin"},
		// Links (Upspin errLink): a user with a right on the link may
		// follow it; anyone else learns nothing of it, not its target.
		{"bob", "ann@example.com/pub/lnk/s.txt", spindle.Other, "bob follows the link to shared/"},
		{"dan", "ann@example.com/pub/lnk/s.txt", spindle.Private, "no right on the link"},
		// Groups: whether a group exists is told only to users who may
		// know of it; the rest get a plain denial.
		{"bob", "ann@example.com/team/t.txt", spindle.Private, "bob may not know of cat's group"},
		{"dan", "ann@example.com/team/t.txt", spindle.Private, "dan may not know of cat's group"},
		{"cat", "ann@example.com/team/t.txt", spindle.Private, "cat's own group is missing: a denial that says why"},
	} {
		_, err := users[tc.user].Lookup(ctx, spindle.PathName(tc.name), true)
		if tc.kind == spindle.Other {
			if err != nil {
				t.Errorf("%s: %s looks up %s: %v", tc.rule, tc.user, tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: %s looks up %s: %v, want %v", tc.rule, tc.user, tc.name, err, tc.kind)
		}
		// What a user is shown: no log position, no link target, and the
		// group and its state only to its owner.
		msg := fmt.Sprint(err)
		if strings.Contains(msg, "sequence") || strings.Contains(msg, "shared") && tc.user == "dan" {
			t.Errorf("%s: %s is told %q", tc.rule, tc.user, msg)
		}
		if strings.Contains(tc.name, "team") {
			told := strings.Contains(msg, "cat@example.com/Group/team") && strings.Contains(msg, "does not exist")
			if told != (tc.user == "cat") || tc.user != "cat" && (strings.Contains(msg, "Group") || strings.Contains(msg, "exist")) {
				t.Errorf("%s: %s is told %q", tc.rule, tc.user, msg)
			}
		}
	}

	// WhichAccess (Upspin): Private without a right on the name.
	if _, err := dan.WhichAccess(ctx, "ann@example.com/pub/f.txt"); !errors.Is(err, spindle.Private) {
		t.Errorf("dan's WhichAccess: %v, want Private", err)
	}
	if a, err := bob.WhichAccess(ctx, "ann@example.com/pub/f.txt"); err != nil || a == nil || a.Name != "ann@example.com/Access" {
		t.Errorf("bob's WhichAccess = %v, %v", a, err)
	}

	// Writes (Upspin errPerm): Permission with a right on the name,
	// Private without.
	if _, err := bob.Put(ctx, "ann@example.com/pub/b.txt", bytes.NewReader([]byte("b")), 0, nil); !errors.Is(err, spindle.Permission) {
		t.Errorf("bob writes where he may read: %v, want Permission", err)
	}
	_, err := dan.Put(ctx, "ann@example.com/pub/d.txt", bytes.NewReader([]byte("d")), 0, nil)
	if !errors.Is(err, spindle.Private) || strings.Contains(fmt.Sprint(err), "sequence") {
		t.Errorf("dan writes in ann's tree: %v, want Private and no log position", err)
	}
	if err := dan.Delete(ctx, "ann@example.com/pub/f.txt"); !errors.Is(err, spindle.Private) {
		t.Errorf("dan deletes in ann's tree: %v, want Private", err)
	}

	// The log's head (its position) goes only to users with a right in
	// the tree.
	for _, tc := range []struct {
		c     *client.Client
		owner spindle.UserName
		ok    bool
	}{
		{ann, "ann@example.com", true},
		{bob, "ann@example.com", true},
		{cat, "ann@example.com", true},
		{dan, "ann@example.com", false},
		{dan, "dan@example.com", true},
		{dan, "nobody@example.com", false},
	} {
		h, err := tc.c.DirHead(ctx, tc.owner)
		if tc.ok != (err == nil) || !tc.ok && (h != nil || !errors.Is(err, spindle.Private)) {
			t.Errorf("%s asks for the head of %s: %v, %v", tc.c.User(), tc.owner, h, err)
		}
	}
}
