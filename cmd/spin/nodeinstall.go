package main

// spin node install and uninstall: a node that runs itself, as a systemd
// service.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"

	"spindle.dev"
)

// nodeUnitName is the name of the systemd unit spin node install writes.
const nodeUnitName = "spindle-node.service"

// Seams for tests: where the unit goes and what runs systemctl.
var (
	// systemdRunning reports whether systemd manages this system (it has
	// /run/systemd/system, as sd_booted(3) checks).
	systemdRunning = func() bool {
		fi, err := os.Stat("/run/systemd/system")
		return err == nil && fi.IsDir()
	}
	// systemctl runs systemctl with args and returns its combined output.
	systemctl = func(ctx context.Context, args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	}
	// systemUnitDir is where -system units go.
	systemUnitDir = "/etc/systemd/system"
	// spinExecutable returns the path of the spin program to run.
	spinExecutable = func() (string, error) {
		p, err := os.Executable()
		if err != nil {
			return "", err
		}
		return filepath.EvalSymlinks(p)
	}
)

// installFlags defines the flags of spin node install and uninstall.
// Install takes them wherever they are among the node's own flags.
func installFlags(fs *flag.FlagSet) (user, system *bool, as *string, print *bool) {
	return fs.Bool("user", true, ""), fs.Bool("system", false, ""), fs.String("as", "", ""), fs.Bool("print", false, "")
}

// An installTarget says for whom a unit runs the node.
type installTarget struct {
	system bool   // A system unit (needs root), rather than one of the user's own.
	user   string // The user the node runs as; for a -system unit only.
	home   string // That user's home directory.
}

// runNodeInstall runs "spin node install [-user|-system] [-as USER]
// [-print] [node flags]": it writes a systemd unit that runs spin node
// with the node flags given, and enables and starts it.
func runNodeInstall(ctx context.Context, st *State, args []string) error {
	st.cmd = "node install"
	var (
		system, print bool
		as            string
		nodeArgs      []string
	)
	// The install flags first, wherever they are; the rest are the node's.
	for i := 0; i < len(args); i++ {
		switch a := strings.TrimPrefix(args[i], "-"); a {
		case "user", "-user":
			system = false
		case "system", "-system":
			system = true
		case "print", "-print":
			print = true
		case "as", "-as":
			if i+1 == len(args) {
				return usagef("-as needs the user the node runs as")
			}
			i++
			as = args[i]
		default:
			nodeArgs = append(nodeArgs, args[i])
		}
	}
	tgt, err := installFor(st, system, as)
	if err != nil {
		return err
	}
	nodeArgs, err = checkNodeArgs(nodeArgs, tgt.home)
	if err != nil {
		return err
	}
	exe, err := spinExecutable()
	if err != nil {
		return fmt.Errorf("cannot tell where this spin program is: %v", err)
	}
	if strings.HasPrefix(exe, os.TempDir()+string(filepath.Separator)) && strings.Contains(exe, "go-build") {
		st.hint("this spin was built by go run in a temporary directory, which the unit would run: install spin first (go install spindle.dev/cmd/spin)")
	}
	unit := nodeUnit(exe, nodeArgs, tgt)
	if print {
		fmt.Fprint(st.Stdout, unit)
		return nil
	}
	if !systemdRunning() {
		st.errorf("this system does not run systemd (it has no /run/systemd/system), so spin node install cannot make the node a service")
		st.hint("start the node at boot with your system's own service manager, running: %s; spin node install -print shows a systemd unit to adapt", shellQuote(append([]string{exe, "node"}, nodeArgs...)))
		return errFailed
	}
	dir, err := unitDir(st, tgt)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, nodeUnitName)
	if err := spindle.ReplaceFile(path, []byte(unit), 0o644, true); err != nil {
		return err
	}
	scope := systemctlScope(tgt)
	for _, cmd := range [][]string{{"daemon-reload"}, {"enable", "--now", nodeUnitName}} {
		if out, err := systemctl(ctx, append(scope, cmd...)...); err != nil {
			st.errorf("systemctl %s: %v: %s", strings.Join(append(scope, cmd...), " "), err, oneLineMsg(string(out)))
			st.hint("the unit is in %s; fix what systemctl says, then run: systemctl %s", path, strings.Join(append(scope, "enable", "--now", nodeUnitName), " "))
			return errFailed
		}
	}
	fmt.Fprintf(st.Stdout, "installed %s and started it\n", path)
	journal := "journalctl -u spindle-node -f"
	if !tgt.system {
		journal = "journalctl --user -u spindle-node -f"
	}
	fmt.Fprintf(st.Stdout, "its log:   %s\n", journal)
	fmt.Fprintf(st.Stdout, "its state: spin node status -home %s\n", nodeHomeOf(nodeArgs))
	if !tgt.system {
		fmt.Fprintf(st.Stdout, "to keep it running while you are logged out: loginctl enable-linger %s\n", currentUser())
	}
	return nil
}

// runNodeUninstall runs "spin node uninstall [-user|-system]": it stops
// and disables the unit and removes it. The node's home stays.
func runNodeUninstall(ctx context.Context, st *State, args []string) error {
	st.cmd = "node uninstall"
	fl := st.flags()
	_, system, _, _ := installFlags(fl)
	if err := st.parse(fl, args); err != nil {
		return err
	}
	if fl.NArg() > 0 {
		return usagef("unexpected argument %q", fl.Arg(0))
	}
	tgt := installTarget{system: *system}
	dir, err := unitDir(st, tgt)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, nodeUnitName)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		st.errorf("no node service is installed: %s does not exist", path)
		if !*system {
			st.hint("a system-wide one is removed with: spin node uninstall -system")
		}
		return errFailed
	}
	scope := systemctlScope(tgt)
	if systemdRunning() {
		if out, err := systemctl(ctx, append(scope, "disable", "--now", nodeUnitName)...); err != nil {
			st.errorf("systemctl %s: %v: %s", strings.Join(append(scope, "disable", "--now", nodeUnitName), " "), err, oneLineMsg(string(out)))
			return errFailed
		}
	}
	if err := os.Remove(path); err != nil {
		return err
	}
	if systemdRunning() {
		systemctl(ctx, append(scope, "daemon-reload")...)
	}
	fmt.Fprintf(st.Stdout, "stopped the node service and removed %s; the node's home is kept\n", path)
	return nil
}

// installFor works out for whom the unit runs the node.
func installFor(st *State, system bool, as string) (installTarget, error) {
	if !system {
		if as != "" {
			return installTarget{}, usagef("-as is for a -system unit; a -user unit runs as you")
		}
		home, err := st.home()
		if err != nil {
			return installTarget{}, err
		}
		return installTarget{home: home}, nil
	}
	if as == "" {
		as = os.Getenv("SUDO_USER")
	}
	if as == "" || as == "root" {
		return installTarget{}, usagef("-system needs -as USER, the user the node runs as (not root: the node needs no privileges)")
	}
	u, err := user.Lookup(as)
	if err != nil {
		return installTarget{}, usagef("-as %s: %v", as, err)
	}
	return installTarget{system: true, user: u.Username, home: u.HomeDir}, nil
}

// checkNodeArgs checks the node's flags as spin node would, so that a
// mistake shows now and not at the next boot, and makes -home absolute
// (a service starts in /), adding the default one under home if none is
// given.
func checkNodeArgs(args []string, home string) ([]string, error) {
	fl, f := newNodeFlags()
	if err := fl.Parse(args); err != nil {
		return nil, usagef("%v (spin help node lists the node's flags)", err)
	}
	if fl.NArg() > 0 {
		return nil, usagef("unexpected argument %q", fl.Arg(0))
	}
	if *f.replicas < 1 || *f.holdlimit <= 0 || *f.compact < 0 {
		return nil, usagef("-replicas must be 1 or more, -holdlimit more than 0 and -compact 0 or more")
	}
	var out []string
	h := *f.home
	if h == "" {
		h = filepath.Join(home, "spin", "node")
	}
	if strings.HasPrefix(h, "~/") {
		h = filepath.Join(home, h[2:])
	}
	abs, err := filepath.Abs(h)
	if err != nil {
		return nil, err
	}
	out = append(out, "-home", abs)
	fl.Visit(func(fg *flag.Flag) {
		if fg.Name != "home" {
			out = append(out, "-"+fg.Name+"="+fg.Value.String())
		}
	})
	return out, nil
}

// nodeUnit returns the text of the systemd unit that runs exe node args.
func nodeUnit(exe string, args []string, tgt installTarget) string {
	var b strings.Builder
	b.WriteString("# Written by spin node install; spin node uninstall removes it.\n")
	b.WriteString("[Unit]\n")
	b.WriteString("Description=Spindle node (spin node)\n")
	b.WriteString("Wants=network-online.target\n")
	b.WriteString("After=network-online.target\n\n")
	b.WriteString("[Service]\n")
	b.WriteString("Type=exec\n")
	if tgt.system {
		fmt.Fprintf(&b, "User=%s\n", tgt.user)
		fmt.Fprintf(&b, "Environment=%s\n", unitQuote("HOME="+tgt.home))
	}
	fmt.Fprintf(&b, "ExecStart=%s\n", unitCommand(append([]string{exe, "node"}, args...)))
	// SIGTERM stops the node cleanly: it acknowledged nothing that is not
	// on disk, and with -drain it hands its blocks on first.
	b.WriteString("KillSignal=SIGTERM\n")
	b.WriteString("TimeoutStopSec=120\n")
	b.WriteString("Restart=on-failure\n")
	b.WriteString("RestartSec=5\n")
	// A node keeps up to 4096 sockets (spin help node, Limits).
	b.WriteString("LimitNOFILE=8192\n")
	b.WriteString("NoNewPrivileges=yes\n")
	b.WriteString("PrivateTmp=yes\n\n")
	b.WriteString("[Install]\n")
	if tgt.system {
		b.WriteString("WantedBy=multi-user.target\n")
	} else {
		b.WriteString("WantedBy=default.target\n")
	}
	return b.String()
}

// unitCommand quotes a command line for ExecStart.
func unitCommand(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = unitQuote(a)
	}
	return strings.Join(q, " ")
}

// unitQuote quotes one word for a unit file: in double quotes, with
// backslashes and quotes escaped, and systemd's specifiers (%) and
// variables ($) doubled so that they are taken as they are.
func unitQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$", "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// unitDir returns the directory the unit goes in.
func unitDir(st *State, tgt installTarget) (string, error) {
	if tgt.system {
		return systemUnitDir, nil
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "systemd", "user"), nil
	}
	home, err := st.home()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".config", "systemd", "user"), nil
}

// systemctlScope returns the flags that point systemctl at the unit's manager.
func systemctlScope(tgt installTarget) []string {
	if tgt.system {
		return nil
	}
	return []string{"--user"}
}

// nodeHomeOf returns the -home in args, which checkNodeArgs put first.
func nodeHomeOf(args []string) string {
	if len(args) >= 2 && args[0] == "-home" {
		return args[1]
	}
	return "~/spin/node"
}

// currentUser returns the name of the user running spin.
func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "$USER"
}
