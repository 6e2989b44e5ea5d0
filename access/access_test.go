package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"spindle.dev"
)

const (
	ann     = spindle.UserName("ann@example.com")
	annCam  = spindle.UserName("ann+camera@example.com")
	bob     = spindle.UserName("bob@example.com")
	bobCell = spindle.UserName("bob+phone@example.com")
	carl    = spindle.UserName("carl@other.org")
	dave    = spindle.UserName("dave@example.com")
	eve     = spindle.UserName("eve@evil.com")
	zed     = spindle.UserName("zed@example.com")
	sub     = spindle.UserName("sam@sub.example.com")
)

// groupFiles are the Group files of the test world, by path.
var groupFiles = map[spindle.PathName]string{
	"ann@example.com/Group/family":       "bob@example.com\ncarl@other.org # and the owner, ann\n",
	"ann@example.com/Group/work/friends": "dave@example.com, eve@evil.com",
	"ann@example.com/Group/org":          "*@other.org",
	"ann@example.com/Group/nest1":        "nest2",
	"ann@example.com/Group/nest2":        "bob@example.com/Group/nest3",
	"bob@example.com/Group/nest3":        "carl@other.org/Group/nest4",
	"carl@other.org/Group/nest4":         "ann@example.com/Group/nest5",
	"ann@example.com/Group/nest5":        "zed@example.com",
	"ann@example.com/Group/cyc1":         "cyc2",
	"ann@example.com/Group/cyc2":         "cyc1, eve@evil.com, cyc3",
	"ann@example.com/Group/cyc3":         "cyc1 cyc3",
	"ann@example.com/Group/self":         "self",
	"ann@example.com/Group/hasghost":     "ghost dave@example.com",
	"ann@example.com/Group/empty":        "# nobody but ann\n",
	"bob@example.com/Group/editors":      "dave@example.com",
}

func groupLoader(t testing.TB) GroupLoader {
	groups := make(map[spindle.PathName]*Group)
	for name, text := range groupFiles {
		g, err := ParseGroup(name, []byte(text))
		if err != nil {
			t.Fatalf("ParseGroup(%s): %v", name, err)
		}
		groups[name] = g
	}
	return func(name spindle.PathName) (*Group, error) {
		if name == "ann@example.com/Group/liar" {
			return groups["ann@example.com/Group/family"], nil
		}
		if g, ok := groups[name]; ok {
			return g, nil
		}
		return nil, spindle.E(spindle.Op("test.loadGroup"), spindle.NotExist, name)
	}
}

func accessLoader(t testing.TB, files map[spindle.PathName]string) AccessLoader {
	parsed := make(map[spindle.PathName]*Access)
	for name, text := range files {
		a, err := Parse(name, []byte(text))
		if err != nil {
			t.Fatalf("Parse(%s): %v", name, err)
		}
		parsed[name] = a
	}
	return func(name spindle.PathName) (*Access, error) {
		if name == "ann@example.com/broken/Access" {
			return nil, spindle.E(spindle.IO, name, "disk on fire")
		}
		return parsed[name], nil // nil, nil when absent.
	}
}

const (
	root    = "ann@example.com/Access"
	file    = spindle.PathName("ann@example.com/dir/file.txt")
	access  = spindle.PathName("ann@example.com/Access")
	subAcc  = spindle.PathName("ann@example.com/dir/Access")
	grpFile = spindle.PathName("ann@example.com/Group/family")
	grpAcc  = spindle.PathName("ann@example.com/Group/Access")
)

func rootOnly(text string) map[spindle.PathName]string {
	return map[spindle.PathName]string{root: text}
}

type canCase struct {
	name    string
	files   map[spindle.PathName]string // Access files by path; nil means none anywhere.
	user    spindle.UserName
	right   Right
	path    spindle.PathName
	want    bool
	errKind spindle.Kind // Other: no error expected.
}

var canCases = []canCase{
	// No Access file at all: the owner, and only the owner, has every right.
	{"none/owner read", nil, ann, Read, file, true, 0},
	{"none/owner write", nil, ann, Write, file, true, 0},
	{"none/owner list", nil, ann, List, file, true, 0},
	{"none/owner create", nil, ann, Create, file, true, 0},
	{"none/owner delete", nil, ann, Delete, file, true, 0},
	{"none/owner any", nil, ann, AnyRight, file, true, 0},
	{"none/owner writes Access", nil, ann, Write, subAcc, true, 0},
	{"none/other read", nil, bob, Read, file, false, 0},
	{"none/other list", nil, bob, List, file, false, 0},
	{"none/other any", nil, bob, AnyRight, file, false, 0},
	{"none/suffix user is not owner", nil, annCam, Read, file, false, 0},
	{"none/root path", nil, ann, List, "ann@example.com/", true, 0},

	// The owner may always read and list, but needs a grant for the rest.
	{"owner/read not granted", rootOnly("w: bob@example.com"), ann, Read, file, true, 0},
	{"owner/list not granted", rootOnly("r: bob@example.com"), ann, List, file, true, 0},
	{"owner/any with empty file", rootOnly("# nothing\n"), ann, AnyRight, file, true, 0},
	{"owner/write not granted", rootOnly("r: bob@example.com"), ann, Write, file, false, 0},
	{"owner/create not granted", rootOnly("r: bob@example.com"), ann, Create, file, false, 0},
	{"owner/delete not granted", rootOnly("r: bob@example.com"), ann, Delete, file, false, 0},
	{"owner/write granted", rootOnly("w: ann@example.com"), ann, Write, file, true, 0},
	{"owner/write via own group", rootOnly("w: family"), ann, Write, file, true, 0},
	{"owner/create via star", rootOnly("*: ann@example.com"), ann, Create, file, true, 0},

	// Each right for a non-owner, in every spelling.
	{"right/read", rootOnly("read: bob@example.com"), bob, Read, file, true, 0},
	{"right/read not write", rootOnly("read: bob@example.com"), bob, Write, file, false, 0},
	{"right/read not list", rootOnly("read: bob@example.com"), bob, List, file, false, 0},
	{"right/read not create", rootOnly("read: bob@example.com"), bob, Create, file, false, 0},
	{"right/read not delete", rootOnly("read: bob@example.com"), bob, Delete, file, false, 0},
	{"right/Write", rootOnly("Write: bob@example.com"), bob, Write, file, true, 0},
	{"right/LIST", rootOnly("LIST: bob@example.com"), bob, List, file, true, 0},
	{"right/c", rootOnly("c: bob@example.com"), bob, Create, file, true, 0},
	{"right/D", rootOnly("D: bob@example.com"), bob, Delete, file, true, 0},
	{"right/star read", rootOnly("*: bob@example.com"), bob, Read, file, true, 0},
	{"right/star delete", rootOnly("*: bob@example.com"), bob, Delete, file, true, 0},
	{"right/list of rights", rootOnly("r, w: bob@example.com"), bob, Write, file, true, 0},
	{"right/space separated rights", rootOnly("read list: bob@example.com"), bob, List, file, true, 0},
	{"right/not named", rootOnly("r: carl@other.org"), bob, Read, file, false, 0},
	{"right/any from delete", rootOnly("d: bob@example.com"), bob, AnyRight, file, true, 0},
	{"right/any none", rootOnly("d: bob@example.com"), dave, AnyRight, file, false, 0},
	{"right/lines accumulate", rootOnly("r: carl@other.org\nr: bob@example.com\n"), bob, Read, file, true, 0},
	{"right/user case in domain", rootOnly("r: bob@EXAMPLE.com"), bob, Read, file, true, 0},
	{"right/user part is case sensitive", rootOnly("r: Bob@example.com"), bob, Read, file, false, 0},
	{"right/comment", rootOnly("r: carl@other.org # bob@example.com\n"), bob, Read, file, false, 0},

	// Groups.
	{"group/member", rootOnly("r: family"), bob, Read, file, true, 0},
	{"group/other member", rootOnly("r: family"), carl, Read, file, true, 0},
	{"group/not member", rootOnly("r: family"), dave, Read, file, false, 0},
	{"group/only its right", rootOnly("r: family"), bob, Write, file, false, 0},
	{"group/sub directory name", rootOnly("r: work/friends"), dave, Read, file, true, 0},
	{"group/full path", rootOnly("r: ann@example.com/Group/family"), carl, Read, file, true, 0},
	{"group/remote", rootOnly("w: bob@example.com/Group/editors"), dave, Write, file, true, 0},
	{"group/remote owner is member", rootOnly("w: bob@example.com/Group/editors"), bob, Write, file, true, 0},
	{"group/empty has owner", rootOnly("w: empty"), ann, Write, file, true, 0},
	{"group/empty has nobody else", rootOnly("w: empty"), bob, Write, file, false, 0},
	{"group/nested 5 deep", rootOnly("r: nest1"), zed, Read, file, true, 0},
	{"group/nested remote owner", rootOnly("r: nest1"), carl, Read, file, true, 0},
	{"group/nested not member", rootOnly("r: nest1"), dave, Read, file, false, 0},
	{"group/cycle member", rootOnly("r: cyc1"), eve, Read, file, true, 0},
	{"group/cycle terminates", rootOnly("r: cyc1"), dave, Read, file, false, 0},
	{"group/self cycle terminates", rootOnly("r: self"), dave, Read, file, false, 0},
	{"group/wildcard member", rootOnly("r: org"), carl, Read, file, true, 0},
	{"group/suffix user is not base", rootOnly("r: family"), bobCell, Read, file, false, 0},
	{"group/missing", rootOnly("r: ghost"), bob, Read, file, false, spindle.NotExist},
	{"group/missing nested", rootOnly("r: hasghost"), bob, Read, file, false, spindle.NotExist},
	{"group/missing but named directly", rootOnly("r: ghost, bob@example.com"), bob, Read, file, true, 0},
	{"group/missing but granted by other group", rootOnly("r: ghost family"), bob, Read, file, true, 0},
	{"group/missing but member of its parent", rootOnly("r: hasghost"), dave, Read, file, true, 0},
	{"group/missing not consulted for owner read", rootOnly("r: ghost"), ann, Read, file, true, 0},
	{"group/loader returns wrong group", rootOnly("r: liar"), dave, Read, file, false, spindle.Internal},

	// Wildcards.
	{"wildcard/domain", rootOnly("r: *@example.com"), bob, Read, file, true, 0},
	{"wildcard/suffix user", rootOnly("r: *@example.com"), annCam, Read, file, true, 0},
	{"wildcard/other domain", rootOnly("r: *@example.com"), carl, Read, file, false, 0},
	{"wildcard/not subdomain", rootOnly("r: *@example.com"), sub, Read, file, false, 0},
	{"wildcard/domain case", rootOnly("r: *@Example.COM."), dave, Read, file, true, 0},

	// all.
	{"all/read", rootOnly("r: all"), eve, Read, file, true, 0},
	{"all/write", rootOnly("w: all, bob@example.com"), eve, Write, file, true, 0},
	{"all/not other rights", rootOnly("r: all"), eve, List, file, false, 0},
	{"all/upper case", rootOnly("r: ALL"), carl, Read, file, true, 0},
	{"all/reserved spelling", rootOnly("l: all@spindle.dev"), carl, List, file, true, 0},
	{"all/suffix user", rootOnly("r: all"), bobCell, Read, file, true, 0},

	// +suffix users are users of their own.
	{"suffix/base grant does not cover suffix", rootOnly("w: ann@example.com"), annCam, Write, file, false, 0},
	{"suffix/granted", rootOnly("w: ann+camera@example.com"), annCam, Write, file, true, 0},
	{"suffix/suffix grant does not cover base", rootOnly("w: ann+camera@example.com"), ann, Write, file, false, 0},
	{"suffix/no owner rights in base tree", rootOnly("w: bob@example.com"), annCam, Read, file, false, 0},
	{"suffix/base has no owner rights in suffix tree",
		map[spindle.PathName]string{"ann+camera@example.com/Access": "w: bob@example.com"},
		ann, Read, "ann+camera@example.com/pic.jpg", false, 0},
	{"suffix/owner of own tree",
		map[spindle.PathName]string{"ann+camera@example.com/Access": "w: bob@example.com"},
		annCam, Read, "ann+camera@example.com/pic.jpg", true, 0},

	// Access and Group files: only the owner writes, creates or deletes them.
	{"protect/write Access", rootOnly("*: bob@example.com"), bob, Write, access, false, 0},
	{"protect/create sub Access", rootOnly("*: bob@example.com"), bob, Create, subAcc, false, 0},
	{"protect/delete Access", rootOnly("*: bob@example.com"), bob, Delete, access, false, 0},
	{"protect/write Group file", rootOnly("*: bob@example.com"), bob, Write, grpFile, false, 0},
	{"protect/create Group file", rootOnly("*: all"), eve, Create, "ann@example.com/Group/new", false, 0},
	{"protect/delete Group file", rootOnly("d: family"), bob, Delete, grpFile, false, 0},
	{"protect/Access in Group dir", rootOnly("*: all"), eve, Write, grpAcc, false, 0},
	{"protect/star all any right", rootOnly("*: all"), eve, Write, access, false, 0},
	{"protect/read Access if granted", rootOnly("r: bob@example.com"), bob, Read, access, true, 0},
	{"protect/list Group file if granted", rootOnly("l: bob@example.com"), bob, List, grpFile, true, 0},
	{"protect/owner writes Access without grant", rootOnly("r: bob@example.com"), ann, Write, access, true, 0},
	{"protect/owner creates Group file without grant", rootOnly("r: bob@example.com"), ann, Create, "ann@example.com/Group/new", true, 0},
	{"protect/owner deletes Group file without grant", rootOnly(""), ann, Delete, grpFile, true, 0},
	{"protect/suffix user is not owner", rootOnly("*: ann+camera@example.com"), annCam, Write, access, false, 0},
	{"protect/not Access: longer name", rootOnly("w: bob@example.com"), bob, Write, "ann@example.com/dir/Accessory", true, 0},
	{"protect/not Access: lower case", rootOnly("w: bob@example.com"), bob, Write, "ann@example.com/dir/access", true, 0},
	{"protect/not Group: Group below root", rootOnly("w: bob@example.com"), bob, Write, "ann@example.com/dir/Group/x", true, 0},
	{"protect/not Group: Groups", rootOnly("w: bob@example.com"), bob, Write, "ann@example.com/Groups/x", true, 0},

	// The nearest Access file governs completely.
	{"nearest/sub grants", map[spindle.PathName]string{root: "r: carl@other.org", subAcc: "r: bob@example.com"},
		bob, Read, "ann@example.com/dir/a/b/c", true, 0},
	{"nearest/no merging with parent", map[spindle.PathName]string{root: "r: carl@other.org", subAcc: "r: bob@example.com"},
		carl, Read, "ann@example.com/dir/a/b/c", false, 0},
	{"nearest/parent elsewhere", map[spindle.PathName]string{root: "r: carl@other.org", subAcc: "r: bob@example.com"},
		carl, Read, "ann@example.com/other/x", true, 0},
	{"nearest/directory governed by own Access", map[spindle.PathName]string{root: "l: carl@other.org", subAcc: "l: bob@example.com"},
		bob, List, "ann@example.com/dir", true, 0},
	{"nearest/Access governs itself", map[spindle.PathName]string{root: "r: carl@other.org", subAcc: "r: bob@example.com"},
		bob, Read, subAcc, true, 0},
	{"nearest/unclean name is cleaned", map[spindle.PathName]string{root: "r: carl@other.org", subAcc: "r: bob@example.com"},
		bob, Read, "ann@Example.com//dir/./x/../y", true, 0},
	{"nearest/dot-dot cannot climb out", rootOnly("r: bob@example.com"),
		bob, Read, "ann@example.com/../../bob@example.com/x", true, 0},

	// Bad requests.
	{"bad/loader error", rootOnly("r: bob@example.com"), bob, Read, "ann@example.com/broken/x", false, spindle.IO},
	{"bad/wildcard requester", rootOnly("r: *@example.com"), "*@example.com", Read, file, false, spindle.Invalid},
	{"bad/all requester", rootOnly("r: all"), spindle.AllUsers, Read, file, false, spindle.Invalid},
	{"bad/non-canonical requester", rootOnly("r: *@example.com"), "bob@EXAMPLE.com", Read, file, false, spindle.Invalid},
	{"bad/right", rootOnly("r: bob@example.com"), bob, Right(9), file, false, spindle.Invalid},
	{"bad/path", rootOnly("r: bob@example.com"), bob, Read, "not a path", false, spindle.Invalid},
}

func TestCan(t *testing.T) {
	loadGroup := groupLoader(t)
	for _, tc := range canCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Can(tc.user, tc.right, tc.path, accessLoader(t, tc.files), loadGroup)
			if tc.errKind != spindle.Other {
				if err == nil || !errors.Is(err, tc.errKind) {
					t.Fatalf("Can(%s, %s, %s) = %v, %v; want error of kind %v", tc.user, tc.right, tc.path, got, err, tc.errKind)
				}
				if got {
					t.Fatalf("Can(%s, %s, %s) = true with error %v", tc.user, tc.right, tc.path, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Can(%s, %s, %s): unexpected error %v", tc.user, tc.right, tc.path, err)
			}
			if got != tc.want {
				t.Fatalf("Can(%s, %s, %s) = %v, want %v", tc.user, tc.right, tc.path, got, tc.want)
			}
		})
	}
	if len(canCases) < 60 {
		t.Errorf("only %d cases", len(canCases))
	}
}

func TestAccessCanChecksItsArguments(t *testing.T) {
	a, err := Parse(subAcc, []byte("*: bob@example.com"))
	if err != nil {
		t.Fatal(err)
	}
	load := groupLoader(t)
	for _, name := range []spindle.PathName{
		"ann@example.com/other/file",    // Not under dir.
		"ann@example.com/dirt/file",     // Prefix of the string, not of the path.
		"ann@example.com/",              // Above dir.
		"ann@example.com/dir/a/../file", // Unclean.
		"ann@example.com/dir//file",     // Unclean.
		"ann@example.com/dir/file/",     // Trailing slash.
		"ann@example.com/dir/.",         // Unclean.
		"bob@example.com/dir/file",      // Another tree.
	} {
		ok, err := a.Can(bob, Read, name, load)
		if ok || !errors.Is(err, spindle.Invalid) {
			t.Errorf("Can(%s) = %v, %v; want Invalid error", name, ok, err)
		}
	}
	for _, name := range []spindle.PathName{"ann@example.com/dir", "ann@example.com/dir/a/b"} {
		if ok, err := a.Can(bob, Read, name, load); !ok || err != nil {
			t.Errorf("Can(%s) = %v, %v; want true", name, ok, err)
		}
	}
	bad := New("not a user/x")
	if ok, err := bad.Can(ann, Read, "ann@example.com/x", load); ok || !errors.Is(err, spindle.Invalid) {
		t.Errorf("Can on New(invalid) = %v, %v; want Invalid error", ok, err)
	}
	// A nil group loader is reported, not a crash.
	g, err := Parse(access, []byte("r: family"))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Can(bob, Read, file, nil); ok || !errors.Is(err, spindle.Internal) {
		t.Errorf("Can with nil loader = %v, %v; want Internal error", ok, err)
	}
}

func TestMissingGroupError(t *testing.T) {
	a, err := Parse(access, []byte("r: ghost"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Can(bob, Read, file, groupLoader(t))
	want := spindle.E(spindle.Op("access.Can"), spindle.NotExist, file, bob)
	if !spindle.Match(want, err) {
		t.Fatalf("error %v does not match %v", err, want)
	}
	if !strings.Contains(err.Error(), "ann@example.com/Group/ghost") {
		t.Errorf("error %q does not name the group", err)
	}
}

type parseErrCase struct {
	text string
	msg  string
}

var accessParseErrors = []parseErrCase{
	{"bob@abc.com", `no colon on line 1: "bob@abc.com"`},
	{"rea: bob@abc.com", `invalid access rights on line 1: "rea"`},
	{"# comment\n\nr: bob@abc.com\nx: bob@abc.com\n", `invalid access rights on line 4: "x"`},
	{"re ad: bob@abc.com", `invalid access rights on line 1: "re"`},
	{"rw: bob@abc.com", `invalid access rights on line 1: "rw"`},
	{"*w: bob@abc.com", `invalid access rights on line 1: "*w"`},
	{": bob@abc.com", `invalid rights list on line 1: ""`},
	{"r,,w: bob@abc.com", `invalid rights list on line 1: "r,,w"`},
	{",r: bob@abc.com", `invalid rights list on line 1: ",r"`},
	{"r:", `no users on line 1: "r:"`},
	{"r: # nobody\n", `no users on line 1: "r:"`},
	{"r: bob@abc.com,,ann@abc.com", `invalid users list on line 1: "bob@abc.com,,ann@abc.com"`},
	{"r: bob@", `invalid user name on line 1: "bob@": empty domain`},
	{"r: bob@abc", `invalid user name on line 1: "bob@abc": domain "abc" has no period`},
	{"r: bob@abc.com@x.com", `invalid user name on line 1: "bob@abc.com@x.com": user name has more than one @`},
	{"r: bob@abc.com: w", `unexpected colon on line 1: "bob@abc.com:"`},
	{"r: all, bob@abc.com", `all must be the only user on read line 1: "all, bob@abc.com"`},
	{"*: bob@abc.com all", `all must be the only user on read line 1: "bob@abc.com all"`},
	{"r: *@com", `invalid wildcard on line 1: "*@com": domain "com" has no period`},
	{"r: *", `invalid user name on line 1: "*": a wildcard needs a domain, as in *@example.com; all means everyone`},
	{"r: *@abc.com/Group/x", `invalid group name on line 1: "*@abc.com/Group/x": a wildcard cannot own a group`},
	{"r: bob@abc.com/docs", `invalid group name on line 1: "bob@abc.com/docs": not a file in a Group directory`},
	{"r: bob@abc.com/Group/Access", `invalid group name on line 1: "bob@abc.com/Group/Access": not a file in a Group directory`},
	{"r: ../secrets", `invalid group name on line 1: "../secrets": not a file in a Group directory`},
	{"r: bob@/Group/x", `invalid group name on line 1: "bob@/Group/x": empty domain`},
}

func TestParseErrors(t *testing.T) {
	for _, tc := range accessParseErrors {
		_, err := Parse(access, []byte(tc.text))
		want := spindle.E(spindle.Op("access.Parse"), spindle.Invalid, access, tc.msg)
		if !spindle.Match(want, err) {
			t.Errorf("Parse(%q):\n got %v\nwant %v", tc.text, err, want)
		}
	}
	_, err := Parse("ann@example.com/dir/file", []byte("r: all"))
	if !spindle.Match(spindle.E(spindle.Invalid, spindle.PathName("ann@example.com/dir/file"), "not an Access file"), err) {
		t.Errorf("Parse of a non-Access file: %v", err)
	}
	if _, err := Parse("nobody/Access", nil); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Parse with a bad path: %v", err)
	}
}

var groupParseErrors = []parseErrCase{
	{"all", `all is not allowed in a group file, line 1: "all"`},
	{"bob@abc.com\nALL", `all is not allowed in a group file, line 2: "ALL"`},
	{"bob@", `invalid user name on line 1: "bob@": empty domain`},
	{"r: bob@abc.com", `colon in group file on line 1: "r: bob@abc.com"`},
	{",bob@abc.com", `invalid members list on line 1: ",bob@abc.com"`},
	{"bob@abc.com,, ann@abc.com", `invalid members list on line 1: "bob@abc.com,, ann@abc.com"`},
	{"carl@abc.com/notgroup", `invalid group name on line 1: "carl@abc.com/notgroup": not a file in a Group directory`},
}

func TestParseGroupErrors(t *testing.T) {
	for _, tc := range groupParseErrors {
		_, err := ParseGroup(grpFile, []byte(tc.text))
		want := spindle.E(spindle.Op("access.ParseGroup"), spindle.Invalid, grpFile, tc.msg)
		if !spindle.Match(want, err) {
			t.Errorf("ParseGroup(%q):\n got %v\nwant %v", tc.text, err, want)
		}
	}
	for _, name := range []spindle.PathName{"ann@example.com/Group", grpAcc, "ann@example.com/dir/Group/x", "bad"} {
		if _, err := ParseGroup(name, []byte("bob@abc.com")); !errors.Is(err, spindle.Invalid) {
			t.Errorf("ParseGroup(%s): %v, want Invalid error", name, err)
		}
	}
}

func TestParseGroup(t *testing.T) {
	text := "# friends\r\nbob@example.com, Carl@Other.ORG\r\n  *@abc.com work/friends,\tbob@example.com/Group/x\n\ndave@example.com dave@example.com"
	g, err := ParseGroup("ann@example.com//Group/./friends", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if g.Path() != "ann@example.com/Group/friends" || g.Owner() != ann {
		t.Errorf("Path, Owner = %s, %s", g.Path(), g.Owner())
	}
	wantUsers := []spindle.UserName{"Carl@other.org", bob, dave}
	if !slices.Equal(g.members.users, wantUsers) {
		t.Errorf("users = %v, want %v", g.members.users, wantUsers)
	}
	if !slices.Equal(g.members.domains, []string{"abc.com"}) {
		t.Errorf("domains = %v", g.members.domains)
	}
	wantGroups := []spindle.PathName{"ann@example.com/Group/work/friends", "bob@example.com/Group/x"}
	if !slices.Equal(g.Groups(), wantGroups) {
		t.Errorf("Groups() = %v, want %v", g.Groups(), wantGroups)
	}
}

func TestParseAccess(t *testing.T) {
	text := "# Ann's photos\r\nRead, LIST: family, *@Example.com\nw : ann+camera@example.com # the camera\n*: bob@example.com/Group/editors\n\n\td: carl@other.org"
	a, err := Parse("ann@example.com/photos/./Access", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if a.Path() != "ann@example.com/photos/Access" || a.Owner() != ann {
		t.Errorf("Path, Owner = %s, %s", a.Path(), a.Owner())
	}
	want := map[Right]string{
		Read:     "users [] domains [example.com] groups [ann@example.com/Group/family bob@example.com/Group/editors]",
		List:     "users [] domains [example.com] groups [ann@example.com/Group/family bob@example.com/Group/editors]",
		Write:    "users [ann+camera@example.com] domains [] groups [bob@example.com/Group/editors]",
		Create:   "users [] domains [] groups [bob@example.com/Group/editors]",
		Delete:   "users [carl@other.org] domains [] groups [bob@example.com/Group/editors]",
		AnyRight: "users [ann+camera@example.com carl@other.org] domains [example.com] groups [ann@example.com/Group/family bob@example.com/Group/editors]",
	}
	for r, w := range want {
		g := a.rights[r]
		got := fmt.Sprintf("users %v domains %v groups %v", g.users, g.domains, g.groups)
		if got != w || g.all {
			t.Errorf("%s: got %s (all %v), want %s", r, got, g.all, w)
		}
	}
	if got := a.Groups(); len(got) != 2 {
		t.Errorf("Groups() = %v", got)
	}
}

func TestUsers(t *testing.T) {
	load := groupLoader(t)
	tests := []struct {
		text  string
		right Right
		want  string
		kind  spindle.Kind
	}{
		{"r: bob@example.com", Read, "ann@example.com bob@example.com", 0},
		{"r: bob@example.com", Write, "", 0},
		{"w: bob@example.com carl@other.org", Write, "bob@example.com carl@other.org", 0},
		{"r: family, bob@example.com", Read, "ann@example.com bob@example.com carl@other.org", 0},
		{"r: all", Read, "all@spindle.dev ann@example.com", 0},
		{"r: *@other.org", Read, "*@other.org ann@example.com", 0},
		{"r: org", Read, "*@other.org ann@example.com", 0},
		{"r: nest1", Read, "ann@example.com bob@example.com carl@other.org zed@example.com", 0},
		{"w: cyc1", Write, "ann@example.com eve@evil.com", 0},
		{"w: bob@example.com/Group/editors", Write, "bob@example.com dave@example.com", 0},
		{"d: dave@example.com\nl: eve@evil.com", AnyRight, "ann@example.com dave@example.com eve@evil.com", 0},
		{"r: ghost", Read, "", spindle.NotExist},
		{"r: hasghost", Read, "", spindle.NotExist},
	}
	for _, tc := range tests {
		a, err := Parse(access, []byte(tc.text))
		if err != nil {
			t.Fatal(err)
		}
		users, err := a.Users(tc.right, load)
		if tc.kind != spindle.Other {
			if !errors.Is(err, tc.kind) || users != nil {
				t.Errorf("Users(%q, %s) = %v, %v; want error of kind %v", tc.text, tc.right, users, err, tc.kind)
			}
			continue
		}
		if err != nil {
			t.Errorf("Users(%q, %s): %v", tc.text, tc.right, err)
			continue
		}
		got := strings.Trim(fmt.Sprint(users), "[]")
		if got != tc.want {
			t.Errorf("Users(%q, %s) = %s, want %s", tc.text, tc.right, got, tc.want)
		}
	}
	n := New("ann@example.com/")
	for r := Read; r <= AnyRight; r++ {
		users, err := n.Users(r, load)
		if err != nil || !slices.Equal(users, []spindle.UserName{ann}) {
			t.Errorf("New().Users(%s) = %v, %v", r, users, err)
		}
	}
}

func TestWhichAccess(t *testing.T) {
	load := accessLoader(t, map[spindle.PathName]string{
		root:                           "r: bob@example.com",
		subAcc:                         "r: carl@other.org",
		"ann@example.com/dir/a/Access": "r: dave@example.com",
	})
	tests := []struct {
		name, want spindle.PathName
	}{
		{"ann@example.com", root},
		{"ann@example.com/", root},
		{"ann@example.com/x", root},
		{"ann@example.com/Access", root},
		{"ann@example.com/dir", subAcc},
		{"ann@example.com/dir/Access", subAcc},
		{"ann@example.com/dir/x/y/z", subAcc},
		{"ann@example.com/dir/a", "ann@example.com/dir/a/Access"},
		{"ann@example.com/dir/a/Access", "ann@example.com/dir/a/Access"},
		{"ann@example.com/dir/ab", subAcc},
		{"ann@example.com/dir/a/../b", subAcc},
	}
	for _, tc := range tests {
		a, err := WhichAccess(tc.name, load)
		if err != nil {
			t.Errorf("WhichAccess(%s): %v", tc.name, err)
			continue
		}
		if a.Path() != tc.want {
			t.Errorf("WhichAccess(%s) = %s, want %s", tc.name, a.Path(), tc.want)
		}
	}
	a, err := WhichAccess("bob@example.com/x/y", load)
	if err != nil || a.Path() != "bob@example.com/Access" || a.Owner() != bob {
		t.Errorf("WhichAccess with no Access file = %v, %v", a, err)
	}
	if _, err := WhichAccess("ann@example.com/broken/x", load); !errors.Is(err, spindle.IO) {
		t.Errorf("WhichAccess with failing loader: %v", err)
	}
	if _, err := WhichAccess("bad", load); !errors.Is(err, spindle.Invalid) {
		t.Errorf("WhichAccess(bad): %v", err)
	}
	wrong := func(spindle.PathName) (*Access, error) { return New("bob@example.com/"), nil }
	if _, err := WhichAccess("ann@example.com/x", wrong); !errors.Is(err, spindle.Internal) {
		t.Errorf("WhichAccess with lying loader: %v", err)
	}
}

func TestNew(t *testing.T) {
	for _, name := range []spindle.PathName{"ann@example.com", "ann@example.com/", "ann@Example.com/dir/x", "ann@example.com/dir/Access"} {
		a := New(name)
		if a.Path() != access || a.Owner() != ann {
			t.Errorf("New(%s): Path %s Owner %s", name, a.Path(), a.Owner())
		}
	}
	if a := New("bad"); a.Owner() != "" || a.Path() != "" {
		t.Errorf("New(bad) = %+v", a)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name          spindle.PathName
		access, group bool
	}{
		{"ann@example.com/Access", true, false},
		{"ann@example.com/a/b/Access", true, false},
		{"ann@example.com/Group/Access", true, false},
		{"ann@example.com/Group/x/Access", true, false},
		{"ann@example.com/Group/family", false, true},
		{"ann@example.com/Group/work/friends", false, true},
		{"ann@example.com/Group", false, false},
		{"ann@example.com/", false, false},
		{"ann@example.com/Accessible", false, false},
		{"ann@example.com/access", false, false},
		{"ann@example.com/group/x", false, false},
		{"ann@example.com/a/Group/x", false, false},
		{"ann@example.com/Groups/x", false, false},
	}
	for _, tc := range tests {
		if got := IsAccessFile(tc.name); got != tc.access {
			t.Errorf("IsAccessFile(%s) = %v", tc.name, got)
		}
		if got := IsGroupFile(tc.name); got != tc.group {
			t.Errorf("IsGroupFile(%s) = %v", tc.name, got)
		}
	}
}

func TestRightString(t *testing.T) {
	want := []string{"read", "write", "list", "create", "delete", "any"}
	for r := Read; r <= AnyRight; r++ {
		if r.String() != want[r] {
			t.Errorf("Right(%d).String() = %q", r, r.String())
		}
		if r < AnyRight {
			if got, ok := parseRight(r.String()); !ok || got != r {
				t.Errorf("parseRight(%q) = %v, %v", r, got, ok)
			}
		}
	}
	if s := Right(-1).String(); s != "Right(-1)" {
		t.Errorf("Right(-1).String() = %q", s)
	}
	// Unicode case folding must not sneak in look-alikes: U+017F folds to s.
	if _, ok := parseRight("li\u017ft"); ok {
		t.Error("parseRight accepted a non-ASCII look-alike")
	}
}

func TestKnownUsers(t *testing.T) {
	load := groupLoader(t)
	for _, tc := range []struct {
		text   string
		want   string
		failed []spindle.PathName // Groups reported, all NotExist here.
	}{
		{"r: family", "ann@example.com bob@example.com carl@other.org", nil},
		{"r: ghost, bob@example.com", "ann@example.com bob@example.com", []spindle.PathName{"ann@example.com/Group/ghost"}},
		{"r: hasghost", "ann@example.com dave@example.com", []spindle.PathName{"ann@example.com/Group/ghost"}},
		{"r: ghost, bob@example.com/Group/gone, family", "ann@example.com bob@example.com carl@other.org",
			[]spindle.PathName{"ann@example.com/Group/ghost", "bob@example.com/Group/gone"}},
	} {
		a, err := Parse(access, []byte(tc.text))
		if err != nil {
			t.Fatal(err)
		}
		users, failed, err := a.KnownUsers(Read, load)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Trim(fmt.Sprint(users), "[]"); got != tc.want {
			t.Errorf("KnownUsers(%q) = %s, want %s", tc.text, got, tc.want)
		}
		if len(failed) != len(tc.failed) {
			t.Errorf("KnownUsers(%q) failed %v, want %v", tc.text, failed, tc.failed)
			continue
		}
		for i, g := range tc.failed {
			if !spindle.Match(spindle.E(spindle.NotExist, g), failed[i]) {
				t.Errorf("KnownUsers(%q) failure %d: %v, want NotExist for %s", tc.text, i, failed[i], g)
			}
		}
		// Users fails where KnownUsers reports.
		if _, err := a.Users(Read, load); (err != nil) != (len(tc.failed) > 0) {
			t.Errorf("Users(%q): %v", tc.text, err)
		}
	}
}

// Check refuses, with the line, what Parse and ParseGroup still accept so
// that files already in a log replay as they did.
func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name spindle.PathName
		text string
		msg  string // "" if the text is fine.
	}{
		{grpFile, "bob@example.com\ncarl@other.org, family\r\n", ""},
		{grpFile, "bob@example.com\t# a tab is fine\n", ""},
		{grpFile, "Bob@Example.com\n", ""},
		{access, "r: bob@example.com, work/friends # fine\n", ""},
		{access, "r: café # a group of the owner's\n", ""},
		{grpFile, "bob@example.com\n\xff\n", `invalid UTF-8 on line 2: "\xff"`},
		{grpFile, "bob@example.com # caf\xe9\n", `invalid UTF-8 on line 1: "bob@example.com # caf\xe9"`},
		{access, "r: bob@example.com\n# \xc3\n", `invalid UTF-8 on line 2: "# \xc3"`},
		{grpFile, "bob@example.com # \x1b[2J\n", `control character U+001B on line 1: "bob@example.com # \x1b[2J"`},
		{grpFile, "bob@example.com\rcarl@other.org\n", `control character U+000D on line 1: "bob@example.com\rcarl@other.org"`},
		{access, "r: bob@example.com # \u0085\n", `control character U+0085 on line 1: "r: bob@example.com # \u0085"`},
		{grpFile, "\n\nfriends/\n", `invalid group name on line 3: "friends/": empty, . or .. element or trailing slash; write friends`},
		{grpFile, "work//friends", `invalid group name on line 1: "work//friends": empty, . or .. element or trailing slash; write work/friends`},
		{grpFile, "bob@example.com/Group/./x", `invalid group name on line 1: "bob@example.com/Group/./x": empty, . or .. element or trailing slash; write bob@example.com/Group/x`},
		{access, "r: work/../family", `invalid group name on line 1: "work/../family": empty, . or .. element or trailing slash; write family`},
		{grpFile, "bob@@example.com", `invalid user name on line 1: "bob@@example.com": user name has more than one @`},
		{grpFile, "bob@example.com,,carl@other.org", `invalid members list on line 1: "bob@example.com,,carl@other.org"`},
	} {
		err := Check(tc.name, []byte(tc.text))
		if tc.msg == "" {
			if err != nil {
				t.Errorf("Check(%s, %q): %v", tc.name, tc.text, err)
			}
			continue
		}
		want := spindle.E(spindle.Op("access.Check"), spindle.Invalid, tc.name, tc.msg)
		if !spindle.Match(want, err) {
			t.Errorf("Check(%s, %q):\n got %v\nwant %v", tc.name, tc.text, err, want)
		}
		// What is already in a log still parses (and means what it meant).
		var perr error
		if IsGroupFile(tc.name) {
			_, perr = ParseGroup(tc.name, []byte(tc.text))
		} else {
			_, perr = Parse(tc.name, []byte(tc.text))
		}
		if perr != nil && !strings.Contains(tc.msg, "user name") && !strings.Contains(tc.msg, "members list") {
			t.Errorf("Parse of %q, refused only by Check: %v", tc.text, perr)
		}
	}
}
