package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"spindle.dev"
)

// Issue 24, item 8, with real node processes and a long-running client:
// a client made before the key cluster's membership changed (as spin ui
// and spin mount keep one for their whole run) still puts after node A's
// cluster of one records its members, B and C join, and A leaves. It
// runs twice: with the client object spin ui holds, in this process, and
// with a spin ui process, through its web API. Ann runs one other
// command while A is still a member, as the user did before the
// UI's restart mended it: the long-running client takes what that
// command saw from the key log file, as a client started afresh does.
func TestLongRunningClientFollowsMembers(t *testing.T) {
	followMembers(t, func(t *testing.T, ann *spinUser) func(ctx context.Context, name, data string) error {
		st := &State{Home: ann.home, Stderr: &bytes.Buffer{}, NewClient: dialClient, Log: slog.New(slog.DiscardHandler)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		t.Cleanup(cancel)
		long, err := st.Client(ctx)
		if err != nil {
			t.Fatalf("dial: %v\n%s", err, st.Stderr)
		}
		t.Cleanup(func() { long.Close() })
		return func(ctx context.Context, name, data string) error {
			_, err := long.Put(ctx, spindle.PathName("ann@example.com/"+name), strings.NewReader(data), spindle.UnknownPack, nil)
			return err
		}
	})
}

// The same with a spin ui process started before the changes.
func TestUIFollowsMembersProcess(t *testing.T) {
	followMembers(t, func(t *testing.T, ann *spinUser) func(ctx context.Context, name, data string) error {
		cmd := ann.command("ui", "-listen", "127.0.0.1:0")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		urls := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "http://") {
					urls <- strings.TrimSpace(sc.Text())
				}
			}
			io.Copy(io.Discard, stdout)
		}()
		var base string
		select {
		case base = <-urls:
		case <-time.After(time.Minute):
			t.Fatalf("spin ui printed no address within a minute:\n%s", stderr.String())
		}
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		return func(ctx context.Context, name, data string) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+"/api/put?name="+url.QueryEscape("ann@example.com/"+name), strings.NewReader(data))
			if err != nil {
				return err
			}
			req.Header.Set("Origin", "http://"+u.Host)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("spin ui answered %s: %s", resp.Status, body)
			}
			return nil
		}
	})
}

// followMembers runs the scenario with the long-running putter that start
// makes for ann once she has signed up.
func followMembers(t *testing.T, start func(t *testing.T, ann *spinUser) func(ctx context.Context, name, data string) error) {
	opA, opB, opC := newSpinUser(t), newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	a.start(t)
	b := &clusterNode{op: opB, args: []string{"-keyserver", a.addr}}
	c := &clusterNode{op: opC, args: []string{"-keyserver", a.addr}}
	b.start(t)
	c.start(t)

	// Ann signs up through B while A's cluster records no members, and
	// keeps one client from then on.
	ann := newSpinUser(t)
	ann.run("init", "-node", b.addr, "ann@example.com")
	ann.run("signup")
	longPut := start(t, ann)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	put := func(name, data string) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
			err := longPut(ctx, name, data)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the long-running client puts %s: %v", name, err)
			}
			t.Logf("put %s: %v; trying again", name, err)
		}
	}
	put("before", "before")

	// A's operator records the members, and B and C join.
	opA.run("init", "-node", a.addr, "opa@example.com")
	opA.run("signup")
	opA.run("key", "init")
	opB.run("init", "-node", b.addr, "opb@example.com")
	opC.run("init", "-node", c.addr, "opc@example.com")
	opA.run("key", "admit", string(opB.publicKey()))
	opA.run("key", "admit", string(opC.publicKey()))
	opB.run("key", "join")
	opC.run("key", "join")
	waitMembers(t, opB, 3, "")
	// Meanwhile ann runs a command of her own, which leaves the head
	// naming the members, signed by A among them, in her key log file.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, err := ann.command("user").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(string(out), "temporary failure") {
			t.Fatalf("spin user after the joins: %v\n%s", err, out)
		}
	}
	put("after-joins", "after-joins")

	// A leaves: heads are signed by B and C alone.
	if out := opA.out("key", "leave"); !strings.HasPrefix(out, "left:") {
		t.Fatalf("spin key leave printed:\n%s", out)
	}
	waitMembers(t, opB, 2, peerOf(a.addr))
	// A user who signed up since makes a new head for the long client.
	dave := newSpinUser(t)
	dave.run("init", "-node", c.addr, "dave@example.com")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, err := dave.command("signup").CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin signup after A left: %v\n%s", err, out)
		}
	}
	// Sharing with dave needs his record, which only a head from after A
	// left holds: the long-running client must take such a head.
	put("Access", "*: ann@example.com\nread: dave@example.com\n")
	put("after-leave", "after-leave")
}

// waitMembers waits until spin key members, run by op, lists n members,
// none of them gone.
func waitMembers(t *testing.T, op *spinUser, n int, gone string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		members := op.out("key", "members")
		if strings.Count(members, "member:") == n && (gone == "" || !strings.Contains(members, gone)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("spin key members a minute on, want %d members:\n%s", n, members)
		}
	}
}
