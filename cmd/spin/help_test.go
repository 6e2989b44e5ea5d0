package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
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
				fs, _ := newNodeFlags()
				installFlags(fs) // spin node install and uninstall take these too.
				return fs
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
	stdin string   // What the line pipes in: printf 'TEXT' | spin ...
	args  []string // The words after "spin"; nil if the line does not run spin.
	env   []string // NAME=VALUE settings before "spin", as a shell takes them.
	out   []string // The lines shown under it.
}

var printfPipe = regexp.MustCompile(`^printf '([^'%]*)' \| (spin .*)$`)

// envAssign matches a shell's NAME=VALUE before a command.
var envAssign = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// examples returns the examples of a help text.
func examples(help, usage string) []example {
	var out []example
	secs := sections(usage)
	for _, l := range append(secs["Example:"], secs["Examples:"]...) {
		l = strings.TrimPrefix(l, "    ")
		if line, ok := strings.CutPrefix(l, "$ "); ok {
			ex := example{help: help, line: line}
			cmd := line
			if m := printfPipe.FindStringSubmatch(line); m != nil {
				ex.stdin, cmd = strings.ReplaceAll(m[1], `\n`, "\n"), m[2]
			}
			words := shellWords(cmd)
			for len(words) > 0 && envAssign.MatchString(words[0]) {
				ex.env, words = append(ex.env, words[0]), words[1:]
			}
			if len(words) > 0 && words[0] == "spin" {
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
		// A flag the text mentions is the command's own, a global one, or
		// one of a command named on the same line ("spin node -writers").
		global, _, _ := globalFlags()
		for _, l := range strings.Split(h.usage, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "$ ") {
				continue // Examples are parsed below.
			}
			for _, m := range flagWord.FindAllStringSubmatch(l, -1) {
				n := m[1]
				if fs.Lookup(n) != nil || documented[n] || global.Lookup(n) != nil || mentionedCommandTakes(l, n, byName) {
					continue
				}
				t.Errorf("%s mentions -%s, which neither it nor a command named on the line accepts: %q", what, n, l)
			}
		}
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
			if cmd == "node" && len(args) > 0 && (args[0] == "status" || args[0] == "install") {
				args = args[1:] // spin node status and install take the node's flags.
			}
			if err := e.st.parse(c.flags(), args); err != nil && err != errHelp {
				t.Errorf("spin help %s: example %q: %v", h.name, ex.line, err)
			}
		}
	}
}

var spinCommand = regexp.MustCompile(`\bspin ([a-z]+)\b`)

// mentionedCommandTakes reports whether a command named on line as
// "spin NAME" accepts the flag name.
func mentionedCommandTakes(line, name string, byName map[string]helpText) bool {
	for _, m := range spinCommand.FindAllStringSubmatch(line, -1) {
		if h, ok := byName[m[1]]; ok && m[1] != "" && h.flags().Lookup(name) != nil {
			return true
		}
	}
	return false
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
	if got := synopsisFlags(cpUsage); !slices.Equal(got, []string{"R", "u", "packing", "j", "R", "u", "packing", "j"}) {
		t.Errorf("synopsis flags of cp: %q", got)
	}
	exs := examples("put", putUsage)
	if len(exs) != 2 || exs[1].stdin != "*: ann@example.com\nread: bob@example.com\n" || !slices.Equal(exs[1].args, []string{"put", "@/docs/Access"}) {
		t.Errorf("examples of put: %+v", exs)
	}
	exs = examples("signup", signupUsage)
	if len(exs) != 1 || len(exs[0].out) != 3 {
		t.Errorf("examples of signup: %+v", exs)
	}
}

// exampleGiven is what must exist before an example that the examples
// before it do not make: testscript lines run, as ann, just before it.
var exampleGiven = map[string]string{
	"spin rm @/docs/draft.txt":       "exec spin put report.pdf @/docs/draft.txt",
	"spin rm -R @/tmp":               "exec spin mkdir -p @/tmp/old",
	"spin mv @/drafts @/docs/2026":   "exec spin mkdir @/drafts",
	"spin history @/docs/report.txt": "exec spin put report.pdf @/docs/report.txt\nexec spin rm @/docs/report.txt",
	"spin rm -R @/album":             "exec spin mkdir @/album\nexec spin put report.pdf @/album/a.jpg",
	// The watch runs until interrupted: watchexample puts the file it
	// shows while it runs (see cmdWatchexample).
	"spin watch -new @/inbox": "exec spin mkdir @/inbox",
	// The usual temporary directory, as the example shows it (testscript
	// sets its own); the demo removes what it made there.
	"spin demo": "env TMPDIR=/tmp",
}

// exampleSkip names the examples that cannot run in a test, and why.
var exampleSkip = map[string]string{
	"spin ui":                            "it serves until interrupted; TestUICommand runs it",
	"spin node status -home ~/spinnode2": "it needs the node of the example before it running; testdata/nodestatus.txt runs it",
	"spin mount ~/spindle":               "it runs until unmounted; node/client/fsys's tests mount in their own process",
	"spin key join":                      "the example node is a member already; TestKeyClusterProcesses runs it",
	"spin key witness quorum 1":          "it needs the witness of the example before it; TestWitnessProcesses runs both",
}

// exampleAnyOutput names the examples whose output depends on the build.
var exampleAnyOutput = map[string]string{
	"spin version": "the version is the build's",
}

// exampleScript returns a testscript that runs every example that can run
// against one real node, as ann, whose home holds the node's home (so
// that a plain spin init finds it), with bob signed up beforehand and
// sharing bob@example.com/pub with all. The examples run in the order
// spin help lists the commands, after spin's own. An example whose help
// shows output must print it, "..." standing for any text and a last line
// "..." for any further lines; one that shows none must succeed. Two run
// differently: a spin node example starts a second node on a free port
// (not the default one) and stops it once it is ready, and a spin watch
// example runs while a file is put (see cmdWatchexample).
func exampleScript(t *testing.T) (script string, ran int) {
	var b strings.Builder
	b.WriteString(`[!node] skip 'spin node is not built in'
env HOME=$WORK
exec spin node -listen /ip4/127.0.0.1/tcp/0 -writers all &node&
waitfile $WORK/spin/node/addr 60
envfile NODE $WORK/spin/node/addr

env HOME=$WORK/bob
exec spin init -node $NODE bob@example.com
exec spin signup
exec spin mkdir @/pub
exec spin put $WORK/plans.txt @/pub/plans.txt
exec spin put $WORK/pubaccess.txt @/pub/Access
env HOME=$WORK
`)
	var files strings.Builder
	inited := false
	n := 0
	for _, h := range helpTexts(t) {
		for _, ex := range examples(h.name, h.usage) {
			n++
			if ex.args == nil || exampleSkip[ex.line] != "" || slices.ContainsFunc(ex.args, func(a string) bool { return strings.Contains(a, "...") }) {
				t.Logf("not run: %s (%s)", ex.line, cmp.Or(exampleSkip[ex.line], "an address or key left out"))
				continue
			}
			ran++
			fmt.Fprintf(&b, "\n# spin help %s: %s\n", h.name, ex.line)
			if g := exampleGiven[ex.line]; g != "" {
				b.WriteString(g + "\n")
			}
			cmd, _ := splitGlobal(t, ex.args)
			if cmd == "init" {
				if inited {
					// Once more, in a home of its own beside the node.
					fmt.Fprintf(&b, "env HOME=$WORK/init%d\nmkdir $WORK/init%[1]d/spin/node\ncp $WORK/spin/node/addr $WORK/init%[1]d/spin/node/addr\n", n)
				}
			}
			if ex.stdin != "" {
				fmt.Fprintf(&files, "-- stdin%d --\n%s", n, ex.stdin)
				fmt.Fprintf(&b, "stdin stdin%d\n", n)
			}
			for _, kv := range ex.env {
				fmt.Fprintf(&b, "env %s\n", kv)
			}
			var quoted []string
			for _, a := range ex.args {
				quoted = append(quoted, "'"+strings.ReplaceAll(a, "'", "''")+"'")
			}
			if cmd == "node" && len(ex.args) > 1 && ex.args[1] == "install" {
				// spin node install -print prints a unit and returns.
				fmt.Fprintf(&b, "exec spin %s\nstdout 'ExecStart=.*\"-writers=ann@example.com\"'\n", strings.Join(quoted, " "))
				continue
			}
			if cmd == "node" {
				// A second node: on a free port, not the default one
				// the example leaves it on, and stopped once ready.
				home := ""
				for i, a := range ex.args {
					if a == "-home" && i+1 < len(ex.args) {
						home = ex.args[i+1]
					}
				}
				if !strings.HasPrefix(home, "~/") {
					t.Errorf("spin help node: example %q names no -home ~/DIR", ex.line)
					continue
				}
				home = "$WORK/" + strings.TrimPrefix(home, "~/")
				fmt.Fprintf(&b, "exec spin %s -listen /ip4/127.0.0.1/tcp/0 &exnode&\nwaitfile %s/addr 60\nkill -INT exnode\nwait exnode\n",
					strings.ReplaceAll(strings.Join(quoted, " "), "'~/", "$WORK'/"), home)
				continue
			}
			if cmd == "watch" {
				fmt.Fprintf(&b, "watchexample report.pdf @/inbox/note.txt %s\n", strings.Join(quoted, " "))
			} else {
				fmt.Fprintf(&b, "exec spin %s\n", strings.Join(quoted, " "))
			}
			if len(ex.out) > 0 && exampleAnyOutput[ex.line] == "" {
				fmt.Fprintf(&files, "-- want%d --\n%s\n", n, strings.Join(ex.out, "\n"))
				fmt.Fprintf(&b, "cmpexample want%d\n", n)
			}
			for _, kv := range ex.env {
				name, _, _ := strings.Cut(kv, "=")
				fmt.Fprintf(&b, "env %s=\n", name) // As the shell does: for that command only.
			}
			if cmd == "init" {
				if inited {
					b.WriteString("env HOME=$WORK\n")
				}
				inited = true
			}
		}
	}
	b.WriteString("\nkill -INT node\nwait node\n\n")
	b.WriteString("-- plans.txt --\nMeet at noon.\n-- pubaccess.txt --\nread, list: all\n")
	b.WriteString("-- report.pdf --\n%PDF-1.4 a report\n-- photos/beach.jpg --\nnot really a photo\n")
	b.WriteString(files.String())
	return b.String(), ran
}

// cmdCmpexample checks the last command's stdout against the output an
// example shows (see exampleScript).
func cmdCmpexample(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: cmpexample FILE")
	}
	if err := matchExample(strings.Split(strings.TrimSuffix(ts.ReadFile(args[0]), "\n"), "\n"), ts.ReadFile("stdout")); err != nil {
		ts.Fatalf("%v", err)
	}
}

// matchExample reports how out differs from the lines an example shows.
func matchExample(want []string, out string) error {
	got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	more := len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "..."
	if more {
		want = want[:len(want)-1]
	}
	if len(got) < len(want) || !more && len(got) > len(want) {
		return fmt.Errorf("the help shows %d lines of output; it printed %d:\n%s", len(want), len(got), out)
	}
	for i, w := range want {
		re := "^" + strings.ReplaceAll(regexp.QuoteMeta(w), `\.\.\.`, ".*") + "$"
		if !regexp.MustCompile(re).MatchString(got[i]) {
			return fmt.Errorf("the help shows\n\t%s\nit printed\n\t%s", w, got[i])
		}
	}
	return nil
}

// cmdWatchexample runs spin with the given arguments, a watch, and puts
// the local file SRC as DST again and again until the watch prints a line
// (a watch started with -new shows only what happens after it has begun,
// and nothing says when that is), then interrupts it. Its stdout is the
// first line the watch printed.
func cmdWatchexample(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: watchexample SRC DST ARGS...")
	}
	spin := ""
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(dir, "spin")); err == nil {
			spin = filepath.Join(dir, "spin")
			break
		}
	}
	if spin == "" {
		ts.Fatalf("no spin in $PATH")
	}
	env := append(os.Environ(), "HOME="+ts.Getenv("HOME"), "TMPDIR="+ts.Getenv("TMPDIR"))
	watch := exec.Command(spin, args[2:]...)
	watch.Env, watch.Dir = env, ts.Getenv("WORK")
	out, err := watch.StdoutPipe()
	ts.Check(err)
	ts.Check(watch.Start())
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	}()
	defer func() {
		watch.Process.Signal(os.Interrupt)
		watch.Wait()
	}()
	deadline := time.After(60 * time.Second)
	for {
		put := exec.Command(spin, "put", args[0], args[1])
		put.Env, put.Dir = env, ts.Getenv("WORK")
		if msg, err := put.CombinedOutput(); err != nil {
			ts.Fatalf("spin put %s %s: %v\n%s", args[0], args[1], err, msg)
		}
		select {
		case l, ok := <-lines:
			if !ok {
				ts.Fatalf("spin %s ended without printing a line", strings.Join(args[2:], " "))
			}
			fmt.Fprintln(ts.Stdout(), l)
			return
		case <-time.After(500 * time.Millisecond):
		case <-deadline:
			ts.Fatalf("spin %s printed nothing within 60s", strings.Join(args[2:], " "))
		}
	}
}

func TestHelpExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	script, ran := exampleScript(t)
	if ran < 15 {
		t.Fatalf("only %d examples can run:\n%s", ran, script)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "examples.txt"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir:       dir,
		Condition: func(cond string) (bool, error) { return cond == "node" && runNode != nil, nil },
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile":     cmdWaitfile,
			"envfile":      cmdEnvfile,
			"cmpexample":   cmdCmpexample,
			"watchexample": cmdWatchexample,
		},
	})
}

func TestMatchExample(t *testing.T) {
	want := []string{"name:      ann@example.com", "key:       p256:BHq0..."}
	if err := matchExample(want, "name:      ann@example.com\nkey:       p256:BHq0xyz\n"); err != nil {
		t.Error(err)
	}
	for _, out := range []string{"name:      ann@example.com\n", "name:      bob@example.com\nkey:       p256:BHq0xyz\n", "name:      ann@example.com\nkey:       p256:BHq0xyz\nmore\n"} {
		if matchExample(want, out) == nil {
			t.Errorf("%q matches %q", out, want)
		}
	}
	if err := matchExample(append(want, "..."), "name:      ann@example.com\nkey:       p256:BHq0xyz\nmore\n"); err != nil {
		t.Error(err)
	}
}
