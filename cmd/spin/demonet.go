package main

// spin demo -network: three nodes, one of them switched off.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/p2p"
)

// A demoNode is a node the demo runs.
type demoNode struct {
	name string // A, B or C.
	home string
	addr string // Its first network address.
	sock string // Its socket, for its status.
	stop func() error
}

// startDemoNode runs spin node with args in home until stop is called,
// and waits until it has written its addresses.
func (d *demo) startDemoNode(ctx context.Context, name, home string, extra ...string) (*demoNode, error) {
	args := append([]string{"-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "all"}, extra...)
	shown := strings.Join(args, " ")
	for _, v := range d.varNames() {
		if val := d.vars[v]; val != "" {
			shown = strings.ReplaceAll(shown, val, "$"+v)
		}
	}
	fmt.Fprintf(d.st.Stdout, "\n%s$ spin node %s &\n", name, strings.ReplaceAll(shown, d.dir, "$DEMO"))
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan int, 1)
	nst := &State{Stdin: strings.NewReader(""), Stdout: &d.nodeLog, Stderr: &d.nodeLog, NewClient: d.st.NewClient, cmd: "node",
		Log: slog.New(slog.NewTextHandler(&d.nodeLog, &slog.HandlerOptions{Level: d.level()})).With("node", name)}
	go func() { done <- runNode(nctx, nst, args) }()
	n := &demoNode{name: name, home: home}
	var stopped bool
	n.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				return fmt.Errorf("node %s exited with status %d", name, code)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("node %s did not stop within 30s", name)
		}
	}
	deadline := time.After(demoNodeWait)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		sock, network := localNodeAddrs(filepath.Join(home, "addr"))
		if network != "" {
			n.addr, n.sock = network, sock
			fmt.Fprintf(d.st.Stdout, "    %s\n", network)
			return n, nil
		}
		select {
		case code := <-done:
			cancel()
			return nil, fmt.Errorf("node %s exited with status %d before it was ready", name, code)
		case <-deadline:
			n.stop()
			return nil, fmt.Errorf("node %s was not ready within %v", name, demoNodeWait)
		case <-ctx.Done():
			n.stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// demoRetry bounds how long a step that waits for the network to settle
// (a join, a mirror, a node found gone) is tried again.
const demoRetry = 30 * time.Second

// network runs the demonstration of spin demo -network: three nodes on
// this machine, each with its operator; the three make the key cluster;
// ann's tree is sequenced on A and mirrored on B; A is switched off; bob
// reads through C from B and the other holders; ann moves her writes to
// B.
func (d *demo) network(ctx context.Context) (err error) {
	d.vars = map[string]string{}
	var nodes []*demoNode
	defer func() {
		for _, n := range nodes {
			if serr := n.stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	start := func(name, user string, extra ...string) (*demoNode, error) {
		home := filepath.Join(d.dir, user, "spin", "node") // Where spin key join looks.
		n, err := d.startDemoNode(ctx, name, home, extra...)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, n)
		d.vars[name] = n.addr
		return n, nil
	}
	say := func(s string) { fmt.Fprintf(d.st.Stdout, "\n%s\n", s) }
	run := func(steps ...demoStep) error {
		for _, s := range steps {
			if err := d.step(ctx, s); err != nil {
				return err
			}
		}
		return nil
	}

	say("Machine A, ann's, starts a node; on a fresh home it is a key cluster of one.")
	a, err := start("A", "ann")
	if err != nil {
		return err
	}
	if err := run(
		demoStep{user: "ann", args: []string{"init", "-node", "$A", "ann@example.com"}, quiet: true},
		demoStep{user: "ann", args: []string{"signup"}},
		demoStep{user: "ann", say: "ann becomes the operator of the key cluster.", args: []string{"key", "init"}},
	); err != nil {
		return err
	}
	say("Machines B (cat's) and C (bob's) start nodes that use A's key cluster.")
	b, err := start("B", "cat", "-keyserver", a.addr)
	if err != nil {
		return err
	}
	if _, err := start("C", "bob", "-keyserver", a.addr); err != nil {
		return err
	}
	if err := run(
		demoStep{user: "cat", args: []string{"init", "-node", "$B", "cat@example.com"}, quiet: true},
		demoStep{user: "cat", args: []string{"signup"}},
		demoStep{user: "bob", args: []string{"init", "-node", "$C", "bob@example.com"}, quiet: true},
		demoStep{user: "bob", args: []string{"signup"}},
		demoStep{user: "cat", say: "ann admits cat and bob as node operators, by the keys they read to her;\ntheir nodes join the key cluster, which then goes on while any one is off.",
			args: []string{"user"}, capture: "CAT"},
		demoStep{user: "bob", args: []string{"user"}, capture: "BOB"},
		demoStep{user: "ann", args: []string{"key", "admit", "$CAT"}},
		demoStep{user: "ann", args: []string{"key", "admit", "$BOB"}},
		demoStep{user: "cat", args: []string{"key", "join"}, retry: true},
		demoStep{user: "bob", args: []string{"key", "join"}, retry: true},
		demoStep{user: "ann", say: "ann's tree: sequenced on A, mirrored on B. She shares a file with bob.",
			args: []string{"user", "-dirs", "$A,$B"}},
		demoStep{user: "ann", args: []string{"mkdir", "@/shared"}},
		demoStep{user: "ann", args: []string{"put", "-", "@/shared/Access"}, stdin: "*: ann@example.com\nread: bob@example.com\n"},
		demoStep{user: "ann", args: []string{"put", "-", "@/shared/plans.txt"}, stdin: "Meet at noon by the river.\n"},
		demoStep{user: "bob", say: "bob reads it through his node, C.",
			args: []string{"get", "ann@example.com/shared/plans.txt"}},
	); err != nil {
		return err
	}
	say("B copies ann's tree as she writes; the demo waits until it holds all of it:")
	if err := d.waitMirror(ctx, a, b, "ann@example.com"); err != nil {
		return err
	}
	say("A goes off, as if its machine were switched off.")
	fmt.Fprintf(d.st.Stdout, "A$ ^C\n")
	if err := a.stop(); err != nil {
		return err
	}
	if err := run(
		demoStep{user: "bob", say: "bob still reads ann's file through C: the tree from B's copy, the blocks\nfrom the nodes that hold copies of them.",
			args: []string{"get", "ann@example.com/shared/plans.txt"}, retry: true},
		demoStep{user: "ann", say: "ann moves to B's node. Her writes wait for her sequencer, A; the error\nsays which copy has everything, and what to run.",
			args: []string{"init", "-node", "$B", "ann@example.com"}, quiet: true},
		demoStep{user: "ann", args: []string{"put", "-", "@/shared/tickets.txt"}, stdin: "Two tickets, platform 4.\n", code: exitFailure},
		demoStep{user: "ann", say: "She makes B her sequencer.", args: []string{"user", "-failover"}, retry: true},
		demoStep{user: "ann", args: []string{"put", "-", "@/shared/tickets.txt"}, stdin: "Two tickets, platform 4.\n", retry: true},
		demoStep{user: "bob", args: []string{"get", "ann@example.com/shared/tickets.txt"}, retry: true},
	); err != nil {
		return err
	}
	return nil
}

// waitMirror waits until node to holds user's log as far as node from.
func (d *demo) waitMirror(ctx context.Context, from, to *demoNode, user spindle.UserName) error {
	fmt.Fprintf(d.st.Stdout, "%s$ spin node status -home $DEMO/%s\n", to.name, strings.TrimPrefix(to.home, d.dir+string(filepath.Separator)))
	seq := func(n *demoNode) int64 {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := client.NodeStatus(sctx, spindle.PeerAddr(n.sock))
		if err != nil {
			return -1
		}
		for _, l := range s.Logs {
			if l.User == user {
				return l.Seq
			}
		}
		return -1
	}
	want := seq(from)
	if want < 0 {
		return fmt.Errorf("node %s does not say how far %s's log goes", from.name, user)
	}
	deadline := time.Now().Add(demoRetry)
	for {
		got := seq(to)
		if got >= want {
			fmt.Fprintf(d.st.Stdout, "    log:                %s: mirror, head %d, lag 0\n", user, got)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s holds %s's log up to %d after %v, not %d as %s does", to.name, user, got, demoRetry, want, from.name)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// varNames returns the names of the demo's variables, longest first, so
// that $CAT is not taken for $C followed by AT.
func (d *demo) varNames() []string {
	names := slices.Collect(maps.Keys(d.vars))
	slices.SortFunc(names, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return names
}

// keyLine finds the key spin user prints.
var keyLine = regexp.MustCompile(`(?m)^key:\s+(\S+)$`)

// capture sets the demo variable name from the output of a step.
func (d *demo) capture(name, out string) error {
	m := keyLine.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("no key in the output of spin user:\n%s", out)
	}
	d.vars[name] = m[1]
	return nil
}

// runDemoNetwork runs spin demo -network in dir.
func runDemoNetwork(ctx context.Context, st *State, dir string) error {
	d := &demo{st: st, dir: dir}
	// libp2p's warnings as nodes come and go belong with the nodes' log,
	// shown if the demo fails.
	p2p.LogTo(slog.New(slog.NewTextHandler(&d.nodeLog, &slog.HandlerOptions{Level: d.level()})).With("part", "libp2p"))
	fmt.Fprintf(st.Stdout, "Spindle demo: three nodes, A, B and C, on this machine, with their\noperators ann, cat and bob, in %s ($DEMO).\n", dir)
	started := time.Now()
	err := d.network(ctx)
	if err != nil {
		if log := d.nodeLog.String(); log != "" {
			fmt.Fprintf(st.Stderr, "spin: demo: the nodes' log:\n%s", indent(log))
		}
		if errors.Is(err, errFailed) {
			return err
		}
		return st.fail("", err)
	}
	fmt.Fprintf(st.Stdout, "\nA is off, yet bob read ann's files through C and ann writes through B: no\nmachine was needed by all. (%v)\n", time.Since(started).Round(100*time.Millisecond))
	return nil
}
