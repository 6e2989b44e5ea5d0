package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev/p2p/p2ptest/netns"
	"spindle.dev/pack"
)

// TestReadmeFamily runs the walkthrough of a family on three machines
// (docs/family.md), line by line as it is written: each machine (A, B, C) is a
// network namespace of its own with a home of its own, joined to the
// others through a fourth that routes between them. "X$ LINE" runs LINE
// with sh on machine X; a line ending in & starts a node and waits for
// its address, which $X then stands for; "X$ ^C" interrupts X's node, as
// Ctrl-C in its terminal would. $ANN, $BOB and $CAT are the public keys
// of the users whose configurations the machines hold. Comment lines "#
// TEXT" after a command give what it prints: "spin: …" lines its
// diagnostics (it must then fail, printing lines that match, … standing
// for anything), other lines its output (it must succeed). A command
// that should succeed and does not is tried again for up to a minute,
// as a person would, since nodes settle in the background (a join, a
// mirror catching up).
func TestReadmeFamily(t *testing.T) {
	if testing.Short() || runNode == nil {
		t.Skip("starts real nodes in network namespaces")
	}
	netns.Check(t)
	spin, err := exec.LookPath("spin") // testscript puts this binary on PATH as spin.
	if err != nil {
		t.Skip("spin is not on PATH:", err)
	}
	data, err := os.ReadFile("../../docs/family.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n```\n")
	if !ok {
		t.Fatal("docs/family.md has no code block")
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatal("docs/family.md's code block does not end")
	}

	// The network: A, B and C on links of their own to a router.
	prefix := netns.Prefix()
	router := netns.New(t, prefix+"r")
	router.Forward(t)
	type machine struct {
		ns   *netns.NS
		home string
		node *exec.Cmd
		addr string
		log  *bytes.Buffer
	}
	machines := map[string]*machine{}
	for i, name := range []string{"A", "B", "C"} {
		m := &machine{ns: netns.New(t, prefix+strings.ToLower(name)), home: t.TempDir()}
		netns.Veth(t, m.ns, fmt.Sprintf("10.77.%d.2/24", i+1), router, fmt.Sprintf("10.77.%d.1/24", i+1))
		m.ns.Route(t, "default", fmt.Sprintf("10.77.%d.1", i+1))
		machines[name] = m
	}
	t.Cleanup(func() {
		for name, m := range machines {
			if m.node != nil {
				m.node.Process.Signal(syscall.SIGINT)
				m.node.Wait()
			}
			if t.Failed() && m.log != nil {
				t.Logf("node %s:\n%s", name, m.log)
			}
		}
	})
	env := func(m *machine) []string {
		e := []string{"HOME=" + m.home, "PATH=" + filepath.Dir(spin) + ":/usr/bin:/bin"}
		for name, o := range machines {
			e = append(e, name+"="+o.addr)
		}
		for _, u := range []string{"ann", "bob", "cat"} {
			for _, o := range machines {
				if keys, err := pack.Load(filepath.Join(o.home, "spin", "keys")); err == nil && strings.HasPrefix(string(keys.UserName()), u+"@") {
					e = append(e, strings.ToUpper(u)+"="+string(keys.PublicKey()))
				}
			}
		}
		return e
	}
	startNode := func(m *machine, line string) {
		m.log = new(bytes.Buffer)
		os.Remove(filepath.Join(m.home, "spin", "node", "addr"))
		m.node = m.ns.Command("env", append(env(m), "sh", "-c", "exec "+line)...)
		m.node.Stdout, m.node.Stderr = m.log, m.log
		if err := m.node.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for m.addr = ""; m.addr == ""; time.Sleep(50 * time.Millisecond) {
			b, _ := os.ReadFile(filepath.Join(m.home, "spin", "node", "addr"))
			for l := range strings.Lines(string(b)) {
				if strings.HasPrefix(l, "/ip4/10.77.") && strings.Contains(l, "/tcp/") {
					m.addr = strings.TrimSpace(l)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not start within 2 minutes:\n%s", line, m.log)
			}
		}
	}

	type step struct {
		m      *machine
		name   string
		line   string
		stdout []string
		stderr []string
	}
	var steps []*step
	for _, l := range strings.Split(block, "\n") {
		if want, ok := strings.CutPrefix(l, "#   "); ok {
			if len(steps) == 0 {
				t.Fatalf("output before any command: %q", l)
			}
			s := steps[len(steps)-1]
			if strings.HasPrefix(want, "spin: ") {
				s.stderr = append(s.stderr, want)
			} else {
				s.stdout = append(s.stdout, want)
			}
			continue
		}
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		name, line, ok := strings.Cut(l, "$ ")
		if !ok || machines[name] == nil {
			t.Fatalf("a line on no machine: %q", l)
		}
		steps = append(steps, &step{m: machines[name], name: name, line: line})
	}
	if len(steps) < 25 {
		t.Fatalf("the walkthrough has only %d steps", len(steps))
	}

	for _, s := range steps {
		switch {
		case s.line == "^C":
			s.m.node.Process.Signal(syscall.SIGINT)
			s.m.node.Wait()
			s.m.node = nil
			continue
		case strings.HasSuffix(s.line, " &"):
			startNode(s.m, strings.TrimSuffix(s.line, " &"))
			continue
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var stdout, stderr bytes.Buffer
			cmd := s.m.ns.Command("env", append(env(s.m), "sh", "-c", s.line)...)
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			problem := ""
			switch {
			case len(s.stderr) > 0 && err == nil:
				problem = "succeeded, but the walkthrough shows it failing"
			case len(s.stderr) > 0:
				if !linesMatch(stderr.String(), s.stderr) {
					problem = "printed other diagnostics than the walkthrough shows"
				}
			case err != nil:
				problem = fmt.Sprintf("failed: %v", err)
			case len(s.stdout) > 0 && stdout.String() != strings.Join(s.stdout, "\n")+"\n":
				problem = "printed other output than the walkthrough shows"
			}
			if problem == "" {
				break
			}
			if len(s.stderr) > 0 || time.Now().After(deadline) {
				t.Fatalf("%s$ %s\n%s\nstdout:\n%s\nstderr:\n%s\nwant stdout %q, stderr %q", s.name, s.line, problem, stdout.String(), stderr.String(), s.stdout, s.stderr)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// linesMatch reports whether got has, in order, a line matching each of
// want, where … in want stands for any text.
func linesMatch(got string, want []string) bool {
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	i := 0
	for _, w := range want {
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(w), "…", ".*") + "$")
		for i < len(lines) && !re.MatchString(lines[i]) {
			i++
		}
		if i == len(lines) {
			return false
		}
		i++
	}
	return true
}
