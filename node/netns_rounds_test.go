//go:build linux

package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
	"spindle.dev/p2p/p2ptest/netns"
	"spindle.dev/pack"
)

// netnsRoundsEnv is the prefix of the settings of TestNetnsRoundsClient.
const netnsRoundsEnv = "SPINDLE_NETNS_ROUNDS_"

// A small put and a small get, each by a new client as each spin command
// is, across a real link of 100 ms round trip (a delay line between two
// network namespaces, no loss): the time each takes after the client's
// dial, against its round trips counted on the same run. Each costs its
// round trips times 100 ms, and little else. Needs root; skipped with
// -short.
func TestNetnsSmallOpsRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a node and a client across a delay line; skipped with -short")
	}
	netns.Check(t)
	p := netns.Prefix()
	a, b := netns.New(t, p+"a"), netns.New(t, p+"b")
	aIP, bIP := "10.9.0.1", "10.9.0.2"
	netns.NewDelayLine(t, a, aIP, b, bIP, netns.Link{Delay: 50 * time.Millisecond})
	dir := t.TempDir()
	srv := startNetns(t, a, "node", "serve", "HOME="+dir+"/a", "LISTEN=/ip4/"+aIP+"/tcp/4001", "ADDRFILE="+dir+"/addr")
	addr := srv.addr(t, dir+"/addr")
	cl := startRoundsClient(t, b, "NODE="+addr, "LISTEN=/ip4/"+bIP+"/tcp/0", "HOME="+dir+"/c")
	res := cl.result(t, 5*time.Minute)
	for _, op := range roundsOps {
		ms, rounds := res[op.key+".ms"], res[op.key+".rounds"]
		n, _ := strconv.Atoi(rounds)
		t.Logf("%s across 100 ms: %s ms (median), %s round trips after the dial", op.what, ms, rounds)
		if n == 0 || n > op.most {
			t.Errorf("%s took %q round trips, want 1 to %d", op.what, rounds, op.most)
		}
	}
}

// roundsOps are the operations TestNetnsRoundsClient times.
var roundsOps = []struct {
	key, what string
	most      int
}{
	{"putown", "put of ann's own file", 2},
	{"getown", "get of ann's own file", 1},
	{"putshared", "put of a file shared with bob", 2},
	{"getshared", "bob's get of it (after his first)", 1},
}

// startRoundsClient runs TestNetnsRoundsClient in ns with the settings
// given (KEY=value, KEY without the prefix).
func startRoundsClient(t testing.TB, ns *netns.NS, settings ...string) *netnsProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &netnsProc{name: "client", done: make(chan struct{})}
	p.cmd = ns.Command(exe, "-test.run=^TestNetnsRoundsClient$", "-test.count=1", "-test.timeout=10m", "-test.v")
	for _, s := range settings {
		p.cmd.Env = append(p.cmd.Env, netnsRoundsEnv+s)
	}
	p.cmd.Env = append(os.Environ(), p.cmd.Env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start client: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of the client:\n%s", p.out.String())
		}
	})
	return p
}

// TestNetnsRoundsClient is the client TestNetnsSmallOpsRounds runs in a
// namespace; run otherwise, it skips. It signs ann and bob up at the node
// NODE, then times each of roundsOps five times, each by a new client,
// and reports "RESULT KEY.ms=… KEY.rounds=…" (medians).
func TestNetnsRoundsClient(t *testing.T) {
	get := func(k string) string { return os.Getenv(netnsRoundsEnv + k) }
	if get("NODE") == "" {
		t.Skip("the client TestNetnsSmallOpsRounds runs in a namespace of its own")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	node := spindle.PeerAddr(get("NODE"))
	home := get("HOME")
	type user struct {
		keys          *pack.Keys
		keyLog, heads string
	}
	users := map[spindle.UserName]*user{}
	dial := func(name spindle.UserName, rc *p2ptest.RoundCounter) *client.Client {
		u := users[name]
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{get("LISTEN")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		c, err := client.Dial(ctx, client.Config{Keys: u.keys, Node: node, Host: &p2ptest.CountingHost{Host: h, C: rc}, KeyLog: u.keyLog, DirHeads: u.heads, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, name := range []spindle.UserName{"ann@example.com", "bob@example.com"} {
		keys, _, err := pack.Generate(name)
		if err != nil {
			t.Fatal(err)
		}
		d := filepath.Join(home, string(name))
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
		users[name] = &user{keys, filepath.Join(d, "keylog"), filepath.Join(d, "dirheads")}
		c := dial(name, p2ptest.NewRoundCounter(0))
		if err := c.Signup(ctx); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	data := bytes.Repeat([]byte("x"), 1<<10)
	c := dial("ann@example.com", p2ptest.NewRoundCounter(0))
	if _, err := c.MakeDirectory(ctx, "ann@example.com/shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "ann@example.com/shared/Access", strings.NewReader("*: ann@example.com\nread: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	c.Close()
	read := func(c *client.Client, name spindle.PathName) error {
		f, err := c.Open(ctx, name)
		if err != nil {
			return err
		}
		defer f.Close()
		got, err := io.ReadAll(f)
		if err == nil && !bytes.Equal(got, data) {
			err = fmt.Errorf("%s: read %d bytes, not the %d put", name, len(got), len(data))
		}
		return err
	}
	do := map[string]struct {
		who spindle.UserName
		op  func(c *client.Client) error
	}{
		"putown": {"ann@example.com", func(c *client.Client) error {
			_, err := c.Put(ctx, "ann@example.com/f", bytes.NewReader(data), spindle.EEPack, nil)
			return err
		}},
		"getown": {"ann@example.com", func(c *client.Client) error { return read(c, "ann@example.com/f") }},
		"putshared": {"ann@example.com", func(c *client.Client) error {
			_, err := c.Put(ctx, "ann@example.com/shared/f", bytes.NewReader(data), spindle.EEPack, nil)
			return err
		}},
		"getshared": {"bob@example.com", func(c *client.Client) error { return read(c, "ann@example.com/shared/f") }},
	}
	var out []string
	times := map[string][]time.Duration{}
	rounds := map[string][]int{}
	for range 5 {
		for _, o := range roundsOps {
			d := do[o.key]
			rc := p2ptest.NewRoundCounter(0)
			c := dial(d.who, rc)
			rc.Reset()
			start := time.Now()
			if err := d.op(c); err != nil {
				t.Fatalf("%s: %v", o.what, err)
			}
			times[o.key] = append(times[o.key], time.Since(start))
			n, _ := rc.Count()
			rounds[o.key] = append(rounds[o.key], n)
			c.Close()
		}
	}
	for _, o := range roundsOps {
		slices.Sort(times[o.key])
		slices.Sort(rounds[o.key])
		out = append(out, fmt.Sprintf("%s.ms=%d %s.rounds=%d", o.key, times[o.key][2].Milliseconds(), o.key, rounds[o.key][2]))
	}
	fmt.Printf("RESULT %s\n", strings.Join(out, " "))
}
