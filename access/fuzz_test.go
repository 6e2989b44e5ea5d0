package access

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"spindle.dev"
)

// format writes a parsed set of grants back as the text of an Access file
// (rights non-nil) or a Group file.
func formatGrants(b *strings.Builder, prefix string, g *grants) {
	var toks []string
	for _, u := range g.users {
		toks = append(toks, string(u))
	}
	for _, d := range g.domains {
		toks = append(toks, "*@"+d)
	}
	for _, p := range g.groups {
		toks = append(toks, string(p))
	}
	if g.all {
		b.WriteString(prefix + "all\n")
	}
	if len(toks) > 0 {
		b.WriteString(prefix + strings.Join(toks, ", ") + "\n")
	}
}

func formatAccess(a *Access) string {
	var b strings.Builder
	for r := range numRights {
		formatGrants(&b, Right(r).String()+": ", &a.rights[r])
	}
	return b.String()
}

func checkGrants(t *testing.T, g *grants) {
	t.Helper()
	for _, u := range g.users {
		if c, err := spindle.CleanUser(u); err != nil || c != u {
			t.Fatalf("user %q is not canonical: %q, %v", u, c, err)
		}
		if u == spindle.AllUsers {
			t.Fatalf("all parsed as a user")
		}
	}
	for _, d := range g.domains {
		if _, err := spindle.CleanUser(spindle.UserName("x@" + d)); err != nil {
			t.Fatalf("wildcard domain %q is invalid: %v", d, err)
		}
	}
	for _, p := range g.groups {
		if c, err := spindle.Clean(p); err != nil || c != p || !IsGroupFile(p) {
			t.Fatalf("group %q is not a clean group path: %q, %v", p, c, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("r: bob@example.com"))
	f.Add([]byte("# Ann's photos\r\nRead, LIST: family, *@Example.com\nw : ann+camera@example.com # cam\n*: bob@example.com/Group/editors\n"))
	f.Add([]byte("r: all\nw: all, work/friends\n"))
	f.Add([]byte("rea: bob@abc.com"))
	f.Add([]byte("bob@abc.com"))
	f.Add([]byte("r,,w: ,bob@x.com,,"))
	f.Add([]byte("c d l: ../x, *@com, bob@/Group/x, *@a.com/Group/x"))
	f.Add([]byte("*: all@spindle.dev ALL"))
	f.Add([]byte("r: bob@example.com # \x1b[2J\xff\nw: work//friends/\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := Parse(access, data)
		checkStricter(t, access, data, err)
		if err != nil {
			if a != nil || !errors.Is(err, spindle.Invalid) {
				t.Fatalf("Parse = %v, %v; want nil and an Invalid error", a, err)
			}
			if !strings.Contains(err.Error(), "on ") || !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		for r := range a.rights {
			checkGrants(t, &a.rights[r])
		}
		text := formatAccess(a)
		b, err := Parse(access, []byte(text))
		if err != nil {
			t.Fatalf("reparse of %q: %v", text, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("reparse of %q differs:\n%+v\n%+v", text, a, b)
		}
		// Evaluation never panics and never fails without groups to load.
		none := func(name spindle.PathName) (*Group, error) { return nil, spindle.E(spindle.NotExist, name) }
		for _, u := range []spindle.UserName{"bob@example.com", "ann+camera@example.com"} {
			for r := Read; r <= AnyRight; r++ {
				ok, err := a.Can(u, r, file, none)
				if err != nil && (ok || len(a.rights[r].groups) == 0) {
					t.Fatalf("Can(%s, %s) = %v, %v", u, r, ok, err)
				}
			}
		}
	})
}

func FuzzParseGroup(f *testing.F) {
	f.Add([]byte("bob@example.com\ncarl@other.org"))
	f.Add([]byte("# friends\r\nbob@example.com, Carl@Other.ORG\r\n  *@abc.com work/friends,\tbob@example.com/Group/x\n"))
	f.Add([]byte("all"))
	f.Add([]byte("r: bob@abc.com"))
	f.Add([]byte(",bob@abc.com,,x"))
	f.Add([]byte("../../x ./y Access Group/Access"))
	f.Add([]byte("bob@example.com\rcarl@other.org\n\xc3 ./friends/\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := ParseGroup(grpFile, data)
		checkStricter(t, grpFile, data, err)
		if err != nil {
			if g != nil || !errors.Is(err, spindle.Invalid) {
				t.Fatalf("ParseGroup = %v, %v; want nil and an Invalid error", g, err)
			}
			if !strings.Contains(err.Error(), "line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		if g.members.all {
			t.Fatal("group has all")
		}
		checkGrants(t, &g.members)
		var b strings.Builder
		formatGrants(&b, "", &g.members)
		h, err := ParseGroup(grpFile, []byte(b.String()))
		if err != nil {
			t.Fatalf("reparse of %q: %v", b.String(), err)
		}
		if !reflect.DeepEqual(g, h) {
			t.Fatalf("reparse of %q differs:\n%+v\n%+v", b.String(), g, h)
		}
	})
}

// checkStricter checks that Check refuses whatever parsing refused
// (parseErr), names the line when it refuses, and accepts only valid UTF-8.
func checkStricter(t *testing.T, name spindle.PathName, data []byte, parseErr error) {
	err := Check(name, data)
	switch {
	case err == nil && parseErr != nil:
		t.Fatalf("Check accepts what parsing refuses: %v", parseErr)
	case err == nil && !utf8.Valid(data):
		t.Fatalf("Check accepts invalid UTF-8 %q", data)
	case err != nil && (!errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "line ")):
		t.Fatalf("Check error %q is not Invalid or does not name the line", err)
	}
}
