package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/node/client"
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
}

func (n *clusterNode) home() string { return filepath.Join(n.op.home, "spin", "node") }

// start starts the node, on its old address if it had one, and waits
// until it has written its addresses.
func (n *clusterNode) start(t *testing.T) {
	t.Helper()
	listen := "/ip4/127.0.0.1/tcp/0"
	if n.addr != "" {
		listen, _, _ = strings.Cut(n.addr, "/p2p/")
	}
	os.Remove(filepath.Join(n.home(), "addr"))
	args := append([]string{"node", "-home", n.home(), "-listen", listen, "-writers", "all"}, n.args...)
	cmd := n.op.command(args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), "node.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr, cmd.Stdout = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.cmd = cmd
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if b, err := os.ReadFile(filepath.Join(n.home(), "addr")); err == nil && len(b) > 0 && strings.HasSuffix(string(b), "\n") {
			for line := range strings.Lines(string(b)) {
				if a := strings.TrimSpace(line); !p2p.IsLocalAddr(spindle.PeerAddr(a)) && strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
					n.addr = a
					break
				}
			}
			if n.addr != "" {
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("node %s did not start within 2 minutes:\n%s", n.home(), log)
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

// Three spin node processes form a key cluster with spin key join; the
// leader is killed with SIGKILL; a new user signs up through a survivor;
// the killed node restarts, and every member serves the new record with a
// proof that a client checking the key log accepts.
func TestKeyClusterProcesses(t *testing.T) {
	opA, opB, opC, dave := newSpinUser(t), newSpinUser(t), newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	a.start(t)
	b := &clusterNode{op: opB, args: []string{"-keyserver", a.addr}}
	c := &clusterNode{op: opC, args: []string{"-keyserver", a.addr}}
	b.start(t)
	c.start(t)
	nodes := []*clusterNode{a, b, c}

	// A's operator signs up and becomes the cluster's first operator, and
	// admits B's and C's operators, who join their nodes.
	opA.run("init", "-node", a.addr, "opa@example.com")
	opA.run("signup")
	opA.run("key", "init")
	for i, op := range []*spinUser{opB, opC} {
		op.run("init", "-node", nodes[i+1].addr, fmt.Sprintf("op%c@example.com", 'b'+i))
		opA.run("key", "admit", string(op.publicKey()))
	}
	// A join by a node operator nobody admitted is refused.
	stranger := newSpinUser(t)
	stranger.run("init", "-node", b.addr, "eve@example.com")
	if out, err := stranger.command("key", "join").CombinedOutput(); err == nil {
		t.Fatalf("spin key join by an operator nobody admitted succeeded:\n%s", out)
	}
	opB.run("key", "join")
	opC.run("key", "join")
	members := opA.out("key", "members")
	if got := strings.Count(members, "member:"); got != 3 || strings.Count(members, "verifier:") != 3 {
		t.Fatalf("spin key members after two joins: %d members:\n%s", got, members)
	}
	t.Logf("spin key members:\n%s", members)

	// The leader is killed.
	leader := leaderOf(members)
	var killed *clusterNode
	var survivor *clusterNode
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
	killed.cmd.Wait()
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
	for _, n := range nodes {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			err := auditThrough(t, daveKeys, n.addr)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s does not serve dave's record with a proof 2 minutes on: %v", n.addr, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// auditThrough checks dave's record through the node at addr with a
// client that checks the key log, trusting that node's member: the
// record must be there, proved.
func auditThrough(t *testing.T, keys *pack.Keys, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(addr), KeyLog: filepath.Join(t.TempDir(), "keylog"), Logger: slog.New(slog.DiscardHandler)})
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
