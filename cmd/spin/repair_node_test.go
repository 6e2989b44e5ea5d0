package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// With real processes: ann's sequencer A stops and her log on A is
// damaged: two bytes rot (and A starts again with -repair), the file is
// cut short, the file is deleted. Each time A reports the damage, keeps
// the entries that verify, takes the rest from her mirror B, and serves
// every file again, never an older state or a new tree; the damaged bytes
// are kept beside the log.
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
	aLog := filepath.Join(a.home(), "dirlogs", "ann@example.com.log")
	files := 0
	for _, c := range []struct {
		what   string
		sig    syscall.Signal
		damage func(b []byte) []byte // nil deletes the file
		repair bool
	}{
		{"two flipped bytes, with -repair", syscall.SIGTERM, func(b []byte) []byte {
			b[len(b)/2] ^= 0x01
			b[len(b)/2+7] ^= 0x01 // Two bytes: no one-byte fix restores it.
			return b
		}, true},
		{"the file cut short", syscall.SIGKILL, func(b []byte) []byte { return b[:len(b)/3] }, false},
		{"the file deleted", syscall.SIGKILL, nil, false},
	} {
		for range 3 {
			put := ann.command("put", "-", fmt.Sprintf("@/f%d", files))
			put.Stdin = strings.NewReader(fmt.Sprintf("file %d\n", files))
			if out, err := put.CombinedOutput(); err != nil {
				t.Fatalf("%s: spin put: %v\n%s", c.what, err, out)
			}
			files++
		}
		waitLogCopied(t, a, b, "ann@example.com") // B holds the whole log before A stops.
		a.cmd.Process.Signal(c.sig)
		a.cmd.Wait()
		if c.damage == nil {
			if err := os.Remove(aLog); err != nil {
				t.Fatal(err)
			}
		} else {
			data, err := os.ReadFile(aLog)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(aLog, c.damage(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		a.args = nil
		if c.repair {
			a.args = []string{"-repair", "ann@example.com"}
		}
		a.start(t)
		// The refill is done as A starts (with -repair) or right after.
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			log, _ := os.ReadFile(a.log)
			if strings.Contains(string(log), "damaged directory log refilled") {
				if !strings.Contains(string(log), "lost=nothing") {
					t.Fatalf("%s: A's log says entries were lost:\n%s", c.what, log)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: A's log does not say the log was refilled a minute on:\n%s", c.what, log)
			}
		}
		// Served by A itself: B, the mirror, is stopped.
		b.cmd.Process.Signal(syscall.SIGSTOP)
		for i := range files {
			want := fmt.Sprintf("file %d\n", i)
			if out, err := ann.command("get", fmt.Sprintf("@/f%d", i)).CombinedOutput(); err != nil || string(out) != want {
				log, _ := os.ReadFile(a.log)
				b.cmd.Process.Signal(syscall.SIGCONT)
				t.Fatalf("%s: f%d through the repaired A: %v\n%s\nA's log:\n%s", c.what, i, err, out, log)
			}
		}
		b.cmd.Process.Signal(syscall.SIGCONT)
	}
	if m, _ := filepath.Glob(aLog + ".damaged-*"); len(m) < 2 {
		t.Errorf("the damaged bytes were not kept beside the log: %v", m)
	}
}
