package node

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/p2p"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// spin node starts, writes its addresses (the socket first) to HOME/addr
// and to stdout, serves until told to stop, and stops cleanly.
func TestRunCommand(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- RunCommand(ctx, []string{"-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "ann@example.com"}, &stdout, &stderr, testLogger(t), nil)
	}()
	addrFile := filepath.Join(home, "addr")
	deadline := time.Now().Add(time.Minute)
	var data []byte
	for {
		var err error
		if data, err = os.ReadFile(addrFile); err == nil {
			break
		}
		select {
		case c := <-code:
			t.Fatalf("spin node exited with %d before writing its addresses: %s", c, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no addr file after a minute")
		}
		time.Sleep(20 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) < 2 || !p2p.IsLocalAddr(spindle.PeerAddr(lines[0])) || !strings.HasPrefix(lines[1], "/ip4/127.0.0.1/tcp/") {
		t.Fatalf("addr file:\n%s\nwant the socket first, then the TCP address", data)
	}
	if fi, err := os.Stat(addrFile); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("addr file mode %v, %v; want 0644 so that other users can find the node", fi.Mode().Perm(), err)
	}
	waitOutput := time.Now().Add(10 * time.Second)
	for stdout.String() != string(data) && time.Now().Before(waitOutput) {
		time.Sleep(10 * time.Millisecond)
	}
	if stdout.String() != string(data) {
		t.Errorf("printed %q, want the addr file's %q", stdout.String(), data)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Fatalf("exit %d after a clean stop: %s", c, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("spin node did not stop within a minute of being told to")
	}
}

// Bad command lines exit with 2 and say what is wrong; a node that cannot
// start exits with 1 and says why.
func TestRunCommandErrors(t *testing.T) {
	busy := startNode(t, t.TempDir())
	defer busy.Close()
	busyAddr := strings.TrimSuffix(string(busy.DialAddr()), "/p2p/"+busy.Host().ID().String())
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-nosuch"}, 2, "flag provided but not defined: -nosuch"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-writers", "ann"}, 1, `bad writer "ann"`},
		{[]string{"-listen", "not-a-multiaddr"}, 1, "not-a-multiaddr"},
		{[]string{"-listen", busyAddr}, 1, "spin: hint: another program (another spin node?) listens on an address in " + busyAddr},
	} {
		args := append([]string{"-home", t.TempDir()}, c.args...)
		var got int
		var stderr string
		if c.code == 1 && strings.Contains(c.want, "listens on") {
			// libp2p leaks the host that cannot listen: see runInChild.
			got, stderr = runInChild(t, args)
		} else {
			var out, errOut syncBuffer
			got = RunCommand(context.Background(), args, &out, &errOut, testLogger(t), nil)
			stderr = errOut.String()
		}
		if got != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("spin node %q: exit %d, stderr %q; want exit %d and %q", c.args, got, stderr, c.code, c.want)
		}
	}
	var stdout, stderr syncBuffer
	if got := RunCommand(context.Background(), []string{"-help"}, &stdout, &stderr, nil, nil); got != 0 || stdout.String() != NodeUsage {
		t.Errorf("spin node -help: exit %d, printed %q", got, stdout.String())
	}
}
