package access

import (
	"fmt"
	"strings"
	"testing"

	"spindle.dev"
)

// benchWorld is a tree with a file 20 levels deep whose Access file, at the
// root, grants read to a group that reaches the reader only through a chain
// of 5 groups, two of them owned by other users. Everything is parsed once.
func benchWorld(b *testing.B) (a *Access, name spindle.PathName, loadAccess AccessLoader, loadGroup GroupLoader) {
	elems := make([]string, 20)
	for i := range elems {
		elems[i] = fmt.Sprintf("d%02d", i)
	}
	name = spindle.PathName("ann@example.com/" + strings.Join(elems, "/"))
	a, err := Parse("ann@example.com/Access", []byte("r, l: ann@example.com/Group/g1, carl@other.org\nw: ann@example.com\n"))
	if err != nil {
		b.Fatal(err)
	}
	texts := map[spindle.PathName]string{
		"ann@example.com/Group/g1": "x1@example.com, x2@example.com, g2",
		"ann@example.com/Group/g2": "x3@example.com bob@example.com/Group/g3",
		"bob@example.com/Group/g3": "x4@example.com, carl@other.org/Group/g4",
		"carl@other.org/Group/g4":  "*@other.org ann@example.com/Group/g5",
		"ann@example.com/Group/g5": "zed@example.com, x5@example.com",
	}
	groups := make(map[spindle.PathName]*Group)
	for n, t := range texts {
		g, err := ParseGroup(n, []byte(t))
		if err != nil {
			b.Fatal(err)
		}
		groups[n] = g
	}
	loadGroup = func(n spindle.PathName) (*Group, error) {
		if g, ok := groups[n]; ok {
			return g, nil
		}
		return nil, spindle.E(spindle.NotExist, n)
	}
	loadAccess = func(n spindle.PathName) (*Access, error) {
		if n == a.Path() {
			return a, nil
		}
		return nil, nil
	}
	return a, name, loadAccess, loadGroup
}

// BenchmarkCan measures a decision with a cached, governing Access file.
func BenchmarkCan(b *testing.B) {
	a, name, _, loadGroup := benchWorld(b)
	const user = spindle.UserName("zed@example.com")
	b.ReportAllocs()
	for b.Loop() {
		ok, err := a.Can(user, Read, name, loadGroup)
		if !ok || err != nil {
			b.Fatalf("Can = %v, %v", ok, err)
		}
	}
}

// BenchmarkCanDenied measures the worst case: the whole chain is searched.
func BenchmarkCanDenied(b *testing.B) {
	a, name, _, loadGroup := benchWorld(b)
	const user = spindle.UserName("nobody@example.com")
	b.ReportAllocs()
	for b.Loop() {
		ok, err := a.Can(user, Read, name, loadGroup)
		if ok || err != nil {
			b.Fatalf("Can = %v, %v", ok, err)
		}
	}
}

// BenchmarkCanWhich adds the search for the governing Access file, with a
// loader that answers from memory, 21 directories up to the root.
func BenchmarkCanWhich(b *testing.B) {
	_, name, loadAccess, loadGroup := benchWorld(b)
	const user = spindle.UserName("zed@example.com")
	b.ReportAllocs()
	for b.Loop() {
		ok, err := Can(user, Read, name, loadAccess, loadGroup)
		if !ok || err != nil {
			b.Fatalf("Can = %v, %v", ok, err)
		}
	}
}
