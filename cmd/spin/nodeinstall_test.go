package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeSystemd makes spin node install and uninstall see a system that
// runs systemd, with the spin program at exe, and records what they ask
// of systemctl.
func fakeSystemd(t *testing.T, running bool, exe string) *[]string {
	t.Helper()
	var (
		mu    sync.Mutex
		calls []string
	)
	savedRunning, savedCtl, savedExe, savedDir := systemdRunning, systemctl, spinExecutable, systemUnitDir
	t.Cleanup(func() {
		systemdRunning, systemctl, spinExecutable, systemUnitDir = savedRunning, savedCtl, savedExe, savedDir
	})
	systemUnitDir = t.TempDir() // Never the machine's own.
	systemdRunning = func() bool { return running }
	systemctl = func(_ context.Context, args ...string) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, strings.Join(args, " "))
		return nil, nil
	}
	spinExecutable = func() (string, error) { return exe, nil }
	t.Setenv("XDG_CONFIG_HOME", "")
	return &calls
}

// The unit spin node install writes runs the node with the flags given,
// checked first, quoted for systemd, with its home absolute; it restarts
// on failure and stops with SIGTERM; systemd-analyze verify accepts it.
// Install enables and starts it, uninstall stops and removes it and
// keeps the node's home; on a system without systemd nothing is written
// and the error says what to run instead.
func TestNodeInstall(t *testing.T) {
	e := newEnv(t)
	exe := filepath.Join(e.dir, "bin dir", "spin")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := fakeSystemd(t, true, exe)

	unit := e.ok("node", "install", "-print", "-home", "~/my nodes/100%", "-writers", "ann@example.com", "-gateway", "127.0.0.1:8080", "-witness")
	home := filepath.Join(e.dir, "my nodes", "100%%") // systemd reads %% as %.
	for _, want := range []string{
		`ExecStart="` + exe + `" "node" "-home" "` + home + `" "-gateway=127.0.0.1:8080" "-witness=true" "-writers=ann@example.com"` + "\n",
		"Restart=on-failure\n",
		"KillSignal=SIGTERM\n",
		"WantedBy=default.target\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit has no line %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, "User=") {
		t.Errorf("a -user unit names a user:\n%s", unit)
	}
	if path, err := exec.LookPath("systemd-analyze"); err == nil {
		f := filepath.Join(t.TempDir(), nodeUnitName)
		if err := os.WriteFile(f, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(path, "verify", f).CombinedOutput(); err != nil {
			t.Errorf("systemd-analyze verify: %v\n%s\n%s", err, out, unit)
		}
	} else {
		t.Log("no systemd-analyze here; the unit is not verified")
	}
	if len(*calls) != 0 {
		t.Errorf("-print ran systemctl: %q", *calls)
	}

	// A flag spin node would refuse is refused now, not at the next boot.
	_, errs, code := e.run("node", "install", "-replicas", "0")
	if code != exitUsage || !strings.Contains(errs, "-replicas must be 1 or more") {
		t.Errorf("install -replicas 0: exit %d, stderr %q", code, headLine(errs))
	}
	_, errs, code = e.run("node", "install", "-witnes")
	if code != exitUsage || !strings.Contains(errs, "-witnes") {
		t.Errorf("install with a misspelt flag: exit %d, stderr %q", code, headLine(errs))
	}

	out := e.ok("node", "install", "-home", "~/nodes/a", "-writers", "ann@example.com")
	path := filepath.Join(e.dir, ".config", "systemd", "user", nodeUnitName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("install wrote no unit: %v", err)
	}
	if !strings.Contains(string(data), `"-home" "`+filepath.Join(e.dir, "nodes", "a")+`"`) {
		t.Errorf("the unit does not run the node in the home given:\n%s", data)
	}
	if want := []string{"--user daemon-reload", "--user enable --now " + nodeUnitName}; strings.Join(*calls, "|") != strings.Join(want, "|") {
		t.Errorf("install ran systemctl %q, want %q", *calls, want)
	}
	if !strings.Contains(out, "journalctl --user -u spindle-node") || !strings.Contains(out, "loginctl enable-linger") {
		t.Errorf("install does not say where the log is and how to keep it running:\n%s", out)
	}

	*calls = nil
	e.ok("node", "uninstall")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("uninstall left the unit: %v", err)
	}
	if want := []string{"--user disable --now " + nodeUnitName, "--user daemon-reload"}; strings.Join(*calls, "|") != strings.Join(want, "|") {
		t.Errorf("uninstall ran systemctl %q, want %q", *calls, want)
	}
	_, errs, code = e.run("node", "uninstall")
	if code == 0 || !strings.Contains(errs, "no node service is installed") {
		t.Errorf("uninstall twice: exit %d, stderr %q", code, errs)
	}

	// -system needs a user to run as, and never root.
	_, errs, code = e.run("node", "install", "-system", "-as", "root")
	if code != exitUsage || !strings.Contains(errs, "not root") {
		t.Errorf("install -system -as root: exit %d, stderr %q", code, headLine(errs))
	}

	*calls = nil
	e.ok("node", "install", "-system", "-as", "nobody", "-writers", "ann@example.com")
	sys, err := os.ReadFile(filepath.Join(systemUnitDir, nodeUnitName))
	if err != nil {
		t.Fatalf("install -system wrote no unit: %v", err)
	}
	for _, want := range []string{"User=nobody\n", "WantedBy=multi-user.target\n"} {
		if !strings.Contains(string(sys), want) {
			t.Errorf("the system unit has no line %q:\n%s", want, sys)
		}
	}
	if want := []string{"daemon-reload", "enable --now " + nodeUnitName}; strings.Join(*calls, "|") != strings.Join(want, "|") {
		t.Errorf("install -system ran systemctl %q, want %q", *calls, want)
	}

	// Without systemd: nothing written, and what to run instead.
	fakeSystemd(t, false, exe)
	_, errs, code = e.run("node", "install", "-writers", "ann@example.com")
	if code == 0 || !strings.Contains(errs, "does not run systemd") || !strings.Contains(errs, "node -home") {
		t.Errorf("install without systemd: exit %d, stderr %q", code, errs)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("install without systemd wrote %s", path)
	}
}

// headLine returns the first line of s.
func headLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
