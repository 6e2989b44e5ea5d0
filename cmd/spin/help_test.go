package main

import (
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"

	"spindle.dev/node"
)

// The help texts are checked against the program: every flag a help text
// names is one its command accepts, every flag a command accepts is in its
// help, a documented default is the real one, and every example parses
// (TestHelpFlags); the examples that can run are run against a real node
// and print what the help shows (TestHelpExamples).

// A helpText is the usage text of spin itself (name "") or of a command,
// and the flags that command parses.
type helpText struct {
	name  string
	usage string
	flags func() *flag.FlagSet // A new, unparsed flag set of the command.
}

// helpTexts returns every usage text spin prints.
func helpTexts(t *testing.T) []helpText {
	e := newEnv(t)
	texts := []helpText{
		{"", mainUsage(), func() *flag.FlagSet { fs, _, _ := globalFlags(); return fs }},
		{"help", helpUsage, func() *flag.FlagSet { return flag.NewFlagSet("help", flag.ContinueOnError) }},
	}
	for _, c := range commands() {
		flags := func() *flag.FlagSet {
			if c.name == "node" {
				return node.NodeFlags()
			}
			// A command makes its flag set before it parses; -help
			// stops it there.
			e.ok(c.name, "-help")
			return e.st.flagSet
		}
		texts = append(texts, helpText{c.name, c.usage, flags})
	}
	return texts
}

// An option is one entry of a help text's Options section.
type option struct {
	names []string // Without the dash: "p", "packing".
	text  string   // The entry, its lines joined by single spaces.
}

var (
	optionLine = regexp.MustCompile(`^    (-[A-Za-z][\w-]*(?:, -[A-Za-z][\w-]*)*)(?:\s|$)`)
	flagWord   = regexp.MustCompile(`(?:^|[\s\[|])-([A-Za-z][\w-]*)`)
	defaultIs  = regexp.MustCompile(`\(default ([^\s:;)]+)[;)]`)
)

// sections splits a help text into its sections, by the unindented line
// that heads each ("Usage:", "Options:", "Global options (before the
// command):", "Example:"); the text before the first is under "".
func sections(usage string) map[string][]string {
	out := map[string][]string{}
	head := ""
	for _, l := range strings.Split(usage, "\n") {
		if l != "" && !strings.HasPrefix(l, " ") && strings.HasSuffix(l, ":") {
			head = l
			continue
		}
		if l != "" && !strings.HasPrefix(l, " ") {
			head = "text"
		}
		out[head] = append(out[head], l)
	}
	return out
}

// options returns the entries of the options sections of usage.
func options(usage string) []option {
	var opts []option
	for head, lines := range sections(usage) {
		if !strings.Contains(strings.ToLower(head), "options") {
			continue
		}
		for _, l := range lines {
			if m := optionLine.FindStringSubmatch(l); m != nil {
				var names []string
				for _, n := range strings.Split(m[1], ", ") {
					names = append(names, strings.TrimPrefix(n, "-"))
				}
				opts = append(opts, option{names: names, text: strings.TrimSpace(l)})
				continue
			}
			if len(opts) > 0 && strings.TrimSpace(l) != "" {
				o := &opts[len(opts)-1]
				o.text += " " + strings.TrimSpace(l)
			}
		}
	}
	return opts
}

// synopsisFlags returns the flags the synopsis lines of usage name.
func synopsisFlags(usage string) []string {
	var out []string
	for _, l := range sections(usage)["Usage:"] {
		for _, m := range flagWord.FindAllStringSubmatch(l, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// An example is one command line of a help text's examples, and the output
// the help shows under it.
type example struct {
	help  string   // The help text it is in: a command's name, or "" for spin's own.
	line  string   // As shown, after "$ ".
	stdin string   // What the line pipes in: echo 'TEXT' | spin ...
	args  []string // The words after "spin"; nil if the line does not run spin.
	out   []string // The lines shown under it.
}

var echoPipe = regexp.MustCompile(`^echo '([^']*)' \| (spin .*)$`)

// examples returns the examples of a help text.
func examples(help, usage string) []example {
	var out []example
	secs := sections(usage)
	for _, l := range append(secs["Example:"], secs["Examples:"]...) {
		l = strings.TrimPrefix(l, "    ")
		if line, ok := strings.CutPrefix(l, "$ "); ok {
			ex := example{help: help, line: line}
			cmd := line
			if m := echoPipe.FindStringSubmatch(line); m != nil {
				ex.stdin, cmd = m[1]+"\n", m[2]
			}
			if words := shellWords(cmd); len(words) > 0 && words[0] == "spin" {
				ex.args = words[1:]
			}
			out = append(out, ex)
			continue
		}
		if len(out) > 0 && strings.TrimSpace(l) != "" {
			out[len(out)-1].out = append(out[len(out)-1].out, l)
		}
	}
	return out
}

// shellWords splits a command line as a shell would, for the lines of
// examples: words separated by spaces, single-quoted words taken as they
// are.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted = !quoted
			in = true
		case r == ' ' && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
			}
			in = false
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	return words
}

// splitGlobal splits the words after "spin" into the global flags, the
// command and its arguments.
func splitGlobal(t *testing.T, words []string) (cmd string, args []string) {
	fs, _, _ := globalFlags()
	if err := fs.Parse(words); err != nil {
		t.Errorf("spin %s: global flags: %v", strings.Join(words, " "), err)
		return "", nil
	}
	if fs.NArg() == 0 {
		return "", nil
	}
	return fs.Arg(0), fs.Args()[1:]
}

func TestHelpFlags(t *testing.T) {
	texts := helpTexts(t)
	byName := map[string]helpText{}
	for _, h := range texts {
		byName[h.name] = h
	}
	for _, h := range texts {
		what := "spin help " + h.name
		fs := h.flags()
		documented := map[string]bool{"h": true, "help": true} // Package flag takes these.
		for _, o := range options(h.usage) {
			for _, n := range o.names {
				documented[n] = true
				if fs.Lookup(n) == nil && n != "h" && n != "help" {
					t.Errorf("%s documents -%s, which the command does not accept", what, n)
				}
			}
			// Aliases (-p, -packing) set one value.
			for _, n := range o.names[1:] {
				a, b := fs.Lookup(o.names[0]), fs.Lookup(n)
				if a != nil && b != nil && a.Value != b.Value {
					t.Errorf("%s documents -%s and -%s as one option; they are two flags", what, o.names[0], n)
				}
			}
			if m := defaultIs.FindStringSubmatch(o.text); m != nil {
				if f := fs.Lookup(o.names[len(o.names)-1]); f != nil && f.DefValue != "" && f.DefValue != m[1] {
					t.Errorf("%s says -%s defaults to %s; it defaults to %s", what, f.Name, m[1], f.DefValue)
				}
			}
		}
		for _, n := range synopsisFlags(h.usage) {
			if !documented[n] {
				t.Errorf("%s names -%s in its synopsis but not under its options", what, n)
			}
		}
		fs.VisitAll(func(f *flag.Flag) {
			if !documented[f.Name] {
				t.Errorf("%s does not document -%s, which the command accepts", what, f.Name)
			}
		})
		if h.name == "" || h.name == "help" {
			continue
		}
		// The command itself takes each documented flag: given one, it
		// still gets as far as -help.
		e := newEnv(t)
		fs.VisitAll(func(f *flag.Flag) {
			arg := "-" + f.Name
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				arg += "=1"
			}
			out, errs, code := e.run(h.name, arg, "-help")
			if code != exitOK || out != h.usage {
				t.Errorf("spin %s %s -help: exit %d, stderr:\n%s", h.name, arg, code, errs)
			}
		})
	}

	// Every example's flags are its command's, in an order it accepts.
	e := newEnv(t)
	for _, h := range texts {
		for _, ex := range examples(h.name, h.usage) {
			if ex.args == nil {
				t.Errorf("spin help %s: example %q does not run spin", h.name, ex.line)
				continue
			}
			cmd, args := splitGlobal(t, ex.args)
			c, ok := byName[cmd]
			if !ok || cmd == "" {
				t.Errorf("spin help %s: example %q names no command", h.name, ex.line)
				continue
			}
			e.st = &State{cmd: cmd}
			if err := e.st.parse(c.flags(), args); err != nil && err != errHelp {
				t.Errorf("spin help %s: example %q: %v", h.name, ex.line, err)
			}
		}
	}
}

// TestHelpParsers checks that the parsers above find what they must, so
// that TestHelpFlags cannot pass by finding nothing.
func TestHelpParsers(t *testing.T) {
	var names []string
	for _, o := range options(initUsage) {
		names = append(names, strings.Join(o.names, ","))
	}
	want := []string{"n,node", "k,keyserver", "v,verifier", "p,packing", "s,secrets", "r,recover", "f,force", "h,help"}
	if !slices.Equal(names, want) {
		t.Errorf("options of init: %q, want %q", names, want)
	}
	if got := options(mainUsage()); len(got) != 3 {
		t.Errorf("global options: %v", got)
	}
	if got := synopsisFlags(cpUsage); !slices.Equal(got, []string{"R", "packing", "j", "R", "packing", "j"}) {
		t.Errorf("synopsis flags of cp: %q", got)
	}
	exs := examples("put", putUsage)
	if len(exs) != 2 || exs[1].stdin != "read: bob@example.com\n" || !slices.Equal(exs[1].args, []string{"put", "@/docs/Access"}) {
		t.Errorf("examples of put: %+v", exs)
	}
	exs = examples("signup", signupUsage)
	if len(exs) != 1 || len(exs[0].out) != 3 {
		t.Errorf("examples of signup: %+v", exs)
	}
}
