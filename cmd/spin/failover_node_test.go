package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

// peerOf returns the peer ID at the end of a node's address.
func peerOf(addr string) string {
	return addr[strings.LastIndex(addr, "/p2p/")+len("/p2p/"):]
}

// spinFails runs spin as u, fails the test unless it exits 1, and returns
// its stderr.
func (u *spinUser) spinFails(args ...string) string {
	u.t.Helper()
	cmd := u.command(args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != exitFailure {
		u.t.Fatalf("spin %s: %v (exit %d), want exit %d; stderr:\n%s", strings.Join(args, " "), err, code, exitFailure, stderr.String())
	}
	return stderr.String()
}

// hostHeads returns the head of ann's log that each of her dir hosts
// offers, through a client of her own that shares her heads file.
func (u *spinUser) hostHeads(ctx context.Context) []client.HostHead {
	u.t.Helper()
	st := &State{Home: u.home, Stderr: &strings.Builder{}, NewClient: dialClient}
	c, err := st.Client(ctx)
	if err != nil {
		u.t.Fatalf("dial: %v\n%s", err, st.Stderr)
	}
	defer c.Close()
	heads, _, err := c.(*client.Client).DirHostHeads(ctx, c.User())
	if err != nil {
		u.t.Fatal(err)
	}
	return heads
}

// waitCaughtUp waits until the dir host at addr offers the newest head of
// ann's log that ann's client has seen.
func (u *spinUser) waitCaughtUp(addr string) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		for _, h := range u.hostHeads(ctx) {
			if samePeer(h.Host, spindle.PeerAddr(addr)) && h.Err == nil && h.CaughtUp {
				return
			}
		}
		if ctx.Err() != nil {
			u.t.Fatalf("dir host %s has not caught up 2 minutes on", addr)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// oneLine checks that every diagnostic line of stderr is plain text: no
// escaped newline (a multi-line cause quoted) and no trailing period.
func oneLine(t *testing.T, what, stderr string) {
	t.Helper()
	if strings.Contains(stderr, `\n`) {
		t.Errorf("%s: stderr carries an escaped newline:\n%s", what, stderr)
	}
	for line := range strings.Lines(stderr) {
		if !strings.HasPrefix(line, "spin: ") {
			t.Errorf("%s: stderr line %q does not start with \"spin: \":\n%s", what, line, stderr)
		}
	}
}

// Issue 24, item 6, with real processes: ann's dir hosts are node 1
// (sequencer) and node 2 (mirror); she reaches the network through node 3,
// re-pointed there with spin init -node without new keys. While node 1 is
// down a write fails naming it, the mirrors that hold her newest head and
// the command to run; spin user -failover refuses while node 2 lags
// behind the newest head her client has seen, and once node 2 has caught
// up moves her writes to it.
func TestFailoverProcesses(t *testing.T) {
	op3, op1, op2 := newSpinUser(t), newSpinUser(t), newSpinUser(t)
	n3 := &clusterNode{op: op3}
	n3.start(t)
	n1 := &clusterNode{op: op1, args: []string{"-keyserver", n3.addr}}
	n2 := &clusterNode{op: op2, args: []string{"-keyserver", n3.addr}}
	n1.start(t)
	n2.start(t)

	ann := newSpinUser(t)
	ann.run("init", "-node", n1.addr, "-keyserver", n3.addr, "ann@example.com")
	key := ann.publicKey()
	ann.run("signup", "-dir", n1.addr+","+n2.addr)

	// Re-pointed at node 3: the same keys, key log and heads.
	out := ann.out("init", "-node", n3.addr, "ann@example.com")
	if ann.publicKey() != key {
		t.Fatalf("spin init -node on an existing config made new keys:\n%s", out)
	}
	if strings.Contains(out, "recovery secret") {
		t.Errorf("spin init -node on an existing config printed a recovery secret:\n%s", out)
	}
	cfg, err := ReadConfig(filepath.Join(ann.home, "spin", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Node) != n3.addr {
		t.Fatalf("after spin init -node, the config names node %s, want %s", cfg.Node, n3.addr)
	}

	file := filepath.Join(ann.home, "f")
	put := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		ann.run("put", file, "@/"+name)
	}
	put("one", "written while node 1 sequenced")
	ann.waitCaughtUp(n2.addr)

	// Node 2 misses a write: it is down while node 1 takes it.
	n2.cmd.Process.Kill()
	n2.cmd.Wait()
	put("two", "written while node 2 was down")
	n1.cmd.Process.Kill()
	n1.cmd.Wait()
	n2.start(t)

	if err := os.WriteFile(file, []byte("three"), 0o600); err != nil {
		t.Fatal(err)
	}
	stderr := ann.spinFails("put", file, "@/three")
	oneLine(t, "put while the sequencer is down and the mirror lags", stderr)
	for _, want := range []string{"sequencer", peerOf(n1.addr), "cannot be reached", peerOf(n2.addr)} {
		if !strings.Contains(stderr, want) {
			t.Errorf("put while the sequencer is down: stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "run: spin user -failover") {
		t.Errorf("put while the only mirror lags tells to run spin user -failover:\n%s", stderr)
	}

	stderr = ann.spinFails("user", "-failover")
	t.Logf("spin user -failover while node 2 lags:\n%s", stderr)
	oneLine(t, "user -failover while the mirror lags", stderr)
	for _, want := range []string{peerOf(n2.addr), "behind"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("spin user -failover while node 2 lags: stderr lacks %q:\n%s", want, stderr)
		}
	}
	if u := ann.out("user"); strings.Index(u, peerOf(n1.addr)) > strings.Index(u, peerOf(n2.addr)) {
		t.Fatalf("a refused failover changed the dir hosts:\n%s", u)
	}

	// Node 1 comes back long enough for node 2 to catch up, then goes.
	n1.start(t)
	ann.waitCaughtUp(n2.addr)
	n1.cmd.Process.Kill()
	n1.cmd.Wait()

	stderr = ann.spinFails("put", file, "@/three")
	t.Logf("spin put while node 1 is down:\n%s", stderr)
	oneLine(t, "put while the sequencer is down", stderr)
	for _, want := range []string{"sequencer", peerOf(n1.addr), "cannot be reached", "run: spin user -failover"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("put while the sequencer is down: stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !regexp.MustCompile(`dir host ` + peerOf(n2.addr) + `[^\n]* holds? the newest`).MatchString(stderr) {
		t.Errorf("put while the sequencer is down does not say that node 2 holds the newest head:\n%s", stderr)
	}

	out = ann.out("user", "-failover")
	if i, j := strings.Index(out, peerOf(n2.addr)), strings.Index(out, peerOf(n1.addr)); i < 0 || j < 0 || i > j {
		t.Fatalf("spin user -failover printed\n%s\nwant node 2 first, then node 1", out)
	}
	put("three", "written on node 2")
	for name, want := range map[string]string{"one": "written while node 1 sequenced", "two": "written while node 2 was down", "three": "written on node 2"} {
		if got := ann.out("get", "@/"+name); got != want {
			t.Errorf("spin get @/%s after the failover: %q, want %q", name, got, want)
		}
	}
}
