package access

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"spindle.dev"
)

// parser holds what the Access and Group file parsers share.
type parser struct {
	op    spindle.Op
	name  spindle.PathName // The file being parsed, clean.
	owner spindle.UserName // Its owner, against whose Group directory short group names resolve.
	line  int              // Current line number, from 1.
	// strict applies the rules of Check, which files written before them
	// may break: Parse must still read those as they were read then.
	strict bool
}

// Check reports whether data may be written as the Access or Group file
// name: it must parse (see [Parse] and [ParseGroup]) and also keep the
// rules added since logs began, which Parse and ParseGroup do not apply,
// so that files already in a log keep the meaning they had:
//
//   - the file is valid UTF-8;
//   - it holds no control characters but tab, and carriage return at the
//     end of a line, so that printing it cannot forge or hide lines;
//   - group names are written in clean form: no empty, "." or ".."
//     elements and no trailing slash.
//
// Writers, and the hosts that append what writers send, apply Check.
// Errors are of kind Invalid and name the line and the offending text.
func Check(name spindle.PathName, data []byte) error {
	const op spindle.Op = "access.Check"
	var err error
	if IsGroupFile(name) {
		_, err = parseGroup(op, name, data, true)
	} else {
		_, err = parseAccess(op, name, data, true)
	}
	return err
}

// checkText applies the byte-level rules of Check to one raw line.
func (p *parser) checkText(line string) error {
	if !utf8.ValidString(line) {
		return p.errorf("invalid UTF-8 on line %d: %q", p.line, line)
	}
	for i, r := range line {
		switch {
		case r == '\t':
		case r == '\r' && i == len(line)-1:
		case r < 0x20 || r == 0x7f || 0x80 <= r && r <= 0x9f:
			return p.errorf("control character %U on line %d: %q", r, p.line, line)
		}
	}
	return nil
}

// errorf returns an Invalid error for the file being parsed.
func (p *parser) errorf(format string, args ...any) error {
	return spindle.E(p.op, spindle.Invalid, p.name, fmt.Sprintf(format, args...))
}

// lines calls fn for each line of data that is not blank once its comment is
// removed, with the line trimmed of comment and surrounding space.
func (p *parser) lines(data []byte, fn func(line string) error) error {
	text := string(data)
	p.line = 0
	for len(text) > 0 {
		p.line++
		line := text
		if i := strings.IndexByte(text, '\n'); i >= 0 {
			line, text = text[:i], text[i+1:]
		} else {
			text = ""
		}
		if p.strict {
			if err := p.checkText(line); err != nil {
				return err
			}
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		line = trimSpace(line)
		if line == "" {
			continue
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	return nil
}

func isSpace(c byte) bool {
	switch c {
	case ' ', '\t', '\r', '\n', '\v', '\f':
		return true
	}
	return false
}

// trimSpace removes ASCII white space from both ends of s.
func trimSpace(s string) string {
	for len(s) > 0 && isSpace(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isSpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// splitList splits a list whose items are separated by white space and at
// most one comma. A trailing comma is allowed; a leading comma or two commas
// in a row make the list malformed and ok false. s must be trimmed.
func splitList(s string) (items []string, ok bool) {
	if strings.HasPrefix(s, ",") {
		return nil, false
	}
	for len(s) > 0 {
		i := 0
		for i < len(s) && s[i] != ',' && !isSpace(s[i]) {
			i++
		}
		items = append(items, s[:i])
		commas := 0
		for i < len(s) && (s[i] == ',' || isSpace(s[i])) {
			if s[i] == ',' {
				commas++
			}
			i++
		}
		if commas > 1 {
			return nil, false
		}
		s = s[i:]
	}
	return items, true
}

// isAll reports whether tok names everyone: "all" in any case, or the
// reserved user name itself.
func isAll(tok string) bool {
	return asciiEqualFold(tok, "all") || tok == string(spindle.AllUsers)
}

// principal parses one user, wildcard, all or group name and adds it to g.
// Short group names resolve against the owner's Group directory.
func (p *parser) principal(g *grants, tok string, allowAll bool) error {
	if isAll(tok) {
		if !allowAll {
			return p.errorf("all is not allowed in a group file, line %d: %q", p.line, tok)
		}
		g.all = true
		return nil
	}
	if strings.IndexByte(tok, ':') >= 0 {
		return p.errorf("unexpected colon on line %d: %q", p.line, tok)
	}
	slash := strings.IndexByte(tok, '/')
	at := strings.IndexByte(tok, '@')
	if at < 0 && strings.HasPrefix(tok, "*") {
		return p.errorf("invalid user name on line %d: %q: a wildcard needs a domain, as in *@example.com; all means everyone", p.line, tok)
	}
	switch {
	case at >= 0 && (slash < 0 || at < slash) && strings.HasPrefix(tok, "*@"):
		if slash >= 0 {
			return p.errorf("invalid group name on line %d: %q: a wildcard cannot own a group", p.line, tok)
		}
		// Validate the domain as ParseUser does, by giving it a user.
		_, _, _, domain, err := spindle.ParseUser(spindle.UserName("x" + tok[1:]))
		if err != nil {
			return p.errorf("invalid wildcard on line %d: %q: %s", p.line, tok, reason(err))
		}
		g.domains = append(g.domains, domain)
	case at >= 0 && slash < 0:
		user, err := spindle.CleanUser(spindle.UserName(tok))
		if err != nil {
			return p.errorf("invalid user name on line %d: %q: %s", p.line, tok, reason(err))
		}
		g.users = append(g.users, user)
	default:
		full := tok
		if at < 0 || slash < at { // A short name, relative to the owner's Group directory.
			full = string(p.owner) + "/" + groupDir + "/" + tok
		}
		gp, err := spindle.Parse(spindle.PathName(full))
		if err != nil {
			return p.errorf("invalid group name on line %d: %q: %s", p.line, tok, reason(err))
		}
		if !IsGroupFile(gp.Path()) {
			return p.errorf("invalid group name on line %d: %q: not a file in a Group directory", p.line, tok)
		}
		if p.strict && !cleanElems(full[strings.IndexByte(full, '/')+1:]) {
			return p.errorf("invalid group name on line %d: %q: empty, . or .. element or trailing slash; write %s", p.line, tok, shortGroup(gp.Path(), p.owner))
		}
		g.groups = append(g.groups, gp.Path())
	}
	return nil
}

// reason returns the message of the error underneath a *spindle.Error, which
// is all that is worth repeating of an error from the root package.
func reason(err error) string {
	for {
		e, ok := err.(*spindle.Error)
		if !ok || e.Err == nil {
			break
		}
		err = e.Err
	}
	return err.Error()
}

// shortGroup returns the name of group g as its owner would write it.
func shortGroup(g spindle.PathName, owner spindle.UserName) string {
	prefix := string(owner) + "/" + groupDir + "/"
	if s, ok := strings.CutPrefix(string(g), prefix); ok {
		return s
	}
	return string(g)
}
