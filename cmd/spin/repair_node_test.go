package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// With real processes: ann's sequencer A stops, a byte of her log on A
// rots, and A starts again with -repair. It keeps the entries before the
// damaged one, takes the rest from her mirror B, and serves every file
// again; the damaged bytes are kept beside the log.
func TestRepairTakesRestFromMirror(t *testing.T) {
	opA, opB := newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	a.start(t)
	b := &clusterNode{op: opB, args: []string{"-keyserver", a.addr}}
	b.start(t)
	ann := newSpinUser(t)
	ann.run("init", "-node", a.addr, "ann@example.com")
	ann.run("signup")
	ann.run("user", "-dirs", a.addr+","+b.addr)
	const files = 6
	for i := range files {
		put := ann.command("put", "-", fmt.Sprintf("@/f%d", i))
		put.Stdin = strings.NewReader(fmt.Sprintf("file %d\n", i))
		if out, err := put.CombinedOutput(); err != nil {
			t.Fatalf("spin put: %v\n%s", err, out)
		}
	}
	waitLogCopied(t, a, b, "ann@example.com") // B holds the whole log before A stops.
	aLog := filepath.Join(a.home(), "dirlogs", "ann@example.com.log")
	a.cmd.Process.Signal(syscall.SIGTERM)
	a.cmd.Wait()
	data, err := os.ReadFile(aLog)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	data[len(data)/2+7] ^= 0x01 // Two bytes: no one-byte fix restores it.
	if err := os.WriteFile(aLog, data, 0o600); err != nil {
		t.Fatal(err)
	}
	a.args = []string{"-repair", "ann@example.com"}
	a.start(t)
	for i := range files {
		want := fmt.Sprintf("file %d\n", i)
		if out, err := ann.command("get", fmt.Sprintf("@/f%d", i)).CombinedOutput(); err != nil || string(out) != want {
			log, _ := os.ReadFile(a.log)
			t.Fatalf("f%d through the repaired A: %v\n%s\nA's log:\n%s", i, err, out, log)
		}
	}
	log, err := os.ReadFile(a.log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "damaged directory log refilled") || !strings.Contains(string(log), "lost=nothing") {
		t.Errorf("A's log does not say the log was refilled with nothing lost:\n%s", log)
	}
	if m, _ := filepath.Glob(aLog + ".damaged-*"); len(m) == 0 {
		t.Error("the damaged bytes were not kept beside the log")
	}
}
