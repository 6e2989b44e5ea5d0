package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Members of a three-member key cluster that also host their operators'
// trees are stopped and started again: each in turn with SIGTERM, each in
// turn with SIGKILL, then all three at once. After every restart each
// tree is served whole, through its own node and through the others, and
// no node reports a log as damaged: a log whose writers' keys the
// restarted member's replica cannot tell yet waits for the cluster, it is
// not damaged.
func TestMemberRestartServesTrees(t *testing.T) {
	nodes, opA := keyCluster(t)
	ops := []*spinUser{opA, nodes[1].op, nodes[2].op}
	for _, op := range ops[1:] {
		// Their configurations, from keyCluster, were made through nodes
		// that were not members yet.
		op.run("signup")
	}
	for i, op := range ops {
		put := op.command("put", "-", "@/notes.txt")
		put.Stdin = strings.NewReader(fmt.Sprintf("notes of operator %d\n", i))
		if out, err := put.CombinedOutput(); err != nil {
			t.Fatalf("operator %d: spin put: %v\n%s", i, err, out)
		}
	}
	check := func(when string) {
		t.Helper()
		for i, op := range ops {
			want := fmt.Sprintf("notes of operator %d\n", i)
			deadline := time.Now().Add(90 * time.Second)
			for {
				out, err := op.command("get", "@/notes.txt").CombinedOutput()
				if err == nil && string(out) == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: operator %d's file through its node 90s on: %v\n%s", when, i, err, out)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		for _, n := range nodes {
			b, err := os.ReadFile(n.log)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "damaged") {
				t.Fatalf("%s: node %s reports damage:\n%s", when, n.home(), b)
			}
		}
	}
	check("before any restart")
	stop := func(n *clusterNode, sig syscall.Signal) {
		n.cmd.Process.Signal(sig)
		n.wait()
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for i, n := range nodes {
			stop(n, sig)
			n.start(t)
			check(fmt.Sprintf("member %d restarted after %v", i, sig))
		}
	}
	for _, n := range nodes {
		stop(n, syscall.SIGKILL)
	}
	for _, n := range nodes {
		n.start(t)
	}
	check("all three members killed and restarted at once")
}

// A node started with -keyserver A follows the cluster's members: after A
// leaves, new users still sign up, store and read through it, and it
// hands new clients the verifier key of a member that signs.
func TestKeyServerNodeFollowsMembers(t *testing.T) {
	nodes, opA := keyCluster(t)
	d := &clusterNode{op: newSpinUser(t), args: []string{"-keyserver", nodes[0].addr}}
	d.start(t)
	if out := opA.out("key", "leave"); !strings.HasPrefix(out, "left:") {
		t.Fatalf("spin key leave printed:\n%s", out)
	}
	ann := newSpinUser(t)
	ann.run("init", "-node", d.addr, "ann@example.com")
	// Tries back off: every sign-up that reaches a member counts
	// against the hourly limit of 20 from one address, failed or not.
	deadline := time.Now().Add(90 * time.Second)
	for pause := 500 * time.Millisecond; ; pause = min(2*pause, 8*time.Second) {
		out, err := ann.command("signup").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin signup through a -keyserver node 90s after its key server left the cluster: %v\n%s", err, out)
		}
		time.Sleep(pause)
	}
	put := ann.command("put", "-", "@/f")
	put.Stdin = strings.NewReader("after A left\n")
	if out, err := put.CombinedOutput(); err != nil {
		t.Fatalf("spin put: %v\n%s", err, out)
	}
	if out := ann.out("get", "@/f"); out != "after A left\n" {
		t.Fatalf("spin get: %q", out)
	}
}

// A hung sequencer (SIGSTOP: a process that holds its connections and
// answers nothing) does not hold a read for the whole call timeout: the
// read goes on to the mirror within hostReadTimeout.
func TestHungSequencerReadsFromMirror(t *testing.T) {
	k := &clusterNode{op: newSpinUser(t)}
	k.start(t)
	a := &clusterNode{op: newSpinUser(t), args: []string{"-keyserver", k.addr}}
	a.start(t)
	b := &clusterNode{op: newSpinUser(t), args: []string{"-keyserver", k.addr}}
	b.start(t)
	ann := newSpinUser(t)
	ann.run("init", "-node", a.addr, "ann@example.com")
	ann.run("signup")
	ann.run("user", "-dirs", a.addr+","+b.addr)
	put := ann.command("put", "-", "@/f")
	put.Stdin = strings.NewReader("read me\n")
	if out, err := put.CombinedOutput(); err != nil {
		t.Fatalf("spin put: %v\n%s", err, out)
	}
	waitLogCopied(t, a, b, "ann@example.com")
	// Ann's client goes through B, as if she took her laptop elsewhere.
	ann.run("init", "-node", b.addr, "ann@example.com")
	a.cmd.Process.Signal(syscall.SIGSTOP)
	defer a.cmd.Process.Signal(syscall.SIGCONT)
	start := time.Now()
	out, err := ann.command("get", "@/f").CombinedOutput()
	if err != nil || string(out) != "read me\n" {
		t.Fatalf("spin get with the sequencer hung: %v\n%s", err, out)
	}
	// Well under the 30 s a call waits for one host.
	if d := time.Since(start); d > 25*time.Second {
		t.Errorf("spin get with the sequencer hung took %v", d)
	}
}

// waitLogCopied waits until the mirror to holds as much of user's log as
// from does.
func waitLogCopied(t *testing.T, from, to *clusterNode, user string) {
	t.Helper()
	fromLog := filepath.Join(from.home(), "dirlogs", user+".log")
	toLog := filepath.Join(to.home(), "dirlogs", user+".log")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		fi, _ := os.Stat(fromLog)
		ti, _ := os.Stat(toLog)
		if fi != nil && ti != nil && ti.Size() >= fi.Size() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mirror %s did not copy %s's log within a minute", to.addr, user)
		}
	}
}
