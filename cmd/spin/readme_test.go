package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestReadmeWalkthrough runs the README's walkthrough, line by line as it
// is written, against a real node: the shell lines of its first code
// block become a testscript. A command followed by comment lines that
// show spin's diagnostics ("#   spin: ...") must fail and print exactly
// those lines; every other command must succeed. The user's home is the
// script's work directory, so the node's default home is $WORK/spin/node.
// Two things differ from a user's run: the node listens on a free port
// rather than 7447, and spin watch, which streams until interrupted, is
// not run.
func TestReadmeWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real node")
	}
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	block, err := walkthroughBlock(string(data))
	if err != nil {
		t.Fatal(err)
	}
	script, err := walkthroughScript(block)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(script, "exec spin "); n < 20 {
		t.Fatalf("the walkthrough runs only %d spin commands:\n%s", n, script)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "walkthrough.txt"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: dir,
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			return nil
		},
		Condition: func(cond string) (bool, error) { return cond == "node" && runNode != nil, nil },
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile": cmdWaitfile,
			"envfile":  cmdEnvfile,
		},
	})
}

// walkthroughBlock returns the first code block after the README's
// walkthrough heading.
func walkthroughBlock(readme string) (string, error) {
	_, rest, ok := strings.Cut(readme, "\n## Walkthrough")
	if !ok {
		return "", fmt.Errorf("README has no Walkthrough section")
	}
	_, rest, ok = strings.Cut(rest, "\n```\n")
	if !ok {
		return "", fmt.Errorf("README's walkthrough has no code block")
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		return "", fmt.Errorf("README's walkthrough code block does not end")
	}
	return block, nil
}

var (
	trailingComment = regexp.MustCompile(`\s{2,}#.*$`)
	echoToFile      = regexp.MustCompile(`^echo '([^']*)' > (\S+)$`)
	printfInto      = regexp.MustCompile(`^printf '([^'%]*)' \| (.*)$`)
	homeIs          = regexp.MustCompile(`^HOME=(\S+) (.*)$`)
)

// walkthroughScript turns the shell lines of the walkthrough into a
// testscript (see TestReadmeWalkthrough).
func walkthroughScript(block string) (string, error) {
	type step struct {
		home, stdin string
		args        []string
		stderr      []string
	}
	var steps []*step
	var files strings.Builder
	made := map[string]bool{} // Local files the walkthrough makes.
	for _, line := range strings.Split(block, "\n") {
		if diag, ok := strings.CutPrefix(line, "#   "); ok {
			if len(steps) == 0 {
				return "", fmt.Errorf("diagnostics before any command: %q", line)
			}
			last := steps[len(steps)-1]
			last.stderr = append(last.stderr, diag)
			continue
		}
		line = strings.TrimSpace(trailingComment.ReplaceAllString(line, ""))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if m := echoToFile.FindStringSubmatch(line); m != nil {
			fmt.Fprintf(&files, "-- %s --\n%s\n", m[2], m[1])
			made[m[2]] = true
			continue
		}
		s := &step{}
		if m := printfInto.FindStringSubmatch(line); m != nil {
			s.stdin, line = strings.ReplaceAll(m[1], `\n`, "\n"), m[2]
		}
		if m := homeIs.FindStringSubmatch(line); m != nil {
			s.home, line = m[1], m[2]
		}
		line = strings.ReplaceAll(line, "$(head -1 ~/spin/node/addr)", "$NODE")
		if strings.ContainsAny(line, "$`|>;&~") && !strings.Contains(line, "$NODE") {
			return "", fmt.Errorf("a shell line the test cannot run: %q", line)
		}
		s.args = shellWords(line)
		if len(s.args) == 0 || s.args[0] != "spin" {
			return "", fmt.Errorf("not a spin command: %q", line)
		}
		steps = append(steps, s)
	}

	var b strings.Builder
	b.WriteString("[!node] skip 'spin node is not built in'\n")
	for i, s := range steps {
		args := s.args[1:]
		switch {
		case len(args) > 0 && args[0] == "node":
			fmt.Fprintf(&b, "exec spin node -listen /ip4/127.0.0.1/tcp/0 %s &node&\n", quoteArgs(args[1:]))
			b.WriteString("waitfile $WORK/spin/node/addr 60\nenvfile NODE $WORK/spin/node/addr\n")
			continue
		case len(args) > 0 && args[0] == "watch":
			continue
		}
		if s.home != "" {
			fmt.Fprintf(&b, "env HOME=$WORK%s\n", s.home)
		}
		if s.stdin != "" {
			fmt.Fprintf(&files, "-- stdin%d --\n%s", i, s.stdin)
			fmt.Fprintf(&b, "stdin stdin%d\n", i)
		}
		neg := ""
		if len(s.stderr) > 0 {
			neg = "! "
		}
		fmt.Fprintf(&b, "%sexec spin %s\n", neg, quoteArgs(args))
		for _, l := range s.stderr {
			fmt.Fprintf(&b, "stderr '^%s$'\n", strings.ReplaceAll(regexp.QuoteMeta(l), "'", "''"))
		}
		if neg == "" && len(args) == 2 && args[0] == "get" && made[path.Base(args[1])] {
			// A file read back to stdout is the one stored.
			fmt.Fprintf(&b, "cmp stdout %s\n", path.Base(args[1]))
		}
		if s.home != "" {
			b.WriteString("env HOME=$WORK\n")
		}
	}
	b.WriteString("kill -INT node\nwait node\n\n")
	b.WriteString(files.String())
	return b.String(), nil
}

// quoteArgs quotes args for a testscript line, leaving $NODE to expand.
func quoteArgs(args []string) string {
	var q []string
	for _, a := range args {
		if a == "$NODE" {
			q = append(q, a)
			continue
		}
		q = append(q, "'"+strings.ReplaceAll(a, "'", "''")+"'")
	}
	return strings.Join(q, " ")
}
