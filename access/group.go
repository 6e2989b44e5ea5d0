package access

import (
	"slices"
	"strings"

	"spindle.dev"
)

// A Group is a parsed Group file. It is immutable and safe for concurrent use.
type Group struct {
	path    spindle.PathName // Clean path of the Group file.
	owner   spindle.UserName // Always a member.
	members grants           // Never has all set.
}

// ParseGroup parses the contents of the Group file name, which is cleaned and
// must be a Group file (see [IsGroupFile]). Errors are of kind Invalid; for
// malformed contents the message names the line and the offending text.
func ParseGroup(name spindle.PathName, data []byte) (*Group, error) {
	return parseGroup("access.ParseGroup", name, data, false)
}

// parseGroup is ParseGroup, with the rules of [Check] if strict.
func parseGroup(op spindle.Op, name spindle.PathName, data []byte, strict bool) (*Group, error) {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if !IsGroupFile(p.Path()) {
		return nil, spindle.E(op, spindle.Invalid, p.Path(), "not a Group file")
	}
	g := &Group{path: p.Path(), owner: p.User()}
	ps := parser{op: op, name: g.path, owner: g.owner, strict: strict}
	err = ps.lines(data, func(line string) error {
		if strings.IndexByte(line, ':') >= 0 {
			return ps.errorf("colon in group file on line %d: %q", ps.line, line)
		}
		members, ok := splitList(line)
		if !ok {
			return ps.errorf("invalid members list on line %d: %q", ps.line, line)
		}
		for _, m := range members {
			if err := ps.principal(&g.members, m, false); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	g.members.finish()
	return g, nil
}

// Path returns the clean path name of the Group file, which is the group's name.
func (g *Group) Path() spindle.PathName { return g.path }

// Owner returns the group's owner, who is always a member.
func (g *Group) Owner() spindle.UserName { return g.owner }

// Names returns, sorted and unique, the users the group names directly
// as members.
func (g *Group) Names() []spindle.UserName { return slices.Clone(g.members.users) }

// Groups returns the groups the group names directly as members, sorted.
func (g *Group) Groups() []spindle.PathName { return slices.Clone(g.members.groups) }
