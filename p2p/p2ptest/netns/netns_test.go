//go:build linux

package netns_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"spindle.dev/p2p/p2ptest/netns"
)

// The tests run small programs inside namespaces as this test binary
// again, with NETNS_TEST_ROLE set.
func TestMain(m *testing.M) {
	switch os.Getenv("NETNS_TEST_ROLE") {
	case "":
		os.Exit(m.Run())
	case "echo":
		os.Exit(echo(os.Getenv("NETNS_TEST_ADDR")))
	case "dial":
		os.Exit(dial(os.Getenv("NETNS_TEST_ADDR")))
	default:
		fmt.Fprintln(os.Stderr, "unknown NETNS_TEST_ROLE")
		os.Exit(2)
	}
}

// echo serves one connection, echoing lines, and says "listening" first.
func echo(addr string) int {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening")
	c, err := ln.Accept()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	io.Copy(c, c)
	return 0
}

// dial connects to addr, and prints the shortest of 5 round trips of a
// line, or "refused: …" if it cannot connect within 3 s.
func dial(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		fmt.Printf("refused: %v\n", err)
		return 0
	}
	defer c.Close()
	r := bufio.NewReader(c)
	best := time.Hour
	for range 5 {
		start := time.Now()
		fmt.Fprintln(c, "ping")
		if _, err := r.ReadString('\n'); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		best = min(best, time.Since(start))
	}
	fmt.Printf("rtt %d\n", best.Microseconds())
	return 0
}

// start runs a role in ns, and waits for its first line.
func start(t *testing.T, ns *netns.NS, role, addr string) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(exe)
	cmd.Env = append(os.Environ(), "NETNS_TEST_ROLE="+role, "NETNS_TEST_ADDR="+addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%s in %s: %v", role, ns.Name, err)
	}
	return strings.TrimSpace(line)
}

// A delay line holds each packet for its delay: no round trip is
// shorter than twice that.
func TestDelayLine(t *testing.T) {
	netns.Check(t)
	p := netns.Prefix()
	a, b := netns.New(t, p+"a"), netns.New(t, p+"b")
	const delay = 40 * time.Millisecond
	d := netns.NewDelayLine(t, a, "10.9.0.1", b, "10.9.0.2", netns.Link{Delay: delay})
	if got := start(t, b, "echo", "10.9.0.2:7000"); got != "listening" {
		t.Fatalf("echo said %q", got)
	}
	got := start(t, a, "dial", "10.9.0.2:7000")
	var us int64
	if _, err := fmt.Sscanf(got, "rtt %d", &us); err != nil {
		t.Fatalf("dial said %q", got)
	}
	if rtt := time.Duration(us) * time.Microsecond; rtt < 2*delay {
		t.Fatalf("round trip %v through a line of %v each way", rtt, delay)
	}
	if st := d.Stats(); st.Packets < 10 || st.Dropped != 0 {
		t.Fatalf("line carried %d packets and dropped %d; want at least 10 and none", st.Packets, st.Dropped)
	}
}

// A delay line drops the share of packets it is told to.
func TestDelayLineLoss(t *testing.T) {
	netns.Check(t)
	p := netns.Prefix()
	a, b := netns.New(t, p+"a"), netns.New(t, p+"b")
	d := netns.NewDelayLine(t, a, "10.9.0.1", b, "10.9.0.2", netns.Link{Loss: 0.2})
	// TCP retransmits what is lost: each connection works, slower. One
	// connection is some 17 packets, which a line dropping 20% carries
	// whole one time in 40; ten carry all of theirs one time in 10^16.
	for i := range 10 {
		addr := fmt.Sprintf("10.9.0.2:%d", 7000+i)
		if got := start(t, b, "echo", addr); got != "listening" {
			t.Fatalf("echo said %q", got)
		}
		if got := start(t, a, "dial", addr); !strings.HasPrefix(got, "rtt ") && !strings.HasPrefix(got, "refused") {
			t.Fatalf("dial said %q", got)
		}
		if d.Stats().Dropped > 0 {
			return
		}
	}
	st := d.Stats()
	t.Fatalf("line carried %d packets and dropped none of them at 20%% loss", st.Packets)
}

// Behind a masquerading router, a namespace reaches out but nothing
// reaches in, even with a route to it.
func TestMasquerade(t *testing.T) {
	netns.Check(t)
	netns.Need(t, "nft")
	p := netns.Prefix()
	home, router, out := netns.New(t, p+"h"), netns.New(t, p+"r"), netns.New(t, p+"o")
	_, routerOut := netns.Veth(t, out, "10.20.0.2/24", router, "10.20.0.1/24")
	netns.Veth(t, router, "192.168.7.1/24", home, "192.168.7.2/24")
	home.Route(t, "default", "192.168.7.1")
	router.Masquerade(t, routerOut)
	out.Route(t, "192.168.7.0/24", "10.20.0.1") // A route in, which the router refuses.

	if got := start(t, out, "echo", "10.20.0.2:7000"); got != "listening" {
		t.Fatalf("echo said %q", got)
	}
	if got := start(t, home, "dial", "10.20.0.2:7000"); !strings.HasPrefix(got, "rtt ") {
		t.Fatalf("from behind the NAT, dial out said %q", got)
	}
	if got := start(t, home, "echo", "192.168.7.2:7000"); got != "listening" {
		t.Fatalf("echo said %q", got)
	}
	if got := start(t, out, "dial", "192.168.7.2:7000"); !strings.HasPrefix(got, "refused") {
		t.Fatalf("from outside, dial in said %q; want it refused", got)
	}
}
