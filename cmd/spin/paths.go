package main

import (
	"path"
	"strings"

	"spindle.dev"
)

// isSpinPath reports whether arg names something in spin rather than a local
// file: it is "@", starts with "@/", or its first element is a user name
// (ann@example.com/docs). A local file whose name looks like that can be
// given as ./ann@example.com/docs.
func isSpinPath(arg string) bool {
	if arg == "@" || strings.HasPrefix(arg, "@/") {
		return true
	}
	first, _, _ := strings.Cut(arg, "/")
	if !strings.Contains(first, "@") {
		return false
	}
	_, err := spindle.CleanUser(spindle.UserName(first))
	return err == nil
}

// expand returns the clean spin path that arg names for user me, with "@"
// alone or as the first element standing for me's root.
func expand(me spindle.UserName, arg string) (spindle.PathName, error) {
	switch {
	case arg == "@":
		arg = string(me) + "/"
	case strings.HasPrefix(arg, "@/"):
		arg = string(me) + arg[1:]
	}
	return spindle.Clean(spindle.PathName(arg))
}

// dirPath reports whether arg names a directory by its form: it is a root,
// or ends in "/", "/." or "/..". Such a name given for a file is an error,
// not the file its last element names ("put F @/dir/w/" does not make w).
func dirPath(arg string) bool {
	if arg == "@" || isRootArg(arg) {
		return true
	}
	last := arg[strings.LastIndexByte(arg, '/')+1:]
	return last == "" || last == "." || last == ".."
}

// isRootArg reports whether arg is a user name alone, naming a root.
func isRootArg(arg string) bool {
	if strings.Contains(arg, "/") {
		return false
	}
	_, err := spindle.CleanUser(spindle.UserName(arg))
	return err == nil
}

// join returns dir/elem, for a clean dir and one element.
func join(dir spindle.PathName, elem string) spindle.PathName {
	return spindle.PathName(strings.TrimSuffix(string(dir), "/") + "/" + elem)
}

// base returns the last element of a clean spin path, or "" for a root.
func base(name spindle.PathName) string {
	p, err := spindle.Parse(name)
	if err != nil {
		return path.Base(string(name))
	}
	return p.Last()
}

// children returns the Glob pattern that matches the entries in the
// directory dir.
func children(dir spindle.PathName) string {
	return strings.TrimSuffix(spindle.GlobEscape(string(dir)), "/") + "/*"
}

// hasGlob reports whether s holds a path.Match metacharacter.
func hasGlob(s string) bool {
	return strings.ContainsAny(s, "*?[")
}

// spinPath expands arg (see expand) for the client's user, reporting a bad
// name as a diagnostic.
func (st *State) spinPath(c spindle.Client, arg string) (spindle.PathName, error) {
	name, err := expand(c.User(), arg)
	if err != nil {
		_, msg := describe(err)
		st.errorf("%s: not a spin path name: %s", arg, strings.TrimPrefix(msg, spindle.Invalid.Error()+": "))
		st.hint("spin path names look like ann@example.com/dir/file, or @/dir/file for your own")
		return "", errFailed
	}
	return name, nil
}
