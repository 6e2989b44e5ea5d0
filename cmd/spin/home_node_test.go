package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/replica"
	"spindle.dev/client"
	"spindle.dev/node/nodetest"
	"spindle.dev/pack"
)

// With real processes: node D is stopped while ann writes files through
// A, so their blocks' copies go to the nodes then up. When D comes back,
// it gets every block it is among the three nearest nodes to, without a
// further write.
func TestReturnedNodeHoldsItsShareProcess(t *testing.T) {
	a := &clusterNode{op: newSpinUser(t)}
	a.start(t)
	nodes := []*clusterNode{a}
	for range 3 {
		n := &clusterNode{op: newSpinUser(t), args: []string{"-keyserver", a.addr}}
		n.start(t)
		nodes = append(nodes, n)
	}
	d := nodes[3]
	ann := newSpinUser(t)
	ann.run("init", "-node", a.addr, "ann@example.com")
	ann.run("signup")
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()

	const files = 16
	c, ids := putRandomFiles(t, ann, a, nodes, files, 100<<10, 24)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var share []spindle.Ref // The blocks D is home to.
	for i := range files {
		e, err := c.Lookup(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range e.Blocks {
			home, err := replica.Home(b.Ref, ids, replica.DefaultReplicas)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range home {
				if h == ids[3] {
					share = append(share, b.Ref)
				}
			}
		}
	}
	if len(share) == 0 {
		t.Fatal("D is home to none of the blocks: choose other data")
	}

	d.start(t)
	var missing []spindle.Ref
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		missing = missing[:0]
		for _, ref := range share {
			if !holdsBlock(t, d.home(), ref) {
				missing = append(missing, ref)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(d.log)
			t.Fatalf("a minute after it came back, D lacks %d of the %d blocks it is home to:\n%s", len(missing), len(share), log)
		}
	}
}

// holdsBlock reports whether the node whose home is home holds the block
// ref.
func holdsBlock(t *testing.T, home string, ref spindle.Ref) bool {
	t.Helper()
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := nodetest.FindBlock(home, d)
	return file != ""
}

// With real processes: a node started with -holdlimit 1 (MiB) refuses the
// copies other nodes push past its limit, says so in spin node status,
// and the pushing node places them on other nodes, so that every block
// still has three copies.
func TestHoldLimitProcess(t *testing.T) {
	a := &clusterNode{op: newSpinUser(t)}
	a.start(t)
	nodes := []*clusterNode{a}
	for i := range 4 {
		args := []string{"-keyserver", a.addr}
		if i == 3 {
			args = append(args, "-holdlimit", "1")
		}
		n := &clusterNode{op: newSpinUser(t), args: args}
		n.start(t)
		nodes = append(nodes, n)
	}
	small := nodes[4]
	ann := newSpinUser(t)
	ann.run("init", "-node", a.addr, "ann@example.com")
	ann.run("signup")
	const files = 24 // 6 MiB: the limited node is home to about 3.6 MiB of it.
	c, ids := putRandomFiles(t, ann, a, nodes, files, 256<<10, 9)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	held, home := 0, 0
	for i := range files {
		e, err := c.Lookup(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i)), true)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range e.Blocks {
			copies := 0
			for _, n := range nodes {
				if holdsBlock(t, n.home(), b.Ref) {
					copies++
				}
			}
			if copies < replica.DefaultReplicas {
				t.Errorf("block %s of f%d has %d copies, want %d", b.Ref, i, copies, replica.DefaultReplicas)
			}
			if holdsBlock(t, small.home(), b.Ref) {
				held += int(b.Size)
			}
			if h, err := replica.Home(b.Ref, ids, replica.DefaultReplicas); err != nil {
				t.Fatal(err)
			} else if slices.Contains(h, ids[4]) {
				home += int(b.Size)
			}
		}
	}
	if held > 2<<20 {
		t.Errorf("the node with -holdlimit 1 holds %d bytes of ann's blocks", held)
	}
	status := small.op.out("node", "status", "-home", small.home())
	if !strings.Contains(status, "hold limit:") {
		t.Errorf("spin node status of the node with a hold limit:\n%s", status)
	}
	// Whether it refused any depends on the peer IDs, made anew each run.
	if refused := strings.Contains(status, "copies refused for it since the start:"); refused != (home > 1<<20) {
		t.Errorf("the node with a limit of 1 MiB is home to %d bytes of ann's blocks; spin node status:\n%s", home, status)
	}
}

// putRandomFiles has ann put files files of size random bytes (from seed)
// as @/f0, @/f1, … through her node a, and returns a client of hers on a
// and the peer IDs of nodes, in order.
func putRandomFiles(t *testing.T, ann *spinUser, a *clusterNode, nodes []*clusterNode, files, size int, seed uint64) (*client.Client, []string) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, 1))
	for i := range files {
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rnd.Uint32())
		}
		put := ann.command("put", "-packing", "plain", "-", fmt.Sprintf("@/f%d", i))
		put.Stdin = bytes.NewReader(data)
		if out, err := put.CombinedOutput(); err != nil {
			t.Fatalf("spin put: %v\n%s", err, out)
		}
	}
	keys, err := pack.Load(filepath.Join(ann.home, "spin", "keys"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: spindle.PeerAddr(a.addr), KeyLog: filepath.Join(t.TempDir(), "keylog"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.addr[strings.Index(n.addr, "/p2p/")+len("/p2p/"):])
	}
	return c, ids
}
