//go:build unix

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"spindle.dev/node"
	"spindle.dev/pack"
)

// rotateStopEnv names the step of spin rotate at which the spin process
// that tests run kills itself with SIGKILL, as a crash would stop it.
const rotateStopEnv = "SPIN_TEST_ROTATE_STOP"

func init() {
	if step := os.Getenv(rotateStopEnv); step != "" {
		rotateStep = func(s string) {
			if s == step {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
	}
}

// A rotation killed after any of its steps is finished by running spin
// rotate again: the key the stopped run registered (or would have) is the
// one registered and saved in the end, the old keys are all in the
// archive, and the files written before read.
func TestRotateResumes(t *testing.T) {
	u := newSpinUser(t)
	n, err := node.New(context.Background(), node.Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	u.signup(string(n.DialAddr()))
	f := filepath.Join(u.home, "f")
	if err := os.WriteFile(f, []byte("written with the first key"), 0o600); err != nil {
		t.Fatal(err)
	}
	u.run("put", f, "@/f")
	keysDir := filepath.Join(u.home, "spin", "keys")
	load := func() *pack.Keys {
		t.Helper()
		k, err := pack.Load(keysDir)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	held := []string{string(load().PublicKey())}
	for _, step := range []string{"pending", "registered", "saved", "rewrapped"} {
		cmd := u.command("rotate")
		cmd.Env = append(cmd.Env, rotateStopEnv+"="+step)
		out, err := cmd.CombinedOutput()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("spin rotate stopped after %s: %v, want killed\n%s", step, err, out)
		}
		data, err := os.ReadFile(filepath.Join(keysDir, pendingFile))
		if err != nil {
			t.Fatalf("killed after %s: %v", step, err)
		}
		secret, err := pack.ParseSecret(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		next, err := pack.FromSecret("ann@example.com", secret)
		if err != nil {
			t.Fatal(err)
		}
		if step == "registered" {
			// The new key is registered and the old one still in use:
			// commands say how to finish.
			ls := u.command("ls", "@")
			out, err := ls.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "a key rotation was stopped before it finished") || !strings.Contains(string(out), "spin rotate") {
				t.Errorf("spin ls with a rotation stopped after registering: %v\n%s", err, out)
			}
		}

		cmd = u.command("rotate")
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("spin rotate after one killed after %s: %v\n%s", step, err, out)
		}
		if !strings.Contains(string(out), "Finishing the rotation begun earlier") || !strings.Contains(string(out), secret.String()) {
			t.Errorf("spin rotate after one killed after %s does not finish it with its secret:\n%s", step, out)
		}
		if _, err := os.Stat(filepath.Join(keysDir, pendingFile)); !os.IsNotExist(err) {
			t.Errorf("after the rotation is finished, %s remains: %v", pendingFile, err)
		}
		k := load()
		if k.PublicKey() != next.PublicKey() {
			t.Fatalf("after a rotation killed after %s and finished: the key is not the one of the secret it made", step)
		}
		var got []string
		for _, p := range k.PublicKeys() {
			got = append(got, string(p))
		}
		held = append([]string{string(next.PublicKey())}, held...)
		if strings.Join(got, " ") != strings.Join(held, " ") {
			t.Fatalf("after a rotation killed after %s: keys %v, want %v", step, got, held)
		}
		reg := u.command("user", "ann@example.com")
		if out, err := reg.CombinedOutput(); err != nil || !strings.Contains(string(out), string(next.PublicKey())) {
			t.Fatalf("after a rotation killed after %s: the registered key is not the new one: %v\n%s", step, err, out)
		}
		get := u.command("get", "@/f")
		if out, err := get.Output(); err != nil || string(out) != "written with the first key" {
			t.Fatalf("after a rotation killed after %s: spin get @/f: %v, %q", step, err, out)
		}
	}
	audit := u.command("key", "audit")
	if out, err := audit.CombinedOutput(); err != nil || !strings.Contains(string(out), "ann@example.com: 5 versions") {
		t.Fatalf("spin key audit after four rotations: %v\n%s", err, out)
	}
}
