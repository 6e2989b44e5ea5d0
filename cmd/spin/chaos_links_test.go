//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Link cuts on loopback. Every node runs in a cgroup (v2) of its own, and
// a cut node's sockets, whichever ports they use, are matched by that
// cgroup in an nftables table of the test's: what they send and what
// arrives for them is dropped, so the node can neither reach nor be
// reached. A heal takes the rule away. The table and the cgroups are
// removed when the test ends.

// A linkCutter cuts and heals the links of the nodes.
type linkCutter struct {
	table string   // The nftables table, inet family.
	paths []string // Each node's cgroup, as nft names it (below /sys/fs/cgroup).
	dirs  []string // Each node's cgroup directory.
	fds   []*os.File

	mu      sync.Mutex
	cut     []bool
	checked bool // A cut was seen to take effect.
}

// newLinkCutter makes the cgroups of n nodes, or returns nil and why
// links cannot be cut here.
func newLinkCutter(t *testing.T, n int) (*linkCutter, string) {
	if os.Geteuid() != 0 {
		return nil, "they need root (nftables and cgroups); not root here"
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, "they need nft (apt-get install nftables): " + err.Error()
	}
	mnt, err := cgroup2Mount()
	if err != nil {
		return nil, err.Error()
	}
	rel, ok := strings.CutPrefix(mnt, "/sys/fs/cgroup")
	if !ok {
		return nil, fmt.Sprintf("cgroup2 is mounted on %s, not below /sys/fs/cgroup where nft looks for cgroups", mnt)
	}
	c := &linkCutter{table: fmt.Sprintf("spindle_chaos_%d", os.Getpid()), cut: make([]bool, n)}
	t.Cleanup(c.close)
	for i := range n {
		name := fmt.Sprintf("spindle-chaos-%d-%c", os.Getpid(), chaosNodes[i])
		dir := filepath.Join(mnt, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, fmt.Sprintf("cannot make a cgroup: %v", err)
		}
		c.dirs = append(c.dirs, dir)
		fd, err := os.Open(dir)
		if err != nil {
			return nil, fmt.Sprintf("cannot open a cgroup: %v", err)
		}
		c.fds = append(c.fds, fd)
		c.paths = append(c.paths, strings.TrimPrefix(rel+"/"+name, "/"))
	}
	if err := c.apply(); err != nil {
		return nil, err.Error()
	}
	return c, ""
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted.
func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID parent major:minor root mountpoint options... - fstype source ...
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if fs := strings.Fields(post); len(fs) > 0 && fs[0] == "cgroup2" {
			if f := strings.Fields(pre); len(f) >= 5 && f[3] == "/" {
				return f[4], nil
			}
		}
	}
	return "", fmt.Errorf("no cgroup2 hierarchy is mounted (see /proc/self/mountinfo)")
}

// sysProc returns the attributes that start a process in node i's cgroup.
func (c *linkCutter) sysProc(i int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(c.fds[i].Fd())}
}

// set cuts node i's links, or heals them.
func (c *linkCutter) set(i int, cut bool) error {
	c.mu.Lock()
	c.cut[i] = cut
	c.mu.Unlock()
	return c.apply()
}

// apply replaces the table with one that cuts the nodes cut now.
func (c *linkCutter) apply() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var rules strings.Builder
	for i, cut := range c.cut {
		if cut {
			fmt.Fprintf(&rules, "\t\tsocket cgroupv2 level 1 %q drop\n", c.paths[i])
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\ntable inet %s {\n", c.table, c.table, c.table)
	fmt.Fprintf(&b, "\tchain out {\n\t\ttype filter hook output priority 0; policy accept;\n%s\t}\n", rules.String())
	fmt.Fprintf(&b, "\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n%s\t}\n}\n", rules.String())
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(b.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f: %v: %s\n%s", err, strings.TrimSpace(string(out)), b.String())
	}
	return nil
}

// works reports whether a cut of the node listening at addr (host:port)
// takes effect: a connection to it fails.
func (c *linkCutter) works(addr string) bool {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return true
	}
	conn.Close()
	return false
}

// close deletes the table and the cgroups (once their processes are gone).
func (c *linkCutter) close() {
	exec.Command("nft", "delete", "table", "inet", c.table).Run()
	for _, fd := range c.fds {
		fd.Close()
	}
	for _, dir := range c.dirs {
		for deadline := time.Now().Add(10 * time.Second); os.Remove(dir) != nil && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
	}
}
