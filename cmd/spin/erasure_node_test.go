package main

import (
	"bytes"
	"crypto/rand"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
)

// With real processes: six nodes started with -ec 4+2, a 64 MiB file put
// through the first, two other nodes killed with SIGKILL, and the file
// read back byte for byte by its writer through a third node. With six
// nodes, each block's six shards lie on six distinct nodes, so every
// node killed held a shard of every block; the nodes hold 1.5 times the
// file between them, within 10 %.
func TestErasureSurvivesTwoNodesKilled(t *testing.T) {
	ops := make([]*spinUser, 6)
	for i := range ops {
		ops[i] = newSpinUser(t)
	}
	nodes := make([]*clusterNode, len(ops))
	nodes[0] = &clusterNode{op: ops[0], args: []string{"-ec", "4+2", "-cache", "0"}}
	nodes[0].start(t)
	var wg sync.WaitGroup
	for i := 1; i < len(nodes); i++ {
		nodes[i] = &clusterNode{op: ops[i], args: []string{"-keyserver", nodes[0].addr, "-ec", "4+2", "-cache", "0"}}
		wg.Go(func() { nodes[i].start(t) })
	}
	wg.Wait()

	ann := newSpinUser(t)
	ann.run("init", "-node", nodes[0].addr, "ann@example.com")
	ann.run("signup")
	data := make([]byte, 64<<20)
	rand.Read(data)
	file := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ann.run("put", file, "@/big")
	info, err := ann.command("info", "@/big").Output()
	if err != nil || !bytes.Contains(info, []byte("4+2: each block stored as 6 shards, any 4 of which give it back")) || bytes.Count(info, []byte("shard 5: ")) != 64 {
		t.Fatalf("spin info @/big: %v\n%s", err, info)
	}

	var held int64
	perNode := make([]int64, len(nodes))
	for i, n := range nodes {
		perNode[i] = dirBytes(t, filepath.Join(n.home(), "blocks"))
		held += perNode[i]
	}
	ratio := float64(held) / float64(len(data))
	t.Logf("64 MiB file: the 6 nodes' block stores hold %d bytes, %.3fx; per node %v", held, ratio, perNode)
	if ratio < 1.5*0.9 || ratio > 1.5*1.1 {
		t.Fatalf("the nodes hold %.3fx the file, want 1.5x within 10%%", ratio)
	}
	for _, i := range []int{1, 2} {
		if perNode[i] < int64(len(data))/4*9/10 {
			t.Fatalf("node %d holds %d bytes, less than a shard of every block", i, perNode[i])
		}
		nodes[i].cmd.Process.Signal(syscall.SIGKILL)
		nodes[i].wait()
	}

	// Ann's client, pointed at node 3.
	reader := newSpinUser(t)
	if err := os.CopyFS(filepath.Join(reader.home, "spin"), os.DirFS(filepath.Join(ann.home, "spin"))); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(reader.home, "spin", "config")
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	nodeLine := regexp.MustCompile(`(?m)^node: .*$`)
	if !nodeLine.Match(b) {
		t.Fatalf("no node line in ann's config:\n%s", b)
	}
	b = nodeLine.ReplaceAll(b, []byte("node: "+nodes[3].addr))
	if err := os.WriteFile(config, b, 0o600); err != nil {
		t.Fatal(err)
	}
	get := reader.command("get", "ann@example.com/big")
	var stderr bytes.Buffer
	get.Stderr = &stderr
	got, err := get.Output()
	if err != nil {
		t.Fatalf("spin get through node 3 after nodes 1 and 2 were killed: %v\n%s", err, stderr.String())
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("spin get through node 3 returned %d bytes that differ from the 64 MiB put", len(got))
	}
}

// dirBytes returns the bytes of the regular files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
