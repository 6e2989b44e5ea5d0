package main

import (
	"strconv"
	"strings"
	"testing"

	"spindle.dev"
)

func TestPrintName(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"ann@example.com/a.txt", "ann@example.com/a.txt"},
		{"ann@example.com/café", "ann@example.com/café"},
		{"ann@example.com/a b", "ann@example.com/a b"},
		{"ann@example.com/日本語 😀", "ann@example.com/日本語 😀"},
		{`ann@example.com/a"b\c`, `ann@example.com/a"b\c`},
		{"ann@example.com/x\ny", `"ann@example.com/x\ny"`},
		{"\x1b[2J\x1b[H", `"\x1b[2J\x1b[H"`},
		{"cr\rlf", `"cr\rlf"`},
		{"bad\xffname", `"bad\xffname"`},
		{"nul\x00", `"nul\x00"`},
		{"del\x7f", `"del\x7f"`},
		{"csi\u009b2J", `"csi\u009b2J"`},
		{"ls\u2028x", `"ls\u2028x"`},
		{"rtl\u202etxt.exe", `"rtl\u202etxt.exe"`},
		{"nb\u00a0sp", `"nb\u00a0sp"`},
		{`"quoted"`, `"\"quoted\""`},
	} {
		if got := printName(tc.name); got != tc.want {
			t.Errorf("printName(%q) = %s, want %s", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"ann@example.com/x: does not exist", "ann@example.com/x: does not exist"},
		{"ann@example.com/\x1b[2J: does not exist", `ann@example.com/\x1b[2J: does not exist`},
		{"a\nb\xffc\u2028", `a\nb\xffc\u2028`},
	} {
		if got := escapeLine(tc.in); got != tc.want {
			t.Errorf("escapeLine(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// hostileNames are names a node may send: from a log written before names
// were checked, or made up by a hostile node.
var hostileNames = []string{
	"\x1b[2J\x1b[Hgotcha",
	"fake\nann@example.com evil",
	"carriage\rann@example.com over",
	"bad\xffname",
	"ls\u2028line",
	"rtl\u202etxt.exe",
	"nul\x00",
	"csi\u009b2J",
	`"quoted"`,
}

// linesOK checks that out has want lines, each printable: no name it holds
// passed for two lines or held a control character.
func linesOK(t *testing.T, what, out string, want int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if want >= 0 && len(lines) != want {
		t.Errorf("%s: %d lines, want %d:\n%s", what, len(lines), want, out)
	}
	for _, l := range lines {
		if !printable(l) {
			t.Errorf("%s: line %q holds a character that is not printable", what, l)
		}
	}
}

// Every command that prints names from a node prints each on one line,
// without control characters.
func TestHostileNamesPrinted(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/docs")
	src := e.file("f", "x")
	var names []string
	for _, h := range hostileNames {
		name := "ann@example.com/docs/" + h
		// The fake stores any name, as an old log or a hostile node would.
		e.ok("put", src, name)
		names = append(names, name)
	}
	e.ok("link", names[0], "@/docs/ln")
	e.client.mu.Lock()
	e.client.entries["ann@example.com/docs/ln"].Link = spindle.PathName(names[1])
	e.client.entries[spindle.PathName(names[2])].Writer = "ev\x1b[2Jil@example.com"
	e.client.shares = []spindle.ShareReport{{Name: spindle.PathName(names[1]), Readers: []spindle.UserName{ann, "b\nob@example.com"}}}
	e.client.mu.Unlock()
	n := len(names) + 1

	linesOK(t, "ls", e.ok("ls", "@/docs"), n)
	linesOK(t, "ls -l", e.ok("ls", "-l", "@/docs"), n)
	linesOK(t, "ls -R", e.ok("ls", "-R", "@"), n+1)
	linesOK(t, "watch", e.ok("watch", "-from", "1", "@/docs"), n+1)
	linesOK(t, "share", e.ok("share", "@/docs"), 1)
	for _, name := range names {
		linesOK(t, "info "+name, e.ok("info", name), -1)
		linesOK(t, "whichaccess "+name, e.ok("whichaccess", name), 1)
	}
	// The plain names print as they are; the others quoted.
	out := e.ok("ls", "@/docs")
	for _, want := range []string{"ann@example.com/docs/ln\n", `"ann@example.com/docs/fake\nann@example.com evil"` + "\n", `ann@example.com/docs/"quoted"` + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls lacks %s:\n%s", want, out)
		}
	}
	// A diagnostic that holds a name stays one printable line.
	for _, name := range names {
		_, errs, code := e.run("get", name+"/nope")
		if code == 0 {
			t.Errorf("get %q/nope succeeded", name)
		}
		linesOK(t, "get error", errs, -1)
		if strings.Count(errs, "\n") > 2 {
			t.Errorf("get %q/nope: diagnostic of %d lines:\n%s", name, strings.Count(errs, "\n"), errs)
		}
	}
}

// Whatever bytes a name holds, printName prints it on one line of
// printable characters, and a quoted name unquotes to the name.
func FuzzPrintName(f *testing.F) {
	for _, s := range append(hostileNames, "ann@example.com/a.txt", "", `"`, `\x41`, "\u2029", "\xc3") {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got := printName(name)
		if !printable(got) {
			t.Fatalf("printName(%q) = %q: not printable", name, got)
		}
		if got == name {
			if strings.HasPrefix(name, `"`) {
				t.Fatalf("printName(%q) left a name starting with a quote as it is", name)
			}
			return
		}
		back, err := strconv.Unquote(got)
		if err != nil || back != name {
			t.Fatalf("printName(%q) = %s, which unquotes to %q, %v", name, got, back, err)
		}
		if e := escapeLine(name); !printable(e) {
			t.Fatalf("escapeLine(%q) = %q: not printable", name, e)
		}
	})
}

// A path that names a directory by its form is refused where a file or
// link is to be written, and nothing is made.
func TestDirectoryPathForFile(t *testing.T) {
	e := newEnv(t)
	e.ok("mkdir", "@/dir")
	src := e.file("f", "x")
	for _, dst := range []string{"@/dir/w/", "@/dir/w/.", "@/dir/w/x/..", "@", "ann@example.com", "ann@example.com/"} {
		e.fails(exitFailure, "spin: put: "+dst+": a directory path given for a file: PATH must name the file to write\n"+
			"spin: hint: to put "+src+" into the directory, use: spin cp "+src+" "+dst+"\n", "put", src, dst)
		e.fails(exitFailure, "spin: link: "+dst+": a directory path given for a link: name the link itself, without a trailing /\n", "link", "@/dir", dst)
	}
	e.fails(exitFailure, "spin: cp: @/dir/w/: not a directory: DST ends in / but there is no such directory\n"+
		"spin: hint: to copy to a file, name the file without a trailing /\n", "cp", src, "@/dir/w/")
	if _, ok := e.data("ann@example.com/dir/w"); ok {
		t.Error("a directory path made the file w")
	}
	// Into an existing directory, a trailing slash is fine for cp.
	e.ok("cp", src, "@/dir/")
	if got, ok := e.data("ann@example.com/dir/f"); !ok || got != "x" {
		t.Errorf("cp into dir/: %q, %v", got, ok)
	}
}
