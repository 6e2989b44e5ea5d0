// Package access parses Spindle's Access and Group files and decides, from
// them, who may do what with a file. It is pure: it reads nothing itself, and
// the caller supplies the files through loader functions.
//
// # Access files
//
// Any file whose last element is Access is an Access file. It holds lines
//
//	rights: users
//
// where rights is a list of read, write, list, create and delete (in any
// case, or just their first letters), or * for all five; users is a list of
// user names (ann@example.com), wildcards naming everyone in a domain
// (*@example.com, which also matches suffixed users such as
// ann+camera@example.com), the word all (anyone at all; on a line that grants
// read it must be the only user), or groups. A group is named by its full
// path, bob@example.com/Group/friends, or, for the owner's own groups,
// relative to the owner's Group directory: family is
// ann@example.com/Group/family and work/friends is
// ann@example.com/Group/work/friends. Lists are separated by commas or
// spaces; # starts a comment that runs to the end of the line, and blank
// lines are ignored. For example:
//
//	# Ann's photos
//	read, list: family, *@example.com
//	w: ann+camera@example.com
//	*: bob@example.com/Group/editors
//
// Malformed files are rejected with an error of kind Invalid that names the
// line and the offending text, such as
//
//	no colon on line 1: "bob@abc.com"
//	invalid access rights on line 1: "rea"
//
// # Group files
//
// Any file under the owner's Group directory (ann@example.com/Group/...) that
// is not an Access file is a Group file. It lists members, one a line or
// separated by commas or spaces, with the same syntax as the users of an
// Access file, except that all is not allowed. Groups may contain groups,
// including other users' groups, and cycles are harmless. The owner of a
// group is always one of its members.
//
// # Evaluation
//
// The Access file that governs a path is the nearest one found by starting at
// the path itself and walking up to the root ([WhichAccess]); it governs
// completely, with no merging of ancestors. When there is none, the owner of
// the tree, and only the owner, has every right ([New]). The owner of a tree
// may always read and list anything in it, but may write, create or delete
// ordinary files only where the governing Access file grants it. Access and
// Group files may be written, created or deleted by their owner only, whatever
// the Access file says (even "*: all").
//
// A user with a +suffix (ann+camera@example.com) is a user of its own: it is
// granted only what names it, a wildcard for its domain, or all; it has no
// owner rights in its base user's tree, nor the base user in its tree.
//
// A group file that cannot be loaded is never taken as empty: [Access.Can]
// and [Access.Users] report the loader's error unless the answer is already
// known to be yes without that group (groups can only grant rights, never
// take them away). Upspin silently ignored such groups.
package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"spindle.dev"
)

// A Right is one of the rights an Access file grants.
type Right int

// The rights. AnyRight is not a right of its own: asking for it asks whether
// the user has at least one of the others.
const (
	Read Right = iota
	Write
	List
	Create
	Delete
	AnyRight
)

// numRights is the number of real rights, Read to Delete.
const numRights = int(AnyRight)

var rightNames = [...]string{
	Read:     "read",
	Write:    "write",
	List:     "list",
	Create:   "create",
	Delete:   "delete",
	AnyRight: "any",
}

// String returns the right's name in lower case, as in Access files: "read",
// "write", "list", "create", "delete", or "any" for AnyRight.
func (r Right) String() string {
	if 0 <= r && int(r) < len(rightNames) {
		return rightNames[r]
	}
	return fmt.Sprintf("Right(%d)", int(r))
}

const (
	accessName = "Access"
	groupDir   = "Group"
)

// IsAccessFile reports whether name, which must be clean, names an Access
// file: its last element is Access.
func IsAccessFile(name spindle.PathName) bool {
	return strings.HasSuffix(string(name), "/"+accessName)
}

// IsGroupFile reports whether name, which must be clean, names a Group file:
// a file under the owner's Group directory that is not an Access file.
func IsGroupFile(name spindle.PathName) bool {
	s := string(name)
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		return false
	}
	rest := s[slash+1:]
	return len(rest) > len(groupDir)+1 && strings.HasPrefix(rest, groupDir+"/") && !IsAccessFile(name)
}

// grants is the set of principals named for one right, or the members of a
// group. It is built at parse time and never changed afterwards.
type grants struct {
	all     bool               // Everyone.
	users   []spindle.UserName // Sorted and unique.
	domains []string           // Domains of *@domain wildcards; sorted and unique.
	groups  []spindle.PathName // Clean group paths; sorted and unique.
}

// has reports whether user, whose domain is domain, is named directly, by a
// wildcard or by all. Groups are not consulted.
func (g *grants) has(user spindle.UserName, domain string) bool {
	if g.all {
		return true
	}
	if _, ok := slices.BinarySearch(g.users, user); ok {
		return true
	}
	_, ok := slices.BinarySearch(g.domains, domain)
	return ok
}

// finish sorts and removes duplicates.
func (g *grants) finish() {
	slices.Sort(g.users)
	g.users = slices.Clip(slices.Compact(g.users))
	slices.Sort(g.domains)
	g.domains = slices.Clip(slices.Compact(g.domains))
	slices.Sort(g.groups)
	g.groups = slices.Clip(slices.Compact(g.groups))
}

// merge adds the principals of h to g; g must be finished again afterwards.
func (g *grants) merge(h *grants) {
	g.all = g.all || h.all
	g.users = append(g.users, h.users...)
	g.domains = append(g.domains, h.domains...)
	g.groups = append(g.groups, h.groups...)
}

// An Access is a parsed Access file. It is immutable and safe for concurrent
// use.
type Access struct {
	path   spindle.PathName // The Access file's clean path.
	dir    spindle.PathName // The directory it governs: path without "/Access", or the root "owner/".
	owner  spindle.UserName // Owner of the tree.
	rights [numRights + 1]grants
}

// Parse parses the contents of the Access file name. The name is cleaned and
// must be that of an Access file. Errors are of kind Invalid; for malformed
// contents the message names the line and the offending text.
func Parse(name spindle.PathName, data []byte) (*Access, error) {
	return parseAccess("access.Parse", name, data, false)
}

// parseAccess is Parse, with the rules of [Check] if strict.
func parseAccess(op spindle.Op, name spindle.PathName, data []byte, strict bool) (*Access, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if p.Last() != accessName {
		return nil, spindle.E(op, spindle.Invalid, p.Path(), "not an Access file")
	}
	a := &Access{path: p.Path(), dir: p.Dir().Path(), owner: p.User()}
	ps := parser{op: op, name: a.path, owner: a.owner, strict: strict}
	err = ps.lines(data, func(line string) error {
		colon := strings.IndexByte(line, ':')
		if colon < 0 {
			return ps.errorf("no colon on line %d: %q", ps.line, line)
		}
		rightsText := trimSpace(line[:colon])
		usersText := trimSpace(line[colon+1:])
		rights, ok := splitList(rightsText)
		if !ok || len(rights) == 0 {
			return ps.errorf("invalid rights list on line %d: %q", ps.line, rightsText)
		}
		var which [numRights]bool
		for _, r := range rights {
			if r == "*" {
				for i := range which {
					which[i] = true
				}
				continue
			}
			right, ok := parseRight(r)
			if !ok {
				return ps.errorf("invalid access rights on line %d: %q", ps.line, r)
			}
			which[right] = true
		}
		users, ok := splitList(usersText)
		if !ok {
			return ps.errorf("invalid users list on line %d: %q", ps.line, usersText)
		}
		if len(users) == 0 {
			return ps.errorf("no users on line %d: %q", ps.line, line)
		}
		var lg grants
		for _, u := range users {
			if err := ps.principal(&lg, u, true); err != nil {
				return err
			}
		}
		if lg.all && which[Read] && len(users) > 1 {
			return ps.errorf("all must be the only user on read line %d: %q", ps.line, usersText)
		}
		for r, ok := range which {
			if ok {
				a.rights[r].merge(&lg)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for r := range numRights {
		a.rights[r].finish()
		a.rights[AnyRight].merge(&a.rights[r])
	}
	a.rights[AnyRight].finish()
	return a, nil
}

// New returns the implicit Access file that applies to a tree with no Access
// file: the owner of name (any path in the tree, typically its root) has
// every right and nobody else has any. Its Path is the Access file at the
// root of the tree. If name is not a valid path the result grants nothing and
// its Can reports an Invalid error.
func New(name spindle.PathName) *Access {
	s := string(name)
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	owner, err := spindle.CleanUser(spindle.UserName(s))
	if err != nil {
		return &Access{}
	}
	a := &Access{
		path:  spindle.PathName(owner) + "/" + accessName,
		dir:   spindle.PathName(owner) + "/",
		owner: owner,
	}
	for r := range a.rights {
		a.rights[r].users = []spindle.UserName{owner}
	}
	return a
}

// Path returns the clean path name of the Access file.
func (a *Access) Path() spindle.PathName { return a.path }

// Owner returns the user who owns the tree the Access file is in.
func (a *Access) Owner() spindle.UserName { return a.owner }

// Groups returns the groups the Access file names directly, for any right,
// sorted. Groups those groups contain are not included.
func (a *Access) Groups() []spindle.PathName {
	return slices.Clone(a.rights[AnyRight].groups)
}

// A GroupLoader returns the parsed Group file at name, a clean full path
// such as bob@example.com/Group/friends. A group that does not exist must be
// reported with an error of kind NotExist. Can and Users return any error
// from the loader (see the package documentation); the loader must return
// either a group whose Path is name or an error.
type GroupLoader func(name spindle.PathName) (*Group, error)

// Can reports whether user has right on the file or directory name, for
// which a is the governing Access file (see [WhichAccess]). The name must be
// clean and inside the directory a governs, and user must be a valid user
// name in canonical form; otherwise Can returns an Invalid error. Can applies
// the owner's rights and the protection of Access and Group files described
// in the package documentation, and loads groups through load only as far as
// it needs to.
//
// If a group cannot be loaded and the user is not granted the right without
// it, Can returns false and the loader's error, whose kind it keeps (NotExist
// for a missing group).
func (a *Access) Can(user spindle.UserName, right Right, name spindle.PathName, load GroupLoader) (bool, error) {
	const op spindle.Op = "access.Can"
	if right < 0 || right > AnyRight {
		return false, spindle.E(op, spindle.Invalid, name, user, fmt.Sprintf("unknown right %d", int(right)))
	}
	domain, ok := requesterDomain(user)
	if !ok {
		return false, spindle.E(op, spindle.Invalid, name, user, "invalid requesting user name")
	}
	if !a.governs(name) {
		if a.owner == "" {
			return false, spindle.E(op, spindle.Invalid, name, user, "Access file made from an invalid path")
		}
		return false, spindle.E(op, spindle.Invalid, name, user, "path is not clean or not governed by "+string(a.path))
	}
	isOwner := user == a.owner
	switch right {
	case Read, List, AnyRight:
		if isOwner {
			return true, nil
		}
	case Write, Create, Delete:
		if IsAccessFile(name) || IsGroupFile(name) {
			return isOwner, nil
		}
	}
	g := &a.rights[right]
	if g.has(user, domain) {
		return true, nil
	}
	if len(g.groups) == 0 {
		return false, nil
	}
	found, err := inGroups(user, domain, g.groups, load)
	if found {
		return true, nil
	}
	if err != nil {
		return false, spindle.E(op, spindle.KindOf(err), name, user, err)
	}
	return false, nil
}

// inGroups reports whether user is a member of any of the groups, searching
// nested groups breadth first. It returns true as soon as membership is
// proven; otherwise it returns the first error met while loading groups.
func inGroups(user spindle.UserName, domain string, groups []spindle.PathName, load GroupLoader) (bool, error) {
	var buf [16]spindle.PathName
	queue := append(buf[:0], groups...)
	var firstErr error
	for i := 0; i < len(queue); i++ {
		name := queue[i]
		g, err := loadGroup(name, load)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if g.owner == user || g.members.has(user, domain) {
			return true, nil
		}
		for _, sub := range g.members.groups {
			if !slices.Contains(queue, sub) {
				queue = append(queue, sub)
			}
		}
	}
	return false, firstErr
}

// loadGroup calls load and checks what it returns.
func loadGroup(name spindle.PathName, load GroupLoader) (*Group, error) {
	if load == nil {
		return nil, fmt.Errorf("group %s: %w", name, spindle.E(spindle.Internal, "no group loader"))
	}
	g, err := load(name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("group %s: %w", name, err)
	case g == nil:
		return nil, fmt.Errorf("group %s: %w", name, spindle.E(spindle.Internal, "group loader returned neither a group nor an error"))
	case g.path != name:
		return nil, fmt.Errorf("group %s: %w", name, spindle.E(spindle.Internal, "group loader returned group "+string(g.path)))
	}
	return g, nil
}

// Names returns, sorted and unique, the users the Access file names
// directly for any right: not the owner, groups, wildcards or all.
func (a *Access) Names() []spindle.UserName {
	var users []spindle.UserName
	for _, g := range a.rights {
		users = append(users, g.users...)
	}
	slices.Sort(users)
	return slices.Compact(users)
}

// Users returns, sorted, every user granted right by the Access file, with
// groups expanded recursively (each group's owner included). The owner of
// the tree is included for Read, List and AnyRight, which the owner always
// has. If all is granted the result contains [spindle.AllUsers]; wildcards
// appear as "*@domain". If a group cannot be loaded, Users returns the
// loader's error, whose kind it keeps.
func (a *Access) Users(right Right, load GroupLoader) ([]spindle.UserName, error) {
	const op spindle.Op = "access.Users"
	users, failed, err := a.users(right, load, true)
	if err != nil {
		return nil, spindle.E(op, a.path, err)
	}
	if len(failed) > 0 {
		return nil, spindle.E(op, spindle.KindOf(failed[0]), a.path, failed[0])
	}
	return users, nil
}

// KnownUsers is [Access.Users] for a caller that can go on without the
// groups that cannot be loaded: it returns the users it can name, and
// for each group it could not load (nested or not) an error whose Path is
// the group and whose kind is the loader's (NotExist for a group that
// does not exist). The members of those groups are missing from users;
// the caller must say so rather than take them for empty. err is set only
// for an unknown right.
func (a *Access) KnownUsers(right Right, load GroupLoader) (users []spindle.UserName, failed []error, err error) {
	const op spindle.Op = "access.KnownUsers"
	users, failed, err = a.users(right, load, false)
	if err != nil {
		return nil, nil, spindle.E(op, a.path, err)
	}
	return users, failed, nil
}

// users does the work of Users and KnownUsers; with stop it returns at
// the first group that cannot be loaded.
func (a *Access) users(right Right, load GroupLoader, stop bool) ([]spindle.UserName, []error, error) {
	if right < 0 || right > AnyRight {
		return nil, nil, spindle.E(spindle.Invalid, fmt.Sprintf("unknown right %d", int(right)))
	}
	var users []spindle.UserName
	if a.owner != "" && (right == Read || right == List || right == AnyRight) {
		users = append(users, a.owner)
	}
	add := func(g *grants) {
		if g.all {
			users = append(users, spindle.AllUsers)
		}
		users = append(users, g.users...)
		for _, d := range g.domains {
			users = append(users, spindle.UserName("*@"+d))
		}
	}
	g := &a.rights[right]
	add(g)
	var failed []error
	queue := slices.Clone(g.groups)
	for i := 0; i < len(queue); i++ {
		grp, err := loadGroup(queue[i], load)
		if err != nil {
			// The group's path is in the error; say it once.
			failed = append(failed, spindle.E(spindle.KindOf(err), queue[i], errors.Unwrap(err)))
			if stop {
				return nil, failed, nil
			}
			continue
		}
		users = append(users, grp.owner)
		add(&grp.members)
		for _, sub := range grp.members.groups {
			if !slices.Contains(queue, sub) {
				queue = append(queue, sub)
			}
		}
	}
	slices.Sort(users)
	return slices.Compact(users), failed, nil
}

// governs reports whether name is clean and lies in the directory a governs.
func (a *Access) governs(name spindle.PathName) bool {
	if a.dir == "" || !strings.HasPrefix(string(name), string(a.dir)) {
		return false
	}
	if a.dir[len(a.dir)-1] != '/' { // Not the root: name is the directory or below it.
		if len(name) > len(a.dir) && name[len(a.dir)] != '/' {
			return false
		}
	}
	return cleanElems(string(name[strings.IndexByte(string(name), '/')+1:]))
}

// cleanElems reports whether s, the part of a path after the user name, is in
// clean form: no empty, "." or ".." elements and no trailing slash. The empty
// string (the root) is clean.
func cleanElems(s string) bool {
	if s == "" {
		return true
	}
	if s[0] == '/' || s[len(s)-1] == '/' || strings.Contains(s, "//") {
		return false
	}
	// Look only at the dots: "." and ".." elements are rare in practice.
	for i := 0; ; {
		d := strings.IndexByte(s[i:], '.')
		if d < 0 {
			return true
		}
		i += d
		if i == 0 || s[i-1] == '/' { // A dot starts an element.
			rest := s[i:]
			if rest == "." || rest == ".." || strings.HasPrefix(rest, "./") || strings.HasPrefix(rest, "../") {
				return false
			}
		}
		i++
	}
}

// requesterDomain checks, without allocating, that user looks like a
// canonical user name (it cannot be a wildcard, all, or a name with a
// non-canonical domain, which could otherwise slip past a wildcard) and
// returns its domain.
func requesterDomain(user spindle.UserName) (string, bool) {
	s := string(user)
	at := strings.IndexByte(s, '@')
	if at <= 0 || at == len(s)-1 || user == spindle.AllUsers || len(s) >= spindle.MaxUserNameLen {
		return "", false
	}
	alnum := false
	for i := 0; i < at; i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			alnum = true
		case strings.IndexByte("!#$%&'*+-=?^_{|}~.", c) >= 0:
		default:
			return "", false
		}
	}
	domain := s[at+1:]
	dot := false
	for i := 0; i < len(domain); i++ {
		c := domain[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-':
		case c == '.':
			dot = true
		default:
			return "", false
		}
	}
	if !alnum || !dot || domain[len(domain)-1] == '.' {
		return "", false
	}
	return domain, true
}

// An AccessLoader returns the parsed Access file at accessFile, a clean path
// ending in /Access, or (nil, nil) if there is none.
type AccessLoader func(accessFile spindle.PathName) (*Access, error)

// WhichAccess returns the Access file that governs name: the nearest one
// found by looking in name itself (when it is a directory) and then in each
// directory above it up to the root, or [New] if there is none. An Access
// file is governed by the Access file in its own directory, that is, by
// itself. Errors from load are returned with their kind.
func WhichAccess(name spindle.PathName, load AccessLoader) (*Access, error) {
	const op spindle.Op = "access.WhichAccess"
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	a, err := whichAccess(p, load)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	return a, nil
}

// whichAccess is WhichAccess for a parsed name. Its errors carry no Op.
func whichAccess(p spindle.Parsed, load AccessLoader) (*Access, error) {
	path := string(p.Path())
	root := strings.IndexByte(path, '/') + 1 // The root, "user/", is path[:root].
	end := len(path)                         // The directory to look in is path[:end].
	if p.Last() == accessName {
		end = strings.LastIndexByte(path, '/') // An Access file has no children: start in its directory.
	}
	for {
		var file spindle.PathName
		if end <= root {
			end = root
			file = spindle.PathName(path[:root] + accessName)
		} else {
			file = spindle.PathName(path[:end] + "/" + accessName)
		}
		a, err := load(file)
		if err != nil {
			return nil, spindle.E(p.Path(), err)
		}
		if a != nil {
			if a.path != file {
				return nil, spindle.E(spindle.Internal, p.Path(), "Access loader returned "+string(a.path)+" for "+string(file))
			}
			return a, nil
		}
		if end == root {
			return New(p.Path()), nil
		}
		end = strings.LastIndexByte(path[:end], '/')
	}
}

// Can reports whether user has right on name, finding the governing Access
// file with loadAccess (see [WhichAccess]) and then asking it (see
// [Access.Can]). The name is cleaned first.
func Can(user spindle.UserName, right Right, name spindle.PathName, loadAccess AccessLoader, loadGroup GroupLoader) (bool, error) {
	const op spindle.Op = "access.Can"
	p, err := spindle.Parse(name)
	if err != nil {
		return false, spindle.E(op, user, err)
	}
	a, err := whichAccess(p, loadAccess)
	if err != nil {
		return false, spindle.E(op, user, err)
	}
	return a.Can(user, right, p.Path(), loadGroup)
}

// parseRight returns the right named by s, a full name or its first letter
// in any case.
func parseRight(s string) (Right, bool) {
	for r := range numRights {
		name := rightNames[r]
		if len(s) == 1 && lower(s[0]) == name[0] || asciiEqualFold(s, name) {
			return Right(r), true
		}
	}
	return 0, false
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// asciiEqualFold is strings.EqualFold for ASCII only, so that no Unicode
// look-alike (such as the Kelvin sign for k) is taken for a letter.
func asciiEqualFold(s, t string) bool {
	if len(s) != len(t) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(s[i]) != lower(t[i]) {
			return false
		}
	}
	return true
}

// Candidates returns the names of the Access files that could govern
// name, in the order [WhichAccess] looks for them: in name's own
// directory (for a directory, in it; for an Access file, in the directory
// that holds it), then in each directory above, up to the root. The first
// that exists governs. A reader that is shown which Access file governs a
// name, with proofs, checks that none nearer exists with this list.
func Candidates(name spindle.PathName) ([]spindle.PathName, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(spindle.Op("access.Candidates"), err)
	}
	path := string(p.Path())
	root := strings.IndexByte(path, '/') + 1
	end := len(path)
	if p.Last() == accessName {
		end = strings.LastIndexByte(path, '/')
	}
	var out []spindle.PathName
	for end > root {
		out = append(out, spindle.PathName(path[:end]+"/"+accessName))
		end = strings.LastIndexByte(path[:end], '/')
	}
	return append(out, spindle.PathName(path[:root]+accessName)), nil
}
