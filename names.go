package spindle

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// AllUsers is the reserved name that stands for every user. It may appear in
// Access files (spelled "all"), never in Group files, and can never be
// registered. Upspin spelled it all@upspin.io.
const AllUsers UserName = "all@spindle.dev"

// ReservedUser reports whether u is a name nobody may register: AllUsers,
// and every name in the top-level domain "invalid" (RFC 2606), which
// Spindle uses for readers that are no user, such as a gateway's.
func ReservedUser(u UserName) bool {
	if u == AllUsers {
		return true
	}
	_, domain, ok := strings.Cut(string(u), "@")
	return ok && (domain == "invalid" || strings.HasSuffix(domain, ".invalid"))
}

// MaxUserNameLen bounds the length of a user name in bytes: every user name
// is shorter than this.
const MaxUserNameLen = 254

// userPunct holds the punctuation allowed in the user part of a name, the
// "atext" of RFC 5322 less '/', which would make path names ambiguous.
const userPunct = "!#$%&'*+-=?^_{|}~."

// ParseUser validates a user name and returns its canonical form together
// with its parts. For "ann+camera@Example.com." it returns user
// "ann+camera", suffix "camera" and domain "example.com", and the canonical
// name "ann+camera@example.com".
//
// The rules are Upspin's: exactly one '@'; the user part is made of ASCII
// letters, digits and the characters !#$%&'*+-=?^_{|}~. and is not only
// punctuation, holds at most one '+' (which separates a non-empty suffix from
// a non-empty base); the domain is made of letters, digits, '-' and '.',
// contains a period, has labels of 1 to 63 characters that neither start nor
// end with '-', a last label of at least 2 characters, at most one trailing
// '.' (dropped), and is lower-cased. The whole name is shorter than 254
// bytes. Non-ASCII user names are rejected rather than normalised: Spindle
// has no way to show a reader which of two look-alike names they trust.
//
// The wildcard "*@domain" is not a user name; the access package accepts it
// inside Access and Group files only.
func ParseUser(name UserName) (canon UserName, user, suffix, domain string, err error) {
	const op Op = "spindle.ParseUser"
	s := string(name)
	if s == "" {
		return "", "", "", "", E(op, Invalid, "empty user name")
	}
	at := strings.IndexByte(s, '@')
	if at < 0 {
		return "", "", "", "", E(op, Invalid, name, "user name has no @")
	}
	if strings.IndexByte(s[at+1:], '@') >= 0 {
		return "", "", "", "", E(op, Invalid, name, "user name has more than one @")
	}
	user, domain = s[:at], s[at+1:]
	if err := checkUserPart(user); err != nil {
		return "", "", "", "", E(op, Invalid, name, err)
	}
	domain, err = cleanDomain(domain)
	if err != nil {
		return "", "", "", "", E(op, Invalid, name, err)
	}
	if p := strings.IndexByte(user, '+'); p >= 0 {
		suffix = user[p+1:]
	}
	canon = UserName(user + "@" + domain)
	if len(canon) >= MaxUserNameLen {
		return "", "", "", "", E(op, Invalid, name, fmt.Sprintf("user name is %d bytes long, limit is %d", len(canon), MaxUserNameLen-1))
	}
	return canon, user, suffix, domain, nil
}

// CleanUser returns the canonical form of a valid user name.
func CleanUser(name UserName) (UserName, error) {
	canon, _, _, _, err := ParseUser(name)
	return canon, err
}

// BaseUser returns the user that owns name: for ann+camera@example.com it is
// ann@example.com; for a name without a suffix it is the name itself. The
// name must be valid.
func BaseUser(name UserName) UserName {
	s := string(name)
	at := strings.LastIndexByte(s, '@')
	plus := strings.IndexByte(s, '+')
	if at < 0 || plus < 0 || plus > at {
		return name
	}
	return UserName(s[:plus] + s[at:])
}

func checkUserPart(user string) error {
	if user == "" {
		return fmt.Errorf("empty user part")
	}
	letters := 0
	for i := 0; i < len(user); i++ {
		c := user[i]
		switch {
		case c >= 0x80:
			return fmt.Errorf("non-ASCII character in user part %q", user)
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			letters++
		case c == '/':
			return fmt.Errorf("user part %q contains '/'", user)
		case strings.IndexByte(userPunct, c) >= 0:
		default:
			return fmt.Errorf("bad character %q in user part %q", c, user)
		}
	}
	if letters == 0 {
		return fmt.Errorf("user part %q is only punctuation", user)
	}
	switch n := strings.Count(user, "+"); {
	case n > 1:
		return fmt.Errorf("user part %q has more than one +", user)
	case n == 1 && (user[0] == '+' || user[len(user)-1] == '+'):
		return fmt.Errorf("user part %q has an empty base or suffix around +", user)
	}
	return nil
}

// cleanDomain validates a domain and returns it lower-cased without a
// trailing period.
func cleanDomain(domain string) (string, error) {
	domain = strings.TrimSuffix(domain, ".")
	if domain == "" {
		return "", fmt.Errorf("empty domain")
	}
	if !strings.Contains(domain, ".") {
		return "", fmt.Errorf("domain %q has no period", domain)
	}
	for i := 0; i < len(domain); i++ {
		c := domain[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.':
		case 'A' <= c && c <= 'Z':
		case c >= 0x80:
			return "", fmt.Errorf("non-ASCII character in domain %q", domain)
		default:
			return "", fmt.Errorf("bad character %q in domain %q", c, domain)
		}
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		switch {
		case l == "":
			return "", fmt.Errorf("empty label in domain %q", domain)
		case len(l) > 63:
			return "", fmt.Errorf("label longer than 63 characters in domain %q", domain)
		case l[0] == '-' || l[len(l)-1] == '-':
			return "", fmt.Errorf("label %q in domain %q starts or ends with '-'", l, domain)
		}
	}
	if len(labels[len(labels)-1]) < 2 {
		return "", fmt.Errorf("last label of domain %q is shorter than 2 characters", domain)
	}
	return strings.ToLower(domain), nil
}

// Parsed is a parsed, cleaned path name. Its zero value is not valid; make
// one with [Parse]. Parsed values are immutable and cheap to copy.
type Parsed struct {
	path  PathName // Clean form, root is "user@domain/".
	user  UserName
	elems []string
}

// Parse validates and cleans a path name. The first element is a user name
// (validated and canonicalised as by [ParseUser]); "ann@example.com" alone
// names the root "ann@example.com/". Repeated slashes and "." elements are
// removed and ".." removes the element before it but never climbs above the
// root, so "me@here.com/../../etc" is "me@here.com/etc".
func Parse(name PathName) (Parsed, error) {
	const op Op = "spindle.Parse"
	s := string(name)
	slash := strings.IndexByte(s, '/')
	userPart := s
	rest := ""
	if slash >= 0 {
		userPart, rest = s[:slash], s[slash+1:]
	}
	user, err := CleanUser(UserName(userPart))
	if err != nil {
		return Parsed{}, E(op, Invalid, name, err)
	}
	var elems []string
	for len(rest) > 0 {
		var e string
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			e, rest = rest[:i], rest[i+1:]
		} else {
			e, rest = rest, ""
		}
		switch e {
		case "", ".":
		case "..":
			if len(elems) > 0 {
				elems = elems[:len(elems)-1]
			}
		default:
			elems = append(elems, e)
		}
	}
	p := Parsed{user: user, elems: elems}
	p.path = p.build(len(elems))
	return p, nil
}

// Clean returns the cleaned form of a path name, or an error if it is not
// valid. See [Parse].
func Clean(name PathName) (PathName, error) {
	p, err := Parse(name)
	if err != nil {
		return "", err
	}
	return p.path, nil
}

func (p Parsed) build(n int) PathName {
	var b strings.Builder
	b.WriteString(string(p.user))
	b.WriteByte('/')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte('/')
		}
		b.WriteString(p.elems[i])
	}
	return PathName(b.String())
}

// Path returns the clean path name.
func (p Parsed) Path() PathName { return p.path }

// String returns the clean path name.
func (p Parsed) String() string { return string(p.path) }

// User returns the user that owns the tree, in canonical form.
func (p Parsed) User() UserName { return p.user }

// IsRoot reports whether p names a user's root.
func (p Parsed) IsRoot() bool { return len(p.elems) == 0 }

// NElem returns the number of elements after the user name.
func (p Parsed) NElem() int { return len(p.elems) }

// Elem returns element i, counting from 0 after the user name.
func (p Parsed) Elem(i int) string { return p.elems[i] }

// Elems returns a copy of the elements after the user name.
func (p Parsed) Elems() []string { return append([]string(nil), p.elems...) }

// Last returns the last element, or "" for the root.
func (p Parsed) Last() string {
	if len(p.elems) == 0 {
		return ""
	}
	return p.elems[len(p.elems)-1]
}

// First returns the path made of the user and the first n elements.
func (p Parsed) First(n int) Parsed {
	if n >= len(p.elems) {
		return p
	}
	if n < 0 {
		n = 0
	}
	q := Parsed{user: p.user, elems: p.elems[:n:n]}
	q.path = q.build(n)
	return q
}

// Drop returns the path with its last n elements removed; the root stays the root.
func (p Parsed) Drop(n int) Parsed { return p.First(len(p.elems) - n) }

// Dir returns the parent directory; the parent of the root is the root.
func (p Parsed) Dir() Parsed { return p.Drop(1) }

// Join returns the path with element elem appended, cleaned.
func (p Parsed) Join(elem string) (Parsed, error) {
	return Parse(PathName(string(p.path) + "/" + elem))
}

// FilePath returns the elements joined by slashes, without the user name and
// without a leading slash: "dir/file", or "" for the root.
func (p Parsed) FilePath() string { return strings.Join(p.elems, "/") }

// HasPrefix reports whether q is p or an ancestor of p, comparing whole
// elements: a/b is a prefix of a/b/c but not of a/bc.
func (p Parsed) HasPrefix(q Parsed) bool {
	if p.user != q.user || len(q.elems) > len(p.elems) {
		return false
	}
	for i, e := range q.elems {
		if p.elems[i] != e {
			return false
		}
	}
	return true
}

// Equal reports whether p and q name the same path.
func (p Parsed) Equal(q Parsed) bool { return p.path == q.path }

// CheckElem reports whether elem may be an element of a name that a new
// file, directory or link takes (see [CheckName]). It returns an Invalid
// error naming the problem if elem is not valid UTF-8 or holds a control
// character: C0 (U+0000 to U+001F), DEL (U+007F), C1 (U+0080 to U+009F),
// or the line and paragraph separators U+2028 and U+2029. Such names
// could move a terminal's cursor, clear it, or pass for two lines in a
// listing. '/' cannot occur in an element, and "." and ".." never reach one
// ([Parse] removes them).
//
// CheckElem does not check that elem is in Unicode normalization form C,
// which the Spindle network also requires of new names: the standard
// library has no normalization tables, and this package uses only the
// standard library. Clients convert names to NFC before they send them;
// dir hosts refuse elements that are not in NFC.
func CheckElem(elem string) error {
	const op Op = "spindle.CheckElem"
	for i := 0; i < len(elem); {
		r, size := utf8.DecodeRuneInString(elem[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return E(op, Invalid, fmt.Sprintf("element %q is not valid UTF-8 (byte %d)", elem, i))
		case isControl(r):
			return E(op, Invalid, fmt.Sprintf("element %q holds control character %U", elem, r))
		}
		i += size
	}
	return nil
}

// isControl reports whether r is a character no name may hold.
func isControl(r rune) bool {
	return r < 0x20 || (0x7f <= r && r <= 0x9f) || r == 0x2028 || r == 0x2029
}

// CheckName reports whether name may name a new file, directory or link:
// it must be a valid path name (see [Parse]) and each of its elements must
// pass [CheckElem].
// Names already stored before these rules may break them and stay readable
// and deletable; only names being created are checked.
func CheckName(name PathName) error {
	const op Op = "spindle.CheckName"
	p, err := Parse(name)
	if err != nil {
		return E(op, err)
	}
	for _, e := range p.elems {
		if err := CheckElem(e); err != nil {
			return E(op, name, err)
		}
	}
	return nil
}

// GlobEscape returns s with the characters that Glob patterns give a
// meaning (* ? [ ] and \) escaped, so that a pattern built with it
// matches s itself.
func GlobEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
