package nodetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// A procNode is a spin node process of a network.
type procNode struct {
	name string
	home string
	cmd  *exec.Cmd
	done chan error
	addr spindle.PeerAddr // Its TCP address on 127.0.0.1.
}

// startProcNode starts spin node with args after the usual ones and waits
// for its TCP address. The process is killed when the test ends.
func startProcNode(t *testing.T, name string, args ...string) *procNode {
	t.Helper()
	return startProcNodeIn(t, name, t.TempDir(), args...)
}

// startProcNodeIn is startProcNode with the node's home in home.
func startProcNodeIn(t *testing.T, name, home string, args ...string) *procNode {
	t.Helper()
	bin, err := spinBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &procNode{name: name, home: home, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"-log", "info", "node", "-home", p.home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "all"}, args...)...)
	p.cmd.Stdout = io.Discard
	p.cmd.Stderr = prefixWriter(t, name)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(p.kill)
	if _, err := waitAddr(filepath.Join(p.home, "addr"), p.done); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	data, err := os.ReadFile(filepath.Join(p.home, "addr"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(data)) {
		if strings.HasPrefix(line, "/ip4/127.0.0.1/tcp/") {
			p.addr = spindle.PeerAddr(strings.TrimSpace(line))
			break
		}
	}
	if p.addr == "" {
		t.Fatalf("%s printed no TCP address: %q", name, data)
	}
	return p
}

// kill kills the process with SIGKILL, if it runs, and waits for it.
func (p *procNode) kill() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
}

// dialProc dials node p as keys' user, with a key log of its own.
func dialProc(t *testing.T, p *procNode, keys *pack.Keys) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: p.addr, KeyLog: filepath.Join(t.TempDir(), "keylog"), DirHeads: filepath.Join(t.TempDir(), "dirheads")})
	if err != nil {
		t.Fatalf("dial %s as %s: %v", p.name, keys.UserName(), err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The network test of issues 13 and 14, with real processes: five spin
// node processes on 127.0.0.1 joined with -bootstrap and sharing node 1's
// key cluster through -keyserver. Ann, whose tree node 1 hosts, puts a
// 64 MiB file through node 2, the node her config names; node 2 is killed
// with SIGKILL; bob, whose config names node 5, reads the file back
// byte-identical: its blocks from the other holders, its entry from node 1
// through node 5.
func TestNetworkFiveProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five spin node processes and moves 64 MiB")
	}
	nodes := []*procNode{startProcNode(t, "node1")}
	first := string(nodes[0].addr)
	for i := 2; i <= 5; i++ {
		nodes = append(nodes, startProcNode(t, fmt.Sprintf("node%d", i), "-bootstrap", first, "-keyserver", first))
	}

	annKeys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	bobKeys, _, err := pack.Generate("bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Ann signs up with node 1, which then hosts her tree; bob with node 5.
	if err := dialProc(t, nodes[0], annKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dialProc(t, nodes[4], bobKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}

	ann := dialProc(t, nodes[1], annKeys)
	if _, err := ann.Put(ctx, "ann@example.com/Access", strings.NewReader("read: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 64<<20)
	rand.Read(data)
	want := sha256.Sum256(data)
	// Put returns once each block has its copies: on node 2 and on the
	// two other nodes nearest to it.
	if _, err := ann.Put(ctx, "ann@example.com/big", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	data = nil
	ann.Close()
	nodes[1].kill()

	bob := dialProc(t, nodes[4], bobKeys)
	// The holders' announcements may lag behind the put on a loaded
	// machine: retry until a generous deadline.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		got, err := readAll(ctx, bob, "ann@example.com/big")
		if err == nil {
			if sha256.Sum256(got) != want || len(got) != 64<<20 {
				t.Fatalf("bob read %d bytes through node 5, not the 64 MiB ann put", len(got))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bob cannot read ann's file through node 5 after node 2 was killed: %v", err)
		}
		t.Logf("read through node 5: %v; trying again", err)
		time.Sleep(2 * time.Second)
	}
}

// readAll reads a file through c.
func readAll(ctx context.Context, c *client.Client, name spindle.PathName) ([]byte, error) {
	f, err := c.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// The scenarios with every user's tree on one node and their clients on
// another, which carries their requests there (see Network). A scenario
// that damages a block in the dir host's store is left out: the client's
// own node holds a copy of each block too, and serves that one.
func TestNetworkScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two networked nodes for each scenario")
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			if sc.procsOnly || sc.name == "corrupt-block-detected" {
				t.Skip("not a scenario for a network of nodes in the test process")
			}
			env := New(t, Setup{Kind: Network, Users: []spindle.UserName{ann, bob, carl}})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			r := NewRunner(ctx, env)
			sc.run(t, r)
			if r.Failed() {
				t.Fatal(r.Diag())
			}
		})
	}
}
