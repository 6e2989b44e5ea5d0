package spindle_test

import (
	"errors"
	gopath "path"
	"slices"
	"strings"
	"testing"

	"spindle.dev"
)

func TestParseUser(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	long := func(n int) string { // A valid name of exactly n bytes.
		domain := "example.com"
		return strings.Repeat("u", n-1-len(domain)) + "@" + domain
	}
	tests := []struct {
		name                           spindle.UserName
		canon                          spindle.UserName
		user, suffix, domain, errMatch string // errMatch: substring of the error, or "" for success.
	}{
		{"ann@example.com", "ann@example.com", "ann", "", "example.com", ""},
		{"ann+camera@Example.com.", "ann+camera@example.com", "ann+camera", "camera", "example.com", ""},
		{"Ann@EXAMPLE.COM", "Ann@example.com", "Ann", "", "example.com", ""},
		{"1@x.io", "1@x.io", "1", "", "x.io", ""},
		{"a.b-c_d!#$%&'*=?^{|}~@x.io", "a.b-c_d!#$%&'*=?^{|}~@x.io", "a.b-c_d!#$%&'*=?^{|}~", "", "x.io", ""},
		{"ann@a-b.c-d.com", "ann@a-b.c-d.com", "ann", "", "a-b.c-d.com", ""},
		{"ann@192.168.0.10", "ann@192.168.0.10", "ann", "", "192.168.0.10", ""},
		{spindle.UserName("ann@" + label63 + ".com"), spindle.UserName("ann@" + label63 + ".com"), "ann", "", label63 + ".com", ""},
		{spindle.UserName(long(253)), spindle.UserName(long(253)), strings.Repeat("u", 253-12), "", "example.com", ""},
		{"x+y@a.bc", "x+y@a.bc", "x+y", "y", "a.bc", ""},

		{"", "", "", "", "", "empty user name"},
		{"ann", "", "", "", "", "no @"},
		{"all", "", "", "", "", "no @"},
		{"ann@x@example.com", "", "", "", "", "more than one @"},
		{"@example.com", "", "", "", "", "empty user part"},
		{"ann@", "", "", "", "", "empty domain"},
		{"ann@.", "", "", "", "", "empty domain"},
		{"ann@com", "", "", "", "", "has no period"},
		{"ann@example.c", "", "", "", "", "shorter than 2"},
		{"ann@-ex.com", "", "", "", "", "starts or ends with '-'"},
		{"ann@ex-.com", "", "", "", "", "starts or ends with '-'"},
		{"ann@ex..com", "", "", "", "", "empty label"},
		{"ann@.example.com", "", "", "", "", "empty label"},
		{"ann@example.com..", "", "", "", "", "empty label"},
		{"ann@exa_mple.com", "", "", "", "", "bad character"},
		{"ann@exämple.com", "", "", "", "", "non-ASCII"},
		{"änn@example.com", "", "", "", "", "non-ASCII"},
		{"a/b@example.com", "", "", "", "", "contains '/'"},
		{"a b@example.com", "", "", "", "", "bad character"},
		{"a,b@example.com", "", "", "", "", "bad character"},
		{"...@example.com", "", "", "", "", "only punctuation"},
		{"*@example.com", "", "", "", "", "only punctuation"},
		{"a+b+c@example.com", "", "", "", "", "more than one +"},
		{"+a@example.com", "", "", "", "", "empty base or suffix"},
		{"a+@example.com", "", "", "", "", "empty base or suffix"},
		{spindle.UserName("ann@" + label63 + "a.com"), "", "", "", "", "longer than 63"},
		{spindle.UserName(long(254)), "", "", "", "", "254 bytes long"},
	}
	for _, tc := range tests {
		canon, user, suffix, domain, err := spindle.ParseUser(tc.name)
		if tc.errMatch != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errMatch) || !errors.Is(err, spindle.Invalid) {
				t.Errorf("ParseUser(%q): error %v, want Invalid error containing %q", tc.name, err, tc.errMatch)
			}
			if canon != "" {
				t.Errorf("ParseUser(%q) returned %q with an error", tc.name, canon)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseUser(%q): %v", tc.name, err)
			continue
		}
		if canon != tc.canon || user != tc.user || suffix != tc.suffix || domain != tc.domain {
			t.Errorf("ParseUser(%q) = %q, %q, %q, %q; want %q, %q, %q, %q",
				tc.name, canon, user, suffix, domain, tc.canon, tc.user, tc.suffix, tc.domain)
		}
		if c, err := spindle.CleanUser(tc.name); c != tc.canon || err != nil {
			t.Errorf("CleanUser(%q) = %q, %v", tc.name, c, err)
		}
		if c, err := spindle.CleanUser(canon); c != canon || err != nil {
			t.Errorf("CleanUser is not idempotent on %q: %q, %v", canon, c, err)
		}
	}
}

func TestParseUserErrorFields(t *testing.T) {
	_, _, _, _, err := spindle.ParseUser("ann@com")
	want := spindle.E(spindle.Op("spindle.ParseUser"), spindle.Invalid, spindle.UserName("ann@com"), `domain "com" has no period`)
	if !spindle.Match(want, err) {
		t.Errorf("got %v, want %v", err, want)
	}
}

func TestBaseUser(t *testing.T) {
	tests := []struct{ in, want spindle.UserName }{
		{"ann+camera@example.com", "ann@example.com"},
		{"ann@example.com", "ann@example.com"},
		{"a.b+c.d@x.io", "a.b@x.io"},
	}
	for _, tc := range tests {
		if got := spindle.BaseUser(tc.in); got != tc.want {
			t.Errorf("BaseUser(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in, want spindle.PathName
		elems    []string // nil for the root
	}{
		{"ann@example.com", "ann@example.com/", nil},
		{"ann@example.com/", "ann@example.com/", nil},
		{"ann@example.com//", "ann@example.com/", nil},
		{"ann@example.com/.", "ann@example.com/", nil},
		{"ann@example.com/..", "ann@example.com/", nil},
		{"ann@Example.COM./a", "ann@example.com/a", []string{"a"}},
		{"ann@example.com/a/", "ann@example.com/a", []string{"a"}},
		{"ann@example.com/a//b/./c/", "ann@example.com/a/b/c", []string{"a", "b", "c"}},
		{"me@here.com/../../etc", "me@here.com/etc", []string{"etc"}},
		{"ann@example.com/a/b/../../..", "ann@example.com/", nil},
		{"ann@example.com/a/../b/./../c", "ann@example.com/c", []string{"c"}},
		{"ann@example.com/.../..a/a../.b", "ann@example.com/.../..a/a../.b", []string{"...", "..a", "a..", ".b"}},
		{"ann+camera@example.com/Access", "ann+camera@example.com/Access", []string{"Access"}},
		{"ann@example.com/a b/ü/x@y.com", "ann@example.com/a b/ü/x@y.com", []string{"a b", "ü", "x@y.com"}},
	}
	for _, tc := range tests {
		p, err := spindle.Parse(tc.in)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.in, err)
			continue
		}
		if p.Path() != tc.want || p.String() != string(tc.want) {
			t.Errorf("Parse(%q) = %q, want %q", tc.in, p.Path(), tc.want)
		}
		if !slices.Equal(p.Elems(), tc.elems) || p.NElem() != len(tc.elems) || p.IsRoot() != (tc.elems == nil) {
			t.Errorf("Parse(%q): elems %q (%d, root %v), want %q", tc.in, p.Elems(), p.NElem(), p.IsRoot(), tc.elems)
		}
		if c, err := spindle.Clean(tc.in); c != tc.want || err != nil {
			t.Errorf("Clean(%q) = %q, %v", tc.in, c, err)
		}
		if c, err := spindle.Clean(tc.want); c != tc.want || err != nil {
			t.Errorf("Clean is not idempotent on %q: %q, %v", tc.want, c, err)
		}
	}
	for _, bad := range []spindle.PathName{"", "/", "/ann@example.com/x", "ann/x", "ann@example/x", "*@example.com/x", "ann@@example.com/", "ann@exämple.com/x"} {
		_, err := spindle.Parse(bad)
		if !spindle.Match(spindle.E(spindle.Op("spindle.Parse"), spindle.Invalid), err) {
			t.Errorf("Parse(%q): %v, want Invalid error from spindle.Parse", bad, err)
		}
		if c, err := spindle.Clean(bad); c != "" || err == nil {
			t.Errorf("Clean(%q) = %q, %v", bad, c, err)
		}
	}
}

func mustParse(t *testing.T, name spindle.PathName) spindle.Parsed {
	t.Helper()
	p, err := spindle.Parse(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParsedMethods(t *testing.T) {
	p := mustParse(t, "Ann@Example.com/a/b/c.txt")
	if p.User() != "Ann@example.com" {
		t.Errorf("User = %s", p.User())
	}
	if p.Last() != "c.txt" || p.Elem(0) != "a" || p.Elem(2) != "c.txt" {
		t.Errorf("Last %q Elem(0) %q Elem(2) %q", p.Last(), p.Elem(0), p.Elem(2))
	}
	if p.FilePath() != "a/b/c.txt" {
		t.Errorf("FilePath = %q", p.FilePath())
	}
	steps := []struct {
		got  spindle.Parsed
		want spindle.PathName
	}{
		{p.First(0), "Ann@example.com/"},
		{p.First(1), "Ann@example.com/a"},
		{p.First(3), "Ann@example.com/a/b/c.txt"},
		{p.First(9), "Ann@example.com/a/b/c.txt"},
		{p.First(-1), "Ann@example.com/"},
		{p.Drop(1), "Ann@example.com/a/b"},
		{p.Drop(3), "Ann@example.com/"},
		{p.Drop(5), "Ann@example.com/"},
		{p.Dir(), "Ann@example.com/a/b"},
		{p.Dir().Dir().Dir().Dir(), "Ann@example.com/"},
	}
	for i, s := range steps {
		if s.got.Path() != s.want {
			t.Errorf("step %d: %q, want %q", i, s.got.Path(), s.want)
		}
		if again := mustParse(t, s.got.Path()); !again.Equal(s.got) || again.NElem() != s.got.NElem() {
			t.Errorf("step %d: %q does not re-parse to itself", i, s.got.Path())
		}
	}
	root := mustParse(t, "Ann@example.com")
	if root.Last() != "" || root.FilePath() != "" {
		t.Errorf("root Last %q FilePath %q", root.Last(), root.FilePath())
	}
	joins := []struct {
		elem string
		want spindle.PathName
	}{
		{"d", "Ann@example.com/a/b/c.txt/d"},
		{"d/e", "Ann@example.com/a/b/c.txt/d/e"},
		{"..", "Ann@example.com/a/b"},
		{"", "Ann@example.com/a/b/c.txt"},
		{"../../../../..", "Ann@example.com/"},
	}
	for _, j := range joins {
		q, err := p.Join(j.elem)
		if err != nil || q.Path() != j.want {
			t.Errorf("Join(%q) = %q, %v; want %q", j.elem, q.Path(), err, j.want)
		}
	}
	// Elems returns a copy.
	e := p.Elems()
	e[0] = "changed"
	if p.Elem(0) != "a" {
		t.Error("Elems shares its slice with the Parsed")
	}
	// Sub-paths share no state that changes the original.
	d := p.First(1)
	if _, err := d.Join("x"); err != nil || p.Path() != "Ann@example.com/a/b/c.txt" || p.Elem(1) != "b" {
		t.Errorf("Join on First changed the original: %q", p.Path())
	}
}

func TestHasPrefix(t *testing.T) {
	tests := []struct {
		p, q spindle.PathName
		want bool
	}{
		{"a@b.co/x/y", "a@b.co/x", true},
		{"a@b.co/x/y", "a@b.co/x/y", true},
		{"a@b.co/x/y", "a@b.co/", true},
		{"a@b.co/", "a@b.co/", true},
		{"a@b.co/a/bc", "a@b.co/a/b", false},
		{"a@b.co/ab", "a@b.co/a", false},
		{"a@b.co/x", "a@b.co/x/y", false},
		{"a@b.co/x", "c@b.co/", false},
		{"a+z@b.co/x", "a@b.co/", false},
	}
	for _, tc := range tests {
		if got := mustParse(t, tc.p).HasPrefix(mustParse(t, tc.q)); got != tc.want {
			t.Errorf("%s.HasPrefix(%s) = %v, want %v", tc.p, tc.q, got, tc.want)
		}
	}
}

// FuzzParse checks the cleaning of path names: it never panics, a clean
// name re-parses to itself (cleaning is idempotent), the root and only the
// root ends in a slash, and no element is empty, "." or "..".
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"ann@example.com", "ann@example.com/", "me@here.com/../../etc", "ann@Example.COM./a//b/./c/",
		"ann+camera@example.com/x/..", "a@b.co/.../..a", "", "/", "ann@example.com/\x00/\xff", "*@x.com/y",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := spindle.Parse(spindle.PathName(s))
		if err != nil {
			if !errors.Is(err, spindle.Invalid) {
				t.Fatalf("Parse(%q): error %v is not Invalid", s, err)
			}
			return
		}
		clean := p.Path()
		q, err := spindle.Parse(clean)
		if err != nil {
			t.Fatalf("Parse(%q) = %q, which does not parse: %v", s, clean, err)
		}
		if q.Path() != clean || !q.Equal(p) || q.NElem() != p.NElem() || q.User() != p.User() {
			t.Fatalf("Parse(%q) = %q, which re-parses to %q", s, clean, q.Path())
		}
		if c, err := spindle.Clean(spindle.PathName(s)); c != clean || err != nil {
			t.Fatalf("Clean(%q) = %q, %v; Parse gave %q", s, c, err, clean)
		}
		user := string(p.User())
		if canon, err := spindle.CleanUser(p.User()); err != nil || canon != p.User() {
			t.Fatalf("user %q of %q is not canonical", user, clean)
		}
		if p.IsRoot() {
			if string(clean) != user+"/" {
				t.Fatalf("root of %q is %q", s, clean)
			}
			return
		}
		if strings.HasSuffix(string(clean), "/") {
			t.Fatalf("non-root %q has a trailing slash", clean)
		}
		if got := user + "/" + p.FilePath(); got != string(clean) {
			t.Fatalf("user + FilePath = %q, path %q", got, clean)
		}
		for i := range p.NElem() {
			switch e := p.Elem(i); e {
			case "", ".", "..":
				t.Fatalf("%q has element %q", clean, e)
			}
		}
		if !p.HasPrefix(p.Dir()) || p.Dir().HasPrefix(p) {
			t.Fatalf("%q and its parent %q", clean, p.Dir().Path())
		}
	})
}

func TestCheckElem(t *testing.T) {
	for _, tc := range []struct {
		elem string
		bad  string // Substring of the error, or "" if elem is fine.
	}{
		{"file.txt", ""},
		{"a b", ""},
		{"café", ""},
		{"cafe\u0301", ""}, // NFD is left to the network's NFC rule.
		{"日本語", ""},
		{"x😀y", ""},
		{`"quoted"`, ""},
		{"\u00a0nbsp", ""},
		{"", ""},
		{"a\x00", "control character U+0000"},
		{"\x1b[2J", "control character U+001B"},
		{"two\nlines", "control character U+000A"},
		{"cr\r", "control character U+000D"},
		{"tab\t", "control character U+0009"},
		{"\x1f", "control character U+001F"},
		{"del\x7f", "control character U+007F"},
		{"c1\u0080", "control character U+0080"},
		{"csi\u009b", "control character U+009B"},
		{"ls\u2028", "control character U+2028"},
		{"ps\u2029", "control character U+2029"},
		{"bad\xff", "not valid UTF-8 (byte 3)"},
		{"caf\xc3", "not valid UTF-8"},
		{"\xed\xa0\x80", "not valid UTF-8"}, // A surrogate.
		{"\xc0\xaf", "not valid UTF-8"},     // An overlong '/'.
	} {
		err := spindle.CheckElem(tc.elem)
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("CheckElem(%q) = %v, want nil", tc.elem, err)
		case tc.bad != "" && !errors.Is(err, spindle.Invalid):
			t.Errorf("CheckElem(%q) = %v, want Invalid", tc.elem, err)
		case tc.bad != "" && !strings.Contains(err.Error(), tc.bad):
			t.Errorf("CheckElem(%q) = %q, want it to say %q", tc.elem, err, tc.bad)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, tc := range []struct {
		name spindle.PathName
		ok   bool
	}{
		{"ann@example.com/", true},
		{"ann@example.com/dir/file", true},
		{"ann@example.com/dir/café", true},
		{"ann@example.com/\x1b[2J/file", false},
		{"ann@example.com/dir/a\nb", false},
		{"ann@example.com/dir/\xff", false},
		{"not a user/dir", false},
	} {
		err := spindle.CheckName(tc.name)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, spindle.Invalid) {
			t.Errorf("CheckName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
	// Parse stays lenient, so that names stored before the rules can be
	// read, renamed and deleted.
	if _, err := spindle.Parse("ann@example.com/dir/a\nb"); err != nil {
		t.Errorf("Parse refuses an old name: %v", err)
	}
}

func TestGlobEscape(t *testing.T) {
	for _, name := range []string{"plain", "a*b", "q?", "[x]", `back\slash`, "close]only", ""} {
		esc := spindle.GlobEscape(name)
		if ok, err := gopath.Match(esc, name); err != nil || !ok {
			t.Errorf("GlobEscape(%q) = %q does not match it: %v", name, esc, err)
		}
		if name != "" {
			if ok, _ := gopath.Match(esc, name+"x"); ok {
				t.Errorf("GlobEscape(%q) = %q matches more", name, esc)
			}
		}
	}
}

// Nobody may register "all", nor any name in the domain invalid, which
// stands for readers that are no user (the gateway's).
func TestReservedUser(t *testing.T) {
	for u, want := range map[spindle.UserName]bool{
		spindle.AllUsers:          true,
		"gateway@gateway.invalid": true,
		"x@invalid":               true,
		"ann@example.com":         false,
		"ann@invalid.example.com": false,
		"ann@notinvalid":          false,
	} {
		if got := spindle.ReservedUser(u); got != want {
			t.Errorf("ReservedUser(%s) = %v, want %v", u, got, want)
		}
	}
}
