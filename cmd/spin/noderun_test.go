package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node"
	"spindle.dev/p2p"
)

// testLogger logs to stderr with -v, else nowhere.
func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// startNode starts a node in the test process on loopback.
func startNode(t *testing.T, home string) *node.Node {
	t.Helper()
	n, err := node.New(context.Background(), node.Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Logger: slog.New(slog.DiscardHandler), NoSocket: true})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gatewayReader is the reader spin node serves its gateway with.
func gatewayReader(t testing.TB) func(*node.Node) (node.PublicReader, error) {
	return func(n *node.Node) (node.PublicReader, error) {
		return client.NewAnonymous(client.AnonConfig{Node: n.Host().ID(), Send: n.AnonSend, Get: n.GetBlock, Verifier: n.VerifierKey(), Logger: testLogger(t)})
	}
}

// spin node starts, writes its addresses (the socket first) to HOME/addr
// and to stdout, serves until told to stop, and stops cleanly.
func TestNodeCommand(t *testing.T) {
	home := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runNodeCommand(ctx, []string{"-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "ann@example.com"}, &stdout, &stderr, testLogger(t), nil)
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
func TestNodeCommandErrors(t *testing.T) {
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
		var stdout, stderr syncBuffer
		args := append([]string{"-home", t.TempDir()}, c.args...)
		got := runNodeCommand(context.Background(), args, &stdout, &stderr, testLogger(t), nil)
		if got != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("spin node %q: exit %d, stderr %q; want exit %d and %q", c.args, got, stderr.String(), c.code, c.want)
		}
	}
	var stdout, stderr syncBuffer
	if got := runNodeCommand(context.Background(), []string{"-help"}, &stdout, &stderr, nil, nil); got != 0 || stdout.String() != nodeUsage {
		t.Errorf("spin node -help: exit %d, printed %q", got, stdout.String())
	}
}

// A -keyserver address that names no peer, or no network address, is
// refused before the node starts, with one line naming it.
func TestBadKeyServer(t *testing.T) {
	id := "12D3KooWGRUBkQ8jtu4ZKmfvTJRCaw4pEZRLbGyDFUJx7k1D5sXE"
	for _, a := range []string{"nonsense", id, "/ip4/127.0.0.1/tcp/7447"} {
		var stdout, stderr syncBuffer
		code := runNodeCommand(context.Background(), []string{"-home", t.TempDir(), "-writers", "all", "-listen", "/ip4/127.0.0.1/tcp/0", "-keyserver", a}, &stdout, &stderr, testLogger(t), nil)
		msg := stderr.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "spin: node: -keyserver: ") || !strings.Contains(msg, fmt.Sprintf("%q", a)) || !strings.Contains(msg, "key server address") {
			t.Errorf("spin node -keyserver %s: exit %d, stderr %q; want 2 and one line naming it", a, code, msg)
		}
	}
}

// A -bootstrap address that cannot be one is refused before the node
// starts, with one line naming it.
func TestBadBootstrapCommand(t *testing.T) {
	id := "12D3KooWGRUBkQ8jtu4ZKmfvTJRCaw4pEZRLbGyDFUJx7k1D5sXE"
	for _, a := range []string{
		"nonsense",
		"/ip4/127.0.0.1/tcp/7447",             // No peer ID.
		id,                                    // No address.
		"/ip4/127.0.0.1/tcpp/7447/p2p/" + id,  // Misspelt.
		"/ip4/127.0.0.1/tcp/7447/p2p/notanid", // Bad ID.
	} {
		var stdout, stderr syncBuffer
		code := runNodeCommand(context.Background(), []string{"-home", t.TempDir(), "-writers", "all", "-listen", "/ip4/127.0.0.1/tcp/0", "-bootstrap", "/ip4/127.0.0.1/tcp/1/p2p/" + id + "," + a}, &stdout, &stderr, testLogger(t), nil)
		msg := stderr.String()
		if code != 2 || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "spin: node: -bootstrap: ") || !strings.Contains(msg, fmt.Sprintf("%q", a)) {
			t.Errorf("spin node -bootstrap %s: exit %d, stderr %q; want 2 and one line naming it", a, code, msg)
		}
	}
}

// TestNodeCommandGateway starts spin node with -gateway: the gateway
// listens by the time the node says it is ready, and answers.
func TestNodeCommandGateway(t *testing.T) {
	n, base := startNodeCommand(t, t.TempDir(), []string{"-gateway", "127.0.0.1:0"}, gatewayReader(t), "gateway serving files all may read at ")
	resp, err := http.Get(base + "ann@example.com/nosuch.jpg")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("gateway: status %d for a missing file, want 404", resp.StatusCode)
	}
	n.stop(t)
	// The gateway closes with the node (at once, or very soon after).
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Get(base + "ann@example.com/nosuch.jpg")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("the gateway still answers 30 s after the node stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Every flag of spin node is in its help, and so are the limits the
// host sets.
func TestNodeUsage(t *testing.T) {
	fs, _ := newNodeFlags()
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(nodeUsage, "-"+f.Name+" ") && !strings.Contains(nodeUsage, "-"+f.Name+"=") && !strings.Contains(nodeUsage, "-"+f.Name+"\n") {
			t.Errorf("nodeUsage does not describe -%s", f.Name)
		}
	})
	l := p2p.HostLimits(0)
	mib := func(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }
	for _, want := range []string{
		fmt.Sprintf("keeps %d to %d\nconnections (above %d it closes the least used down to %d", l.ConnsLow, l.ConnsHigh, l.ConnsHigh, l.ConnsLow),
		fmt.Sprintf("at most %s,\n%s for one peer and %s for one stream", mib(l.Memory), mib(l.PeerMemory), mib(l.StreamMemory)),
		fmt.Sprintf("at most %d\nconnections (%d inbound), %d streams with one peer and %d sockets", l.Conns, l.ConnsInbound, l.PeerStreams, l.FDs),
		fmt.Sprintf("at most %d reservations,\n                     %d from one IP address, and %d relayed connections a peer", p2p.RelayReservations, p2p.RelayReservationsPerIP, p2p.RelayCircuits),
		fmt.Sprintf("up to\n%d peers", node.MaxRemembered),
		"sparing\nthose younger than a minute",
	} {
		if !strings.Contains(nodeUsage, want) {
			t.Errorf("nodeUsage does not say %q", want)
		}
	}
	if p2p.ConnGrace != time.Minute {
		t.Errorf("nodeUsage says a minute of grace; the host gives %v", p2p.ConnGrace)
	}
}

// spin node -metrics serves the node's metrics at /metrics where told,
// and stops serving them when the node stops.
func TestNodeCommandMetrics(t *testing.T) {
	n, url := startNodeCommand(t, t.TempDir(), []string{"-metrics", "127.0.0.1:0"}, nil, "metrics for Prometheus at ")
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "spindle_raft_leader 1") || !strings.Contains(string(body), "libp2p_") {
		t.Fatalf("GET %s: %d\n%.2000s", url, resp.StatusCode, body)
	}
	n.stop(t)
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Error("metrics still served after the node stopped")
	}
}

// -quota and -rate read sizes as people write them, and refuse what they
// cannot read, saying what they want.
func TestParseQuotaAndRate(t *testing.T) {
	q, def, err := parseQuotas("ann@example.com=5G, *=500M,bob@example.com=1.5g")
	if err != nil || def != 500<<20 || q["ann@example.com"] != 5<<30 || q["bob@example.com"] != 3<<29 {
		t.Errorf("parseQuotas: %v, default %d, %v", q, def, err)
	}
	up, down, err := parseRate("up=2M,down=10MiB")
	if err != nil || up != 2<<20 || down != 10<<20 {
		t.Errorf("parseRate up, down: %d %d %v", up, down, err)
	}
	if up, down, err := parseRate("4096"); err != nil || up != 4096 || down != 4096 {
		t.Errorf("parseRate of one size: %d %d %v", up, down, err)
	}
	for _, bad := range []string{"ann@example.com", "ann@example.com=lots", "ann=5G", "*=-1M", "*=0"} {
		if _, _, err := parseQuotas(bad); err == nil {
			t.Errorf("parseQuotas(%q) took it", bad)
		}
	}
	for _, bad := range []string{"sideways=2M", "up=fast", "2X"} {
		if _, _, err := parseRate(bad); err == nil {
			t.Errorf("parseRate(%q) took it", bad)
		}
	}
	if c, err := parseCounts("20, 50,0", 3); err != nil || c[0] != 20 || c[1] != 50 || c[2] != 0 {
		t.Errorf("parseCounts: %v %v", c, err)
	}
	for _, bad := range []string{"1,2", "1,2,x", "1,-2,3"} {
		if _, err := parseCounts(bad, 3); err == nil {
			t.Errorf("parseCounts(%q) took it", bad)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := runNodeCommand(context.Background(), []string{"-home", t.TempDir(), "-quota", "ann@example.com=lots"}, &stdout, &stderr, testLogger(t), nil); code != 2 || !strings.Contains(stderr.String(), "-quota: \"lots\" is not a size") {
		t.Errorf("spin node -quota with a bad size: exit %d, %s", code, stderr.String())
	}
}

// A runningNode is spin node run in this process by runNodeCommand.
type runningNode struct {
	cancel context.CancelFunc
	code   chan int
	stderr *syncBuffer
}

// startNodeCommand runs spin node with args in home until the test ends
// or stop is called, waits until it is ready, and returns what its
// standard error says after the text said.
func startNodeCommand(t *testing.T, home string, args []string, gateway func(*node.Node) (node.PublicReader, error), said string) (*runningNode, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var stdout syncBuffer
	n := &runningNode{cancel: cancel, code: make(chan int, 1), stderr: new(syncBuffer)}
	go func() {
		n.code <- runNodeCommand(ctx, append([]string{"-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "ann@example.com"}, args...), &stdout, n.stderr, testLogger(t), gateway)
	}()
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := os.Stat(filepath.Join(home, "addr")); err == nil {
			_, rest, ok := strings.Cut(n.stderr.String(), said)
			if !ok {
				t.Fatalf("the node is ready and does not say %q: %s", said, n.stderr.String())
			}
			v, _, _ := strings.Cut(rest, "\n")
			return n, v
		}
		select {
		case c := <-n.code:
			t.Fatalf("spin node exited with %d: %s", c, n.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the node was not ready after a minute")
		}
	}
}

// stop stops the node and checks that it exited cleanly.
func (n *runningNode) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case c := <-n.code:
		if c != 0 {
			t.Errorf("spin node exited %d: %s", c, n.stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("spin node did not stop")
	}
}
