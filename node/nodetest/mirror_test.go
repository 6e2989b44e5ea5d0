package nodetest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	dirhost "spindle.dev/dirlog/host"
	"spindle.dev/pack"
)

// logLen returns how many entries of user's log the node process p holds
// on disk (0 if none), reading the file beside the running process.
func logLen(t *testing.T, p *procNode, user spindle.UserName) int {
	t.Helper()
	ctx := context.Background()
	store, err := dirhost.DiskStore(filepath.Join(p.home, "dirlogs"))
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

// Issue 24, item 3, with real processes: ann's mirror, node 2, is killed
// with SIGKILL, and while it is down ann writes (and the nudge of that
// write gives up) and its log is cut back to nothing (as a repair that
// keeps no entry leaves it). Started again, node
// 2 holds node 1's log within seconds with no further write, and spin node
// status on it reports it a mirror of ann's log at node 1's head, lag 0,
// with no pull error.
func TestMirrorProcsCatchUpWithoutWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three spin node processes and restarts one")
	}
	n3 := startProcNode(t, "node3")
	boot := string(n3.addr)
	n1 := startProcNode(t, "node1", "-bootstrap", boot, "-keyserver", boot)
	n2 := startProcNode(t, "node2", "-bootstrap", boot, "-keyserver", boot)
	const annU = spindle.UserName("ann@example.com")
	annKeys, _, err := pack.Generate(annU)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := dialProc(t, n1, annKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}
	ann := dialProc(t, n3, annKeys)
	if err := ann.SetDirHosts(ctx, []spindle.PeerAddr{n1.addr, n2.addr}); err != nil {
		t.Fatal(err)
	}
	put := func(name string) {
		t.Helper()
		if _, err := ann.Put(ctx, spindle.PathName("ann@example.com/"+name), strings.NewReader(name), spindle.EEPack, nil); err != nil {
			t.Fatalf("ann puts %s: %v", name, err)
		}
	}
	put("before")
	waitSameLog(t, annU, 2, n1, n2)

	n2.kill()
	put("while-down")
	// Node 1 tries to nudge node 2 about that write for up to 10 s
	// (node.nudgeTimeout), and would reach it once it is back: let that
	// nudge give up, so that node 2 catches up by itself or not at all.
	time.Sleep(12 * time.Second)
	logFile := filepath.Join(n2.home, "dirlogs", string(annU)+".log")
	if err := os.Truncate(logFile, int64(len("SPDLOG1\n")+5)); err != nil {
		t.Fatal(err)
	}
	want := logLen(t, n1, annU)
	if err := os.Remove(filepath.Join(n2.home, "addr")); err != nil {
		t.Fatal(err)
	}
	n2 = startProcNodeIn(t, "node2", n2.home, "-bootstrap", boot, "-keyserver", boot)
	start := time.Now()
	for got := logLen(t, n2, annU); got != want; got = logLen(t, n2, annU) {
		if time.Since(start) > 15*time.Second {
			t.Fatalf("node 2 holds %d entries of ann's log 15 s after its restart, node 1 %d, with no write since", got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("node 2 caught up %v after its restart", time.Since(start).Round(time.Millisecond))
	if got := logLen(t, n1, annU); got != want {
		t.Fatalf("node 1's log went from %d to %d entries: a write nudged node 2", want, got)
	}

	bin, err := spinBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(string(n1.addr), "/p2p/")
	line := fmt.Sprintf("log:                ann@example.com: mirror, head %d, lag 0 behind %s (at %d when it last answered)", want, id, want)
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := exec.Command(bin, "node", "status", "-home", n2.home).CombinedOutput()
		if err != nil {
			t.Fatalf("spin node status: %v: %s", err, out)
		}
		if strings.Contains(string(out), line) && strings.Contains(string(out), "logs hosted:        1\n") && !strings.Contains(string(out), "log error:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin node status on node 2 does not list %q and no error:\n%s", line, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
