package nodetest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/client"
	"spindle.dev/pack"
)

// logLen returns how many entries of user's log the node process p holds
// on disk (0 if none), reading the file beside the running process.
func logLen(t *testing.T, p *procNode, user spindle.UserName) int {
	t.Helper()
	ctx := context.Background()
	store, err := dirlog.DiskStore(filepath.Join(p.home, "dirlogs"))
	if err != nil {
		return 0
	}
	users, err := store.Users(ctx)
	if err != nil || !slices.Contains(users, user) {
		return 0
	}
	l, err := store.Open(ctx, user)
	if err != nil {
		return 0
	}
	defer l.Close()
	n := 0
	l.Scan(ctx, func([]byte) error { n++; return nil }) // A record being written is counted next time.
	return n
}

// waitSameLog waits until the node processes hold logs of user of one
// length, at least min.
func waitSameLog(t *testing.T, user spindle.UserName, min int, a, b *procNode) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		na, nb := logLen(t, a, user), logLen(t, b, user)
		if na == nb && na >= min {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d entries of %s's log, %s %d; want the same, at least %d", a.name, na, user, b.name, nb, min)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readEventually reads name through c until it holds want, or fails the
// test after a generous deadline.
func readEventually(t *testing.T, ctx context.Context, c *client.Client, name spindle.PathName, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := readAll(ctx, c, name)
		if err == nil && string(got) == want {
			return
		}
		if err == nil {
			t.Fatalf("read %s: %q, want %q", name, got, want)
		}
		if time.Now().After(deadline) {
			t.Fatalf("read %s: %v", name, err)
		}
		t.Logf("read %s: %v; trying again", name, err)
		time.Sleep(time.Second)
	}
}

// Issue 15 with real processes: node 3 runs the key cluster; ann's dir
// hosts are node 1 (sequencer) and node 2 (mirror). Node 1 is killed with
// SIGKILL; bob reads ann's file through node 3 from node 2; ann lists
// node 2 first and writes; node 1 restarts, catches up from node 2
// without a fork, and, listed first again, sequences ann's next write,
// which node 2 mirrors.
func TestMirrorProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three spin node processes and restarts one")
	}
	n3 := startProcNode(t, "node3")
	boot := string(n3.addr)
	n1 := startProcNode(t, "node1", "-bootstrap", boot, "-keyserver", boot)
	n2 := startProcNode(t, "node2", "-bootstrap", boot, "-keyserver", boot)
	const annU, bobU = spindle.UserName("ann@example.com"), spindle.UserName("bob@example.com")
	annKeys, _, err := pack.Generate(annU)
	if err != nil {
		t.Fatal(err)
	}
	bobKeys, _, err := pack.Generate(bobU)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := dialProc(t, n1, annKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := dialProc(t, n3, bobKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}
	ann := dialProc(t, n3, annKeys)
	if err := ann.SetDirHosts(ctx, []spindle.PeerAddr{n1.addr, n2.addr}); err != nil {
		t.Fatal(err)
	}
	put := func(name, data string) {
		t.Helper()
		if _, err := ann.Put(ctx, spindle.PathName("ann@example.com/"+name), strings.NewReader(data), spindle.EEPack, nil); err != nil {
			t.Fatalf("ann puts %s: %v", name, err)
		}
	}
	if _, err := ann.Put(ctx, "ann@example.com/Access", strings.NewReader("read: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	put("before", "written while node 1 sequenced")
	waitSameLog(t, annU, 3, n1, n2)

	n1.kill()
	bob := dialProc(t, n3, bobKeys)
	readEventually(t, ctx, bob, "ann@example.com/before", "written while node 1 sequenced")

	if err := ann.SetDirHosts(ctx, []spindle.PeerAddr{n2.addr, n1.addr}); err != nil {
		t.Fatal(err)
	}
	put("after", "written on node 2")
	readEventually(t, ctx, bob, "ann@example.com/after", "written on node 2")

	// Node 1 starts again from its home, on a new port.
	if err := os.Remove(filepath.Join(n1.home, "addr")); err != nil {
		t.Fatal(err)
	}
	n1 = startProcNodeIn(t, "node1", n1.home, "-bootstrap", boot, "-keyserver", boot)
	waitSameLog(t, annU, 4, n1, n2)

	// Listed first again, node 1 sequences; node 2 mirrors from it.
	if err := ann.SetDirHosts(ctx, []spindle.PeerAddr{n1.addr, n2.addr}); err != nil {
		t.Fatal(err)
	}
	put("back", "written on node 1 again")
	waitSameLog(t, annU, 5, n1, n2)
	for _, name := range []string{"before", "after", "back"} {
		f, err := bob.Open(ctx, spindle.PathName("ann@example.com/"+name))
		if err != nil {
			t.Errorf("bob reads %s at the end: %v", name, err)
			continue
		}
		f.Close()
	}
}
