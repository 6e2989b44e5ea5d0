package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A clusterNode is a spin node process run by its operator, a spinUser
// whose home holds the node's home (~/spin/node), so that spin key join
// reaches it.
type clusterNode struct {
	op   *spinUser
	args []string // Of spin node, after -listen.
	addr string   // Its network address, kept across restarts.
	cmd  *exec.Cmd
	log  string // The file its output of the latest start goes to.
	// exited is closed when the process of the latest start has exited.
	exited chan struct{}
	// listen, if set, is the address of the first start (later starts
	// take the address the node had).
	listen string
	// sysProc, if set, is given to each of its processes (TestChaos
	// starts each node in a cgroup of its own, to cut its links).
	sysProc *syscall.SysProcAttr
}

// wait waits until the process of the node's latest start has exited.
func (n *clusterNode) wait() { <-n.exited }

func (n *clusterNode) home() string { return filepath.Join(n.op.home, "spin", "node") }

// start starts the node, on its old address if it had one, and waits
// until it has written its addresses.
func (n *clusterNode) start(t testing.TB) {
	t.Helper()
	if err := n.launch(t); err != nil {
		t.Fatal(err)
	}
	if err := n.waitReady(2 * time.Minute); err != nil {
		t.Fatal(err)
	}
}

// launch starts the node's process, on its old address if it had one,
// without waiting for it to be ready (see waitReady). It may be called
// from any goroutine.
func (n *clusterNode) launch(t testing.TB) error {
	listen := "/ip4/127.0.0.1/tcp/0"
	if n.listen != "" {
		listen = n.listen
	}
	if n.addr != "" {
		listen, _, _ = strings.Cut(n.addr, "/p2p/")
	}
	os.Remove(filepath.Join(n.home(), "addr"))
	args := append([]string{"node", "-home", n.home(), "-listen", listen, "-writers", "all"}, n.args...)
	cmd := n.op.command(args...)
	cmd.SysProcAttr = n.sysProc
	logf, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stderr, cmd.Stdout = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start spin node in %s: %w", n.home(), err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	n.cmd, n.log, n.exited = cmd, logf.Name(), exited
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return nil
}

// waitReady waits at most limit until the node launched last has written
// its addresses, and takes its loopback TCP address as the node's.
func (n *clusterNode) waitReady(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(filepath.Join(n.home(), "addr")); err == nil && len(b) > 0 && strings.HasSuffix(string(b), "\n") {
			for line := range strings.Lines(string(b)) {
				if a := strings.TrimSpace(line); !p2p.IsLocalAddr(spindle.PeerAddr(a)) && strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
					n.addr = a
					break
				}
			}
			if n.addr != "" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(n.log)
			return fmt.Errorf("node %s did not start within %v:\n%s", n.home(), limit, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// out runs spin as u and returns its output, failing the test unless it
// exits 0.
func (u *spinUser) out(args ...string) string {
	u.t.Helper()
	out, err := u.command(args...).CombinedOutput()
	if err != nil {
		u.t.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// publicKey returns the public key of u, made by spin init.
func (u *spinUser) publicKey() spindle.PublicKey {
	u.t.Helper()
	keys, err := pack.Load(filepath.Join(u.home, "spin", "keys"))
	if err != nil {
		u.t.Fatal(err)
	}
	return keys.PublicKey()
}

// leaderOf returns the member that spin key members names as leader.
func leaderOf(members string) string {
	sc := bufio.NewScanner(strings.NewReader(members))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "member:" && strings.HasPrefix(f[2], "(leader") {
			return f[1]
		}
	}
	return ""
}

// keyCluster starts three spin node processes, each run by its own
// operator, and makes them a key cluster with spin key join: A's
// operator signs up, becomes the first operator and admits the others'
// keys. It checks on the way that a node operator nobody admitted cannot
// join.
func keyCluster(t testing.TB) (nodes []*clusterNode, opA *spinUser) {
	return keyClusterWith(t, nil)
}

// keyClusterWith is keyCluster, with prep, if not nil, called on each
// node before it first starts.
func keyClusterWith(t testing.TB, prep func(*clusterNode)) (nodes []*clusterNode, opA *spinUser) {
	opA, opB, opC := newSpinUser(t), newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	b := &clusterNode{op: opB}
	c := &clusterNode{op: opC}
	if prep != nil {
		prep(a)
		prep(b)
		prep(c)
	}
	a.start(t)
	b.args = []string{"-keyserver", a.addr}
	c.args = []string{"-keyserver", a.addr}
	b.start(t)
	c.start(t)
	nodes = []*clusterNode{a, b, c}

	opA.run("init", "-node", a.addr, "opa@example.com")
	opA.run("signup")
	opA.run("key", "init")
	opB.run("init", "-node", b.addr, "opb@example.com")
	opC.run("init", "-node", c.addr, "opc@example.com")
	// Before the operators admit B's operator, B cannot join.
	if out, err := opB.command("key", "join").CombinedOutput(); err == nil {
		t.Fatalf("spin key join by an operator nobody admitted succeeded:\n%s", out)
	} else if !strings.Contains(string(out), "spin key admit") {
		t.Fatalf("spin key join by an operator nobody admitted: %v, without the hint to admit the key:\n%s", err, out)
	}
	if out := opA.out("key", "members"); strings.Count(out, "member:") != 1 {
		t.Fatalf("a refused join changed the members:\n%s", out)
	}
	opA.run("key", "admit", string(opB.publicKey()))
	opA.run("key", "admit", string(opC.publicKey()))
	opB.run("key", "join")
	opC.run("key", "join")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		// A's replica may apply the last join a heartbeat after the leader.
		members := opA.out("key", "members")
		if strings.Count(members, "member:") == 3 && strings.Count(members, "verifier:") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin key members a minute after two joins:\n%s", members)
		}
	}
	return nodes, opA
}

// killLeader kills the cluster's leader with SIGKILL and returns it and a
// survivor.
func killLeader(t testing.TB, nodes []*clusterNode, opA *spinUser) (killed, survivor *clusterNode) {
	t.Helper()
	var members, leader string
	for deadline := time.Now().Add(2 * time.Minute); leader == ""; time.Sleep(100 * time.Millisecond) {
		// Ask a node that runs: A's own may be the one killed before.
		for _, n := range nodes {
			if out, err := n.op.command("key", "members").CombinedOutput(); err == nil {
				members = string(out)
				break
			}
		}
		leader = leaderOf(members)
		if time.Now().After(deadline) {
			t.Fatalf("no leader 2 minutes on:\n%s", members)
		}
	}
	for _, n := range nodes {
		if strings.HasSuffix(n.addr, "/p2p/"+leader) {
			killed = n
		} else if survivor == nil {
			survivor = n
		}
	}
	if killed == nil {
		t.Fatalf("no node is the leader %q:\n%s", leader, members)
	}
	killed.cmd.Process.Kill()
	killed.wait()
	return killed, survivor
}

// Three spin node processes form a key cluster with spin key join; the
// leader is killed with SIGKILL; a new user signs up through a survivor;
// the killed node restarts, and every member serves the new record with a
// proof that a client checking the key log accepts.
func TestKeyClusterProcesses(t *testing.T) {
	nodes, opA := keyCluster(t)
	dave := newSpinUser(t)
	killed, survivor := killLeader(t, nodes, opA)
	at := time.Now()

	// A new user signs up through a survivor, once the others elect a leader.
	dave.run("init", "-node", survivor.addr, "dave@example.com")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := dave.command("signup").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin signup through a survivor still fails 2 minutes after the leader was killed: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("signed up %v after the leader was killed", time.Since(at).Round(time.Millisecond))

	// The killed node restarts; every member serves dave's record with a
	// proof the client accepts.
	killed.start(t)
	daveKeys, err := pack.Load(filepath.Join(dave.home, "spin", "keys"))
	if err != nil {
		t.Fatal(err)
	}
	// One client, whose key log persists, goes through every member in
	// turn: it trusted the cluster once, and takes each member's heads
	// because a majority of the members its log names signed them.
	shared := filepath.Join(t.TempDir(), "keylog")
	for _, n := range nodes {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := auditThrough(t, daveKeys, n.addr, "")
			if err == nil {
				err = auditThrough(t, daveKeys, n.addr, shared)
			}
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s does not serve dave's record with a proof 2 minutes on: %v", n.addr, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	// C's operator takes C out; C then serves keys from the others.
	c := nodes[2]
	if out := c.op.out("key", "leave"); !strings.HasPrefix(out, "left:") {
		t.Fatalf("spin key leave printed:\n%s", out)
	}
	cID := c.addr[strings.Index(c.addr, "/p2p/")+len("/p2p/"):]
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		// A's replica may apply the removal a heartbeat after the leader.
		members := opA.out("key", "members")
		if strings.Count(members, "member:") == 2 && !strings.Contains(members, cID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin key members a minute after C left:\n%s", members)
		}
	}
	if err := auditThrough(t, daveKeys, c.addr, ""); err != nil {
		t.Fatalf("dave's record through C after it left: %v", err)
	}
	// The client that followed the cluster follows the removal too, and
	// the heads it takes are signed by both remaining members.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		err := auditThrough(t, daveKeys, nodes[0].addr, shared)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the following client after C left: %v", err)
		}
	}
	// A head of a tree from after the removal (holding a user who signed
	// up since) is signed by the two remaining members, and not by C.
	gus := newSpinUser(t)
	gus.run("init", "-node", nodes[1].addr, "gus@example.com")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, err := gus.command("signup").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin signup after C left: %v\n%s", err, out)
		}
	}
	gusKeys, err := pack.Load(filepath.Join(gus.home, "spin", "keys"))
	if err != nil {
		t.Fatal(err)
	}
	head := keyHeadThrough(t, gusKeys, nodes[1].addr, shared)
	if len(head.Signers) != 2 || slices.Contains(head.Signers, "spindle-keyraft/"+cID) {
		t.Errorf("head after C left is signed by %v, want the two remaining members", head.Signers)
	}
}

// keyHeadThrough returns the key cluster's head as a client with key log
// keylog checks it through the node at addr.
func keyHeadThrough(t *testing.T, keys *pack.Keys, addr, keylog string) *client.KeyHead {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(addr), KeyLog: keylog, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := c.KeyHead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Under the domain policy a new name needs its domain admin's grant:
// spin signup without one is refused, and spin signup -request, spin key
// grant and spin signup -grant register it. A grant by another key is
// refused.
func TestKeyClusterDomainGrant(t *testing.T) {
	nodes, opA := keyCluster(t)
	opA.run("key", "policy", "domain")
	opA.run("key", "domain", "add", "example.org", string(opA.publicKey()))
	erin := newSpinUser(t)
	erin.run("init", "-node", nodes[1].addr, "erin@example.org")
	if out, err := erin.command("signup").CombinedOutput(); err == nil || !strings.Contains(string(out), "countersignature") {
		t.Fatalf("spin signup without a grant under the domain policy: %v\n%s", err, out)
	}
	stdout := func(u *spinUser, args ...string) string {
		t.Helper()
		out, err := u.command(args...).Output()
		if err != nil {
			t.Fatalf("spin %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	req := strings.TrimSpace(stdout(erin, "signup", "-request"))
	grantOf := func(out string) string {
		for line := range strings.Lines(out) {
			if g, ok := strings.CutPrefix(line, "grant:"); ok {
				return strings.TrimSpace(g)
			}
		}
		t.Fatalf("spin key grant printed no grant:\n%s", out)
		return ""
	}
	// nodes[1]'s operator is no admin of example.org.
	bad := grantOf(stdout(nodes[1].op, "key", "grant", req))
	if out, err := erin.command("signup", "-grant", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "not by the admin key") {
		t.Fatalf("spin signup with a grant by another key: %v\n%s", err, out)
	}
	good := grantOf(stdout(opA, "key", "grant", req))
	erin.run("signup", "-grant", good)
	if out := erin.out("user"); !strings.Contains(out, "erin@example.org") {
		t.Fatalf("spin user after the granted signup:\n%s", out)
	}

	// The admin key is removed: spin key members no longer lists it, and
	// the admin's grants are refused.
	opA.run("key", "domain", "remove", "example.org")
	if out := opA.out("key", "members"); strings.Contains(out, "example.org") {
		t.Fatalf("spin key members after removing the domain's key:\n%s", out)
	}
	finn := newSpinUser(t)
	finn.run("init", "-node", nodes[2].addr, "finn@example.org")
	freq := strings.TrimSpace(stdout(finn, "signup", "-request"))
	if out, err := finn.command("signup", "-grant", grantOf(stdout(opA, "key", "grant", freq))).CombinedOutput(); err == nil || !strings.Contains(string(out), "no admin key") {
		t.Fatalf("spin signup with a grant after the domain's key was removed: %v\n%s", err, out)
	}
}

// auditThrough checks dave's record through the node at addr with a
// client that checks the key log keylog or, if that is "", a new one,
// trusting that node's member: the record must be there, proved.
func auditThrough(t *testing.T, keys *pack.Keys, addr, keylog string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if keylog == "" {
		keylog = filepath.Join(t.TempDir(), "keylog")
	}
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(addr), KeyLog: keylog, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer c.Close()
	rep, err := c.KeyAudit(ctx, "dave@example.com")
	if err != nil {
		return err
	}
	if len(rep.Versions) != 1 || len(rep.Problems()) != 0 {
		return fmt.Errorf("audit of dave's record: %+v", rep)
	}
	return nil
}

// BenchmarkKeyFailover measures the key cluster's failover: from the
// leader's SIGKILL to the first registration that a survivor accepts, with
// a client in this process retrying at once. Each round kills the leader
// of three spin node processes and restarts it afterwards.
func BenchmarkKeyFailover(b *testing.B) {
	nodes, opA := keyCluster(b)
	var worst, total time.Duration
	for i := 0; b.Loop(); i++ {
		killed, survivor := killLeader(b, nodes, opA)
		at := time.Now()
		keys, _, err := pack.Generate(spindle.UserName(fmt.Sprintf("user%d@example.com", i)))
		if err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(2 * time.Minute); ; {
			if err := signupThrough(b, keys, survivor.addr); err == nil {
				break
			} else if time.Now().After(deadline) {
				b.Fatalf("no registration accepted 2 minutes after the leader was killed: %v", err)
			}
		}
		d := time.Since(at)
		total += d
		worst = max(worst, d)
		b.StopTimer()
		killed.start(b)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/failover")
	b.ReportMetric(float64(worst.Milliseconds()), "ms-worst")
}

// signupThrough signs up the user of keys through the node at addr.
func signupThrough(t testing.TB, keys *pack.Keys, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(addr), KeyLog: filepath.Join(t.TempDir(), "keylog"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Signup(ctx)
}
