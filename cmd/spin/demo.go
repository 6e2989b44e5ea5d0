package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const demoUsage = `Usage:
    spin demo [-keep] [-network]

Shows Spindle at work on one machine: starts a node in a temporary
directory, makes two users, ann and bob, each with a home of their own,
stores a file as ann, lets bob try to read it, shares it with bob through
an Access file, and reads it as bob. Each step is printed as the spin
command that does it, followed by its output. Everything is removed at the
end unless -keep is given.

With -network it shows the peer-to-peer part: three nodes, A, B and C,
whose operators ann, cat and bob make them a key cluster; ann's tree is
sequenced on A and mirrored on B; she shares a file with bob, who reads it
through C; A is switched off; bob still reads, and ann moves her writes
to B.

Options:
    -keep       keep the temporary directory, to look at or to go on with
    -network    three nodes, one switched off (default false)
    -h, -help   print this text

Example:
    $ spin demo
    Spindle demo: one node and two users, in /tmp/spin-demo-....
    ...
`

// demoNodeWait bounds the time the demo waits for its node to be ready.
const demoNodeWait = 2 * time.Minute

func runDemoCmd(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	keep := flags.Bool("keep", false, "")
	network := flags.Bool("network", false, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("want no arguments, got %d", flags.NArg())
	}
	if runNode == nil {
		return errors.New("spin demo needs spin node, which is not built in")
	}
	dir, err := os.MkdirTemp("", "spin-demo-")
	if err != nil {
		return st.fail("", err)
	}
	if *keep {
		defer fmt.Fprint(st.Stdout, carryOn(dir))
	} else {
		defer os.RemoveAll(dir)
	}
	if *network {
		return runDemoNetwork(ctx, st, dir)
	}
	d := &demo{st: st, dir: dir}
	fmt.Fprintf(st.Stdout, "Spindle demo: one node and two users, in %s.\n\n", dir)
	stop, err := d.startNode(ctx)
	if err != nil {
		return err
	}
	err = d.steps(ctx)
	if serr := stop(); serr != nil && err == nil {
		err = serr
	}
	if err != nil {
		if log := d.nodeLog.String(); log != "" {
			fmt.Fprintf(st.Stderr, "spin: demo: the node's log:\n%s", indent(log))
		}
		return err
	}
	fmt.Fprintf(st.Stdout, "\nbob read ann's file, decrypted with a key ann's client wrapped for him when\nthe Access file named him. The node in the middle stored only ciphertext.\n")
	return nil
}

// A demo runs the demonstration's steps.
type demo struct {
	st      *State
	dir     string
	node    string            // The node's address.
	nodeLog syncBuffer        // What the node printed.
	out     bytes.Buffer      // Output of the step running.
	vars    map[string]string // $NAME in a step's arguments, and its value (demonet.go).
}

// startNode runs spin node in the demo's directory until stop is called,
// and waits until it has written its addresses.
func (d *demo) startNode(ctx context.Context) (stop func() error, err error) {
	home := filepath.Join(d.dir, "node")
	args := []string{"-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "all"}
	fmt.Fprintf(d.st.Stdout, "Starting a node: spin node %s\n", strings.Join(args, " "))
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	nst := &State{Stdin: strings.NewReader(""), Stdout: &d.nodeLog, Stderr: &d.nodeLog, NewClient: d.st.NewClient, cmd: "node",
		Log: slog.New(slog.NewTextHandler(&d.nodeLog, &slog.HandlerOptions{Level: d.level()}))}
	go func() { done <- runNode(nctx, nst, args) }()
	stop = func() error {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				return fmt.Errorf("the node exited with status %d", code)
			}
			return nil
		case <-time.After(30 * time.Second):
			return errors.New("the node did not stop within 30s")
		}
	}
	addrFile := filepath.Join(home, "addr")
	deadline := time.After(demoNodeWait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if addr := localNodeAddr(addrFile); addr != "" {
			d.node = addr
			fmt.Fprintf(d.st.Stdout, "The node is ready at %s\n", addr)
			return stop, nil
		}
		select {
		case code := <-done:
			cancel()
			d.st.errorf("the node exited with status %d before it was ready", code)
			fmt.Fprintf(d.st.Stderr, "%s", indent(d.nodeLog.String()))
			return nil, errFailed
		case <-deadline:
			stop()
			return nil, fmt.Errorf("the node was not ready within %v", demoNodeWait)
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// level returns the level of the demo's logger, warn if it has none.
func (d *demo) level() slog.Level {
	for _, l := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn} {
		if d.st.Log != nil && d.st.Log.Enabled(context.Background(), l) {
			return l
		}
	}
	return slog.LevelWarn
}

// A demoStep is one spin command run as one user.
type demoStep struct {
	user  string // ann or bob.
	say   string // What the step shows, printed before it.
	args  []string
	stdin string
	code  int // The exit code the step must have.

	// For spin demo -network:
	quiet   bool   // Print the output only if the step fails.
	retry   bool   // Try again for up to demoRetry, as the network settles.
	want    string // Text the output must have.
	capture string // Set this variable to the key in spin user's output.
}

// steps runs the demonstration.
func (d *demo) steps(ctx context.Context) error {
	const note = "Meet at noon by the river.\n"
	steps := []demoStep{
		{user: "ann", say: "ann makes her keys and configuration; her client will talk to the node.",
			args: []string{"init", "-node", "$NODE", "ann@example.com"}},
		{user: "ann", say: "She registers her key, and the node as her directory's host, with the key cluster.",
			args: []string{"signup"}},
		{user: "bob", say: "bob, with a home of his own, does the same.",
			args: []string{"init", "-node", "$NODE", "bob@example.com"}},
		{user: "bob", args: []string{"signup"}},
		{user: "ann", say: "ann stores a file. Her client encrypts it before it leaves her.",
			args: []string{"mkdir", "@/shared"}},
		{user: "ann", args: []string{"put", "-", "@/shared/plans.txt"}, stdin: note},
		{user: "ann", args: []string{"ls", "-l", "@/shared"}},
		{user: "ann", args: []string{"get", "@/shared/plans.txt"}},
		{user: "bob", say: "bob cannot read it: ann has not shared it.",
			args: []string{"get", "ann@example.com/shared/plans.txt"}, code: exitFailure},
		{user: "ann", say: "ann grants bob read with an Access file; her client wraps the file's key for him.",
			args: []string{"put", "-", "@/shared/Access"}, stdin: "read: bob@example.com\n"},
		{user: "ann", args: []string{"whichaccess", "@/shared/plans.txt"}},
		{user: "ann", args: []string{"info", "@/shared/plans.txt"}},
		{user: "bob", say: "Now bob can read it.",
			args: []string{"get", "ann@example.com/shared/plans.txt"}},
		{user: "bob", say: "But he may not write there.",
			args: []string{"put", "-", "ann@example.com/shared/bob.txt"}, stdin: "hello\n", code: exitFailure},
	}
	for _, s := range steps {
		if err := d.step(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// step runs one step and prints it with its output.
func (d *demo) step(ctx context.Context, s demoStep) error {
	out := d.st.Stdout
	if s.say != "" {
		fmt.Fprintf(out, "\n%s\n", s.say)
	}
	shown := strings.Join(s.args, " ")
	args := make([]string, len(s.args))
	for i, a := range s.args {
		args[i] = strings.ReplaceAll(a, "$NODE", d.node)
		for _, v := range d.varNames() {
			args[i] = strings.ReplaceAll(args[i], "$"+v, d.vars[v])
		}
	}
	if in := strings.TrimSuffix(s.stdin, "\n"); strings.Contains(in, "\n") {
		fmt.Fprintf(out, "%s$ printf '%s\\n' | spin %s\n", s.user, strings.ReplaceAll(in, "\n", `\n`), shown)
	} else if s.stdin != "" {
		fmt.Fprintf(out, "%s$ echo %q | spin %s\n", s.user, in, shown)
	} else {
		fmt.Fprintf(out, "%s$ spin %s\n", s.user, shown)
	}
	deadline := time.Now().Add(demoRetry)
	for {
		d.out.Reset()
		st := &State{
			Stdin:      strings.NewReader(s.stdin),
			Stdout:     &d.out,
			Stderr:     &d.out,
			Context:    ctx,
			Home:       filepath.Join(d.dir, s.user),
			Log:        d.st.Log,
			NewClient:  d.st.NewClient,
			Trust:      d.st.Trust,
			isTerminal: func(io.Writer) bool { return false },
		}
		code := run(args, st)
		ok := code == s.code && strings.Contains(d.out.String(), s.want)
		if !ok && s.retry && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		if !s.quiet || !ok {
			io.WriteString(out, indent(d.out.String()))
		}
		if !ok {
			if code != s.code {
				d.st.errorf("step %q exited with status %d, want %d", "spin "+shown, code, s.code)
			} else {
				d.st.errorf("step %q did not print %q", "spin "+shown, s.want)
			}
			return errFailed
		}
		if s.capture != "" {
			return d.capture(s.capture, d.out.String())
		}
		return nil
	}
}

// carryOn says where spin demo -keep left everything and how to go on
// from there: the node's home, and each user's configuration.
func carryOn(dir string) string {
	return fmt.Sprintf(`
Everything is kept in %[1]s. To carry on, start the node again:
    spin node -home %[1]s/node -writers all
and, in another terminal, act as ann or bob:
    export SPIN_CONFIG=%[1]s/ann/spin/config
    spin ls @/shared
`, dir)
}

// indent indents every line of s by four spaces.
func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "\n" && l != "" {
			b.WriteString("    ")
		}
		b.WriteString(l)
	}
	if !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
	return b.String()
}

// A syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
