//go:build linux

// Package netns builds small networks of Linux network namespaces for
// tests: namespaces joined by veth pairs or by a delay line, links slowed
// with tc's tbf, and NAT made with an nftables masquerade rule. Programs
// run inside a namespace as child processes ([NS.Command]): a socket
// belongs to the namespace of the thread that opened it, and a Go program
// opens sockets on any of its threads.
//
// Everything needs root and the ip command; tbf needs tc, NAT needs nft.
// Tests call [Check] (or [NS.Need]) first, which skips the test with a
// clear message when something is missing, and every namespace and device
// made is removed when the test ends, whether it passed or not.
package netns

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Check skips the test unless network namespaces can be made here: the
// process is root, the ip command exists, and a namespace can be created
// and removed.
func Check(t testing.TB) {
	t.Helper()
	checkOnce.Do(func() { checkErr = check() })
	if checkErr != nil {
		t.Skipf("network namespaces are not available: %v", checkErr)
	}
}

var (
	checkOnce sync.Once
	checkErr  error
)

func check() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root (uid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("no ip command (Debian package iproute2): %v", err)
	}
	name := "spchk" + randomHex(4)
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	// Running a program inside needs more rights (ip mounts /sys) than
	// making the namespace.
	errExec := run("ip", "netns", "exec", name, "true")
	if err := run("ip", "netns", "del", name); err != nil {
		return err
	}
	return errExec
}

// Need skips the test unless the commands named exist (tc for
// [NS.Rate], nft for [NS.Masquerade]).
func Need(t testing.TB, commands ...string) {
	t.Helper()
	for _, c := range commands {
		if _, err := exec.LookPath(c); err != nil {
			pkg := map[string]string{"tc": "iproute2", "nft": "nftables"}[c]
			t.Skipf("no %s command (Debian package %s): %v", c, pkg, err)
		}
	}
}

// Prefix returns a random prefix for the names of one test's
// namespaces, so that tests running at the same time on one machine
// never touch each other's.
func Prefix() string { return "sp" + randomHex(3) }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// An NS is a network namespace.
type NS struct {
	Name string
}

// New makes the namespace name with its loopback interface up; it is
// removed (with every device in it) when the test ends. Names are at
// most 15 bytes, so that devices can be named after them.
func New(t testing.TB, name string) *NS {
	t.Helper()
	if len(name) > 15 {
		t.Fatalf("netns.New: name %q is longer than 15 bytes", name)
	}
	if err := run("ip", "netns", "add", name); err != nil {
		t.Fatalf("netns.New: %v", err)
	}
	ns := &NS{Name: name}
	t.Cleanup(func() {
		if err := run("ip", "netns", "del", name); err != nil {
			t.Errorf("netns: removing namespace %s: %v", name, err)
		}
	})
	ns.Must(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Command returns a command that runs name with args in the namespace.
func (ns *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Run runs a command in the namespace and returns its error, with what
// it printed.
func (ns *NS) Run(name string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Must runs a command in the namespace and fails the test if it fails.
func (ns *NS) Must(t testing.TB, name string, args ...string) {
	t.Helper()
	if err := ns.Run(name, args...); err != nil {
		t.Fatalf("netns %s: %v", ns.Name, err)
	}
}

// Veth joins a and b with a veth pair: the device named after each
// namespace's peer gets the address given (CIDR, as 10.1.0.1/24).
// It returns the names of the devices in a and in b.
func Veth(t testing.TB, a *NS, aAddr string, b *NS, bAddr string) (aDev, bDev string) {
	t.Helper()
	// Names unique on the machine while both ends are created in the
	// root namespace, and then moved.
	aDev, bDev = "v"+randomHex(5), "v"+randomHex(5)
	if err := run("ip", "link", "add", aDev, "netns", a.Name, "type", "veth", "peer", "name", bDev, "netns", b.Name); err != nil {
		t.Fatalf("netns.Veth: %v", err)
	}
	a.Must(t, "ip", "addr", "add", aAddr, "dev", aDev)
	a.Must(t, "ip", "link", "set", aDev, "up")
	b.Must(t, "ip", "addr", "add", bAddr, "dev", bDev)
	b.Must(t, "ip", "link", "set", bDev, "up")
	return aDev, bDev
}

// Rate limits what leaves the namespace through dev to rate (as tc
// writes it: 20mbit) with a token bucket filter, which queues up to
// 200 ms of traffic and drops beyond that, as a home router does.
func (ns *NS) Rate(t testing.TB, dev, rate string) {
	t.Helper()
	Need(t, "tc")
	ns.Must(t, "tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", rate, "burst", "64kb", "latency", "200ms")
}

// Route adds a route in the namespace: to is a prefix or "default".
func (ns *NS) Route(t testing.TB, to, via string) {
	t.Helper()
	ns.Must(t, "ip", "route", "add", to, "via", via)
}

// Forward makes the namespace a router: it forwards IPv4 packets between
// its interfaces.
func (ns *NS) Forward(t testing.TB) {
	t.Helper()
	// /proc/sys/net is the namespace's own (no sysctl command needed).
	ns.Must(t, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
}

// Masquerade makes the namespace a home router in front of the networks
// on its other interfaces: it forwards, rewrites the source of what
// leaves through out to out's address (an nftables masquerade rule), and
// lets in through out only the replies to connections made from inside.
// Nothing outside can open a connection to a machine behind it.
func (ns *NS) Masquerade(t testing.TB, out string) {
	t.Helper()
	Need(t, "nft")
	ns.Forward(t)
	rules := fmt.Sprintf(`table ip nat {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		oifname %q masquerade
	}
}
table ip filter {
	chain forward {
		type filter hook forward priority filter; policy accept;
		iifname %q ct state established,related accept
		iifname %q drop
	}
}
`, out, out, out)
	cmd := ns.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("netns %s: nft: %v: %s", ns.Name, err, bytes.TrimSpace(out))
	}
}

// run runs a command and returns an error that says what it printed.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
