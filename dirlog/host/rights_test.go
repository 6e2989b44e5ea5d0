package host

import (
	"fmt"
	"strings"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// rightsEnv gives ann a tree where
//
//	ann@example.com/Access         *: ann; read, list: bob; create: cat
//	ann@example.com/docs/a.txt
//	ann@example.com/docs/secret/   own Access: *: ann
//	ann@example.com/docs/secret/x
//	ann@example.com/open/          own Access: *: ann, bob, cat
//	ann@example.com/Group/friends  dan@other.org
//	ann@example.com/friends/       own Access: read, list: friends; *: ann
//	ann@example.com/friends/f.txt
func rightsEnv(t *testing.T) *env {
	e := newEnv(t, &MemStore{})
	ctx := e.ctx
	c := e.as(ann)
	e.do(c.MakeDirectory(ctx, "ann@example.com/"))
	e.do(c.Put(ctx, control("ann@example.com/Access", "*: ann@example.com\nread, list: bob@example.com\ncreate: cat@example.com\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/docs"))
	e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 10)))
	e.do(c.MakeDirectory(ctx, "ann@example.com/docs/secret"))
	e.do(c.Put(ctx, control("ann@example.com/docs/secret/Access", "*: ann@example.com\n")))
	e.do(c.Put(ctx, file("ann@example.com/docs/secret/x", 10)))
	e.do(c.MakeDirectory(ctx, "ann@example.com/open"))
	e.do(c.Put(ctx, control("ann@example.com/open/Access", "*: ann@example.com, bob@example.com, cat@example.com\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/Group"))
	e.do(c.Put(ctx, control("ann@example.com/Group/friends", "dan@other.org\n")))
	e.do(c.MakeDirectory(ctx, "ann@example.com/friends"))
	e.do(c.Put(ctx, control("ann@example.com/friends/Access", "read, list: friends\n*: ann@example.com\n")))
	e.do(c.Put(ctx, file("ann@example.com/friends/f.txt", 10)))
	return e
}

func TestReadRights(t *testing.T) {
	e := rightsEnv(t)
	ctx := e.ctx
	for _, tc := range []struct {
		user   spindle.UserName
		name   spindle.PathName
		want   spindle.Kind // Other: success
		strip  bool         // success with an incomplete entry
		reason string
	}{
		{ann, "ann@example.com/docs/secret/x", spindle.Other, false, "owner reads"},
		{bob, "ann@example.com/docs/a.txt", spindle.Other, false, "read granted"},
		{cat, "ann@example.com/docs/a.txt", spindle.Other, true, "create only: entry without blocks"},
		{dan, "ann@example.com/docs/a.txt", spindle.Private, false, "no right anywhere"},
		{dan, "ann@example.com/docs/missing", spindle.Private, false, "no right: missing looks the same as existing"},
		{bob, "ann@example.com/docs/missing", spindle.NotExist, false, "may know it is missing"},
		{cat, "ann@example.com/docs/missing", spindle.NotExist, false, "create right: may know"},
		// Upspin's Lookup: no right on the name is Private, whatever the
		// rights on its parent (secret has an Access file of its own).
		{bob, "ann@example.com/docs/secret", spindle.Private, false, "right on the parent, none on the directory"},
		{bob, "ann@example.com/docs/secret/x", spindle.Private, false, "no right on the name nor its parent"},
		{bob, "ann@example.com/docs/secret/nothing", spindle.Private, false, "no probing under secret"},
		{bob, "ann@example.com/Access", spindle.Other, false, "Access files are readable with any right"},
		{cat, "ann@example.com/Access", spindle.Other, false, "Access files are readable with any right, in full"},
		{dan, "ann@example.com/friends/f.txt", spindle.Other, false, "read through a group"},
		{cat, "ann@example.com/friends/f.txt", spindle.Private, false, "not in the group"},
		{dan, "bob@example.com/anything", spindle.Private, false, "tree that does not exist"},
		{bob, "bob@example.com/anything", spindle.NotExist, false, "own tree that does not exist"},
	} {
		d, err := e.s.Lookup(ctx, tc.user, tc.name)
		if tc.want != spindle.Other {
			if err == nil || spindle.KindOf(err) != tc.want {
				t.Errorf("%s: Lookup(%s, %s) = %v, want %v", tc.reason, tc.user, tc.name, err, tc.want)
				continue
			}
			if !spindle.Match(spindle.E(spindle.Op("dirlog.Lookup"), tc.name, tc.user), err) {
				t.Errorf("%s: error %q does not name op, path and user", tc.reason, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Lookup(%s, %s): %v", tc.reason, tc.user, tc.name, err)
			continue
		}
		if got := d.Attr.IsIncomplete(); got != tc.strip || (tc.strip && (d.Blocks != nil || d.Packdata != nil)) {
			t.Errorf("%s: incomplete=%v blocks=%d packdata=%d", tc.reason, got, len(d.Blocks), len(d.Packdata))
		}
		if strings.HasSuffix(string(tc.name), "/Access") && len(d.Inline) == 0 {
			t.Errorf("%s: Access file text withheld", tc.reason)
		}
	}
}

func TestWriteRights(t *testing.T) {
	e := rightsEnv(t)
	ctx := e.ctx
	type step struct {
		user   spindle.UserName
		do     func(c *dirlog.Client) error
		want   spindle.Kind
		reason string
	}
	put := func(name spindle.PathName) func(c *dirlog.Client) error {
		return func(c *dirlog.Client) error { _, err := c.Put(ctx, file(name, 3)); return err }
	}
	putCtl := func(name spindle.PathName, text string) func(c *dirlog.Client) error {
		return func(c *dirlog.Client) error { _, err := c.Put(ctx, control(name, text)); return err }
	}
	del := func(name spindle.PathName) func(c *dirlog.Client) error {
		return func(c *dirlog.Client) error { _, err := c.Delete(ctx, name); return err }
	}
	mv := func(from, to spindle.PathName) func(c *dirlog.Client) error {
		return func(c *dirlog.Client) error { _, err := c.Rename(ctx, from, to); return err }
	}
	mkdir := func(name spindle.PathName) func(c *dirlog.Client) error {
		return func(c *dirlog.Client) error { _, err := c.MakeDirectory(ctx, name); return err }
	}
	for _, s := range []step{
		{bob, put("ann@example.com/docs/b.txt"), spindle.Permission, "read and list but no create"},
		{cat, put("ann@example.com/docs/c.txt"), spindle.Other, "create granted"},
		{cat, put("ann@example.com/docs/c.txt"), spindle.Permission, "overwrite needs write"},
		{cat, del("ann@example.com/docs/c.txt"), spindle.Permission, "delete needs delete"},
		{cat, mkdir("ann@example.com/docs/catdir"), spindle.Other, "mkdir is create"},
		{cat, mv("ann@example.com/docs/catdir", "ann@example.com/docs/catdir2"), spindle.Permission, "rename needs delete on the old name"},
		{dan, put("ann@example.com/docs/d.txt"), spindle.Private, "no right at all"},
		{dan, put("ann@example.com/friends/d.txt"), spindle.Permission, "read but not create"},
		{bob, put("ann@example.com/open/b.txt"), spindle.Other, "all rights granted"},
		{cat, put("ann@example.com/open/b.txt"), spindle.Other, "write granted"},
		{bob, mv("ann@example.com/open/b.txt", "ann@example.com/open/b2.txt"), spindle.Other, "delete and create granted"},
		{bob, mv("ann@example.com/open/b2.txt", "ann@example.com/docs/b2.txt"), spindle.Permission, "no create at the destination"},
		{bob, del("ann@example.com/open/b2.txt"), spindle.Other, "delete granted"},
		{bob, putCtl("ann@example.com/open/Access", "*: all\n"), spindle.Permission, "non-owner writes an Access file"},
		{ann, mkdir("ann@example.com/open/sub"), spindle.Other, "owner makes a directory"},
		{ann, putCtl("ann@example.com/open/sub/Access", "*: ann@example.com bob@example.com\n"), spindle.Other, "owner writes its Access file"},
		{bob, mv("ann@example.com/open/sub", "ann@example.com/open/sub2"), spindle.Permission, "non-owner moves a directory holding an Access file"},
		{bob, mv("ann@example.com/open/sub/Access", "ann@example.com/open/Access2"), spindle.Permission, "non-owner moves an Access file"},
		{ann, mv("ann@example.com/open/sub", "ann@example.com/open/sub2"), spindle.Other, "owner moves it"},
		{bob, del("ann@example.com/open/Access"), spindle.Permission, "non-owner deletes an Access file"},
		{cat, putCtl("ann@example.com/docs/Access", "*: cat@example.com\n"), spindle.Permission, "create right does not cover Access files"},
		{bob, putCtl("ann@example.com/Group/friends", "bob@example.com\n"), spindle.Permission, "non-owner writes a Group file"},
		{ann, putCtl("ann@example.com/Group/friends", "cat@example.com\n"), spindle.Other, "owner rewrites the group"},
		{cat, put("ann@example.com/friends/x.txt"), spindle.Permission, "group now grants cat read, not create"},
		{dan, put("ann@example.com/friends/y.txt"), spindle.Private, "dan left the group"},
		{ann, putCtl("ann@example.com/friends/Access", "read, list: friends\n*: ann@example.com\ncreate: bob@example.com/Group/team\n"), spindle.Other, "owner names bob's group"},
		// Whether bob's group exists is bob's to tell: cat, with a right
		// on friends/ but none on the group, is denied (Permission, as
		// Upspin's errPerm), never told the group is missing, and never
		// granted as if it were empty.
		{cat, put("ann@example.com/friends/z.txt"), spindle.Permission, "bob's group does not exist yet: cat may not know"},
	} {
		err := s.do(e.as(s.user))
		if s.want == spindle.Other {
			if err != nil {
				t.Fatalf("%s: %v", s.reason, err)
			}
			continue
		}
		if err == nil || spindle.KindOf(err) != s.want {
			t.Fatalf("%s: got %v, want %v", s.reason, err, s.want)
		}
	}
	// Glob lists only directories the user may list (Upspin's listDir):
	// a listable directory shows every name in it, and one that is not
	// is Private.
	for _, tc := range []struct {
		user spindle.UserName
		want string
		kind spindle.Kind
	}{
		{ann, "Access Group docs friends open", spindle.Other},
		{bob, "Access Group docs friends open", spindle.Other},
		{cat, "", spindle.Private}, // Create on the root, not list.
		{dan, "", spindle.Private},
	} {
		got, err := e.s.Glob(ctx, tc.user, "ann@example.com/*")
		if tc.kind != spindle.Other {
			wantKind(t, err, tc.kind, "Glob of a root the user may not list")
			continue
		}
		if err != nil {
			t.Fatalf("Glob as %s: %v", tc.user, err)
		}
		var names []string
		for _, d := range got {
			names = append(names, strings.TrimPrefix(string(d.Name), "ann@example.com/"))
		}
		if strings.Join(names, " ") != tc.want {
			t.Errorf("Glob as %s = %q, want %q (err %v)", tc.user, names, tc.want, err)
		}
	}
	// docs/secret is listed (bob may list docs), though bob has no right
	// on it: its name is in docs.
	if got, _ := e.s.Glob(ctx, bob, "ann@example.com/docs/*"); len(got) != 4 || got[0].Name != "ann@example.com/docs/a.txt" || got[2].Name != "ann@example.com/docs/catdir" || got[3].Name != "ann@example.com/docs/secret" {
		t.Errorf("bob's glob of docs = %v", got)
	}
	// WhichAccess.
	w, err := e.s.WhichAccess(ctx, bob, "ann@example.com/docs/a.txt")
	if err != nil || w == nil || w.Name != "ann@example.com/Access" {
		t.Errorf("WhichAccess = %v, %v", w, err)
	}
	_, err = e.s.WhichAccess(ctx, dan, "ann@example.com/docs/a.txt")
	wantKind(t, err, spindle.Private, "WhichAccess without rights")
}

// TestForeignGroup checks that a decision that used another user's Group
// file is reproduced at replay against that group as it was then, not as
// it is now.
func TestForeignGroup(t *testing.T) {
	store := &MemStore{}
	e := newEnv(t, store)
	ctx := e.ctx
	a, b := e.as(ann), e.as(bob)
	e.do(b.MakeDirectory(ctx, "bob@example.com/"))
	e.do(b.MakeDirectory(ctx, "bob@example.com/Group"))
	e.do(b.Put(ctx, control("bob@example.com/Group/team", "cat@example.com\n")))
	e.do(a.MakeDirectory(ctx, "ann@example.com/"))
	e.do(a.Put(ctx, control("ann@example.com/Access", "*: ann@example.com bob@example.com/Group/team\n")))
	e.do(e.as(cat).Put(ctx, file("ann@example.com/by-cat", 1)))
	// Bob drops cat from his team: cat can no longer write in ann's tree.
	e.do(b.Put(ctx, control("bob@example.com/Group/team", "dan@other.org\n")))
	_, err := e.as(cat).Put(ctx, file("ann@example.com/by-cat-2", 1))
	wantKind(t, err, spindle.Private, "cat after leaving bob's team")
	e.do(e.as(dan).Put(ctx, file("ann@example.com/by-dan", 1)))

	want := e.dump(ann)
	e.reopen()
	if got := e.dump(ann); got != want {
		t.Fatalf("replay with a foreign group differs:\n%s\nwant\n%s", got, want)
	}
	if d := e.s.Damage(); len(d) != 0 {
		t.Fatalf("damage: %v", d)
	}
	// Audit needs both logs; ann's alone cannot be re-decided.
	reports, err := dirlog.Audit(ctx, map[spindle.UserName][]byte{ann: store.Bytes(ann), bob: store.Bytes(bob)}, e.keys, nil)
	if err != nil || reports[0].Err != nil || reports[1].Err != nil {
		t.Fatalf("Audit of both logs = %+v, %v", reports, err)
	}
	reports, err = dirlog.Audit(ctx, map[spindle.UserName][]byte{ann: store.Bytes(ann)}, e.keys, nil)
	if err != nil || reports[0].Err == nil || reports[0].Entries != 2 {
		t.Fatalf("Audit of ann's log alone = %+v, %v", reports, err)
	}
}

// TestLogPositionNeedsRights pins that a log's position (its head, or the
// sequence an entry should have had) reaches only users with a right in
// the tree, and that no error about a group carries a log position.
func TestLogPositionNeedsRights(t *testing.T) {
	e := rightsEnv(t)
	ctx := e.ctx
	for _, tc := range []struct {
		user, owner spindle.UserName
		ok          bool
		rule        string
	}{
		{ann, ann, true, "the owner"},
		{bob, ann, true, "read and list on the root"},
		{cat, ann, true, "create on the root"},
		{dan, ann, true, "read through ann's group friends"},
		{"eve@example.com", ann, false, "no right anywhere: Private"},
		{"eve@example.com", "nobody@example.com", false, "a tree that does not exist looks the same"},
		{"eve@example.com", "eve@example.com", true, "one's own tree, even empty"},
	} {
		h, err := e.s.HeadFor(ctx, tc.user, tc.owner)
		if tc.ok {
			if err != nil || h == nil || h.User != tc.owner {
				t.Errorf("%s: HeadFor(%s, %s) = %v, %v", tc.rule, tc.user, tc.owner, h, err)
			}
			continue
		}
		wantKind(t, err, spindle.Private, tc.rule)
		if h != nil {
			t.Errorf("%s: a head with the error", tc.rule)
		}
	}

	// An entry signed for a stale place: Transient, naming the head, to a
	// writer with a right in the tree; to anyone else what a writer
	// without rights gets, so that trying sequence numbers finds nothing.
	head, _ := e.s.Head(ctx, ann)
	for _, tc := range []struct {
		user spindle.UserName
		kind spindle.Kind
	}{
		{bob, spindle.Transient},
		{"eve@example.com", spindle.Private},
	} {
		if e.signers[tc.user] == nil {
			e.signers[tc.user] = newSigner(t, tc.user)
		}
		for _, seq := range []int64{head.Seq - 1, head.Seq + 5} {
			en := &dirlog.Entry{Seq: seq, Prev: head.Hash, Time: spindle.Now(), Op: dirlog.OpPut, Entry: *file("ann@example.com/open/probe", 1)}
			en.Entry.Writer, en.Entry.Sequence = tc.user, seq
			en.Writer = tc.user
			if err := en.Sign(e.signers[tc.user]); err != nil {
				t.Fatal(err)
			}
			_, err := e.s.Append(ctx, en)
			wantKind(t, err, tc.kind, "stale entry of "+string(tc.user))
			if tc.kind != spindle.Transient && strings.Contains(err.Error(), "sequence") {
				t.Errorf("%s is told %q", tc.user, err)
			}
		}
	}

	// A group that does not exist: its owner's tree is on this host, its
	// Group directory is private. A writer who may not know of it is
	// denied without a word about it; its owner is told, without a log
	// position.
	e.do(e.as(ann).Put(ctx, control("ann@example.com/friends/Access", "read, list: friends\n*: ann@example.com\ncreate: bob@example.com/Group/team\n")))
	e.do(e.as(bob).MakeDirectory(ctx, "bob@example.com/"))
	_, err := e.as(cat).Put(ctx, file("ann@example.com/friends/c.txt", 1))
	wantKind(t, err, spindle.Private, "cat, with no right on friends/, creates there")
	if strings.Contains(err.Error(), "Group") || strings.Contains(err.Error(), "exist") {
		t.Errorf("cat is told %q", err)
	}
	_, err = e.as(bob).Put(ctx, file("ann@example.com/friends/b.txt", 1))
	wantKind(t, err, spindle.Private, "bob, whose group is missing, creates in friends/")
	if msg := err.Error(); !strings.Contains(msg, "bob@example.com/Group/team") || !strings.Contains(msg, "does not exist") || strings.Contains(msg, "sequence") {
		t.Errorf("bob is told %q", msg)
	}
	_, err = e.s.Lookup(ctx, bob, "ann@example.com/friends/f.txt")
	if msg := fmt.Sprint(err); !strings.Contains(msg, "bob@example.com/Group/team") || strings.Contains(msg, "sequence") {
		t.Errorf("bob's lookup in friends/: %v", err)
	}
}
