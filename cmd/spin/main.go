// Command spin is Spindle's one binary. "spin node" runs a peer; every other
// subcommand is the client, which holds the user's keys, packs, signs and
// verifies itself and reaches the network through one peer.
//
// Usage:
//
//	spin [-config FILE] [-log LEVEL] COMMAND [ARGS]
//
// Run "spin help" for the list of commands and "spin help COMMAND" for one.
// The output rules every command follows are written down in tui.go.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"spindle.dev/p2p"
)

const globalUsage = `Usage:
    spin [-config FILE] [-log LEVEL] COMMAND [ARGS]
    spin help [COMMAND]

Global options (before the command):
    -config FILE   configuration file (default $SPIN_CONFIG, else $HOME/spin/config)
    -log LEVEL     log level of the client and node: trace, debug, info, warn or
                   error (default warn); debug shows each request to the node
                   and its time, trace adds libp2p's own debug messages
    -help          print this text

Commands:
%s
Example:
    $ spin init ann@example.com
    $ spin signup
    $ spin mkdir @/docs
    $ spin put report.pdf @/docs/report.pdf
    $ spin ls -l @/docs

Run "spin help COMMAND" for the usage of one command. This is %s.
`

// A command is one subcommand of spin.
type command struct {
	name    string
	summary string // One line for the list of commands.
	usage   string // The full usage text, starting with synopsis lines.
	run     func(ctx context.Context, st *State, args []string) error
}

// commands returns the subcommands, in the order "spin help" lists them.
// Each is defined, with its usage text and flags, in the file of its name.
func commands() []*command {
	return []*command{
		{"init", "create keys and a configuration", initUsage, runInit},
		{"signup", "register with the key cluster", signupUsage, runSignup},
		{"put", "store a file", putUsage, runPut},
		{"get", "read a file", getUsage, runGet},
		{"cp", "copy files to, from and within spin", cpUsage, runCp},
		{"ls", "list files and directories", lsUsage, runLs},
		{"mkdir", "make directories", mkdirUsage, runMkdir},
		{"rm", "remove files and directories", rmUsage, runRm},
		{"link", "make a link", linkUsage, runLink},
		{"mv", "rename a file or directory", mvUsage, runMv},
		{"history", "list the versions of a path of your tree", historyUsage, runHistory},
		{"restore", "write an old version of a path back", restoreUsage, runRestore},
		{"snapshot", "say or set how long earlier states of your tree are kept", snapshotUsage, runSnapshot},
		{"whichaccess", "name the Access file that governs a path", whichaccessUsage, runWhichaccess},
		{"info", "describe a file in detail", infoUsage, runInfo},
		{"share", "check or repair who holds keys to files", shareUsage, runShare},
		{"watch", "stream changes to a tree", watchUsage, runWatch},
		{"mount", "mount the namespace as a file system", mountUsage, runMount},
		{"ui", "browse, view, upload and share from a web browser", uiUsage, runUI},
		{"user", "print a user's key record; set your dir hosts", userUsage, runUser},
		{"audit", "check a tree's heads, your own tree's log, or evidence", auditUsage, runAudit},
		{"rotate", "replace your key with a new one", rotateUsage, runRotate},
		{"key", "set up and join a key cluster; audit key records", keyUsage(), runKey},
		{"suffix", "create a +suffix user of yours", suffixUsage, runSuffix},
		{"node", "run a peer", nodeUsage, runNodeCmd},
		{"demo", "run a demonstration network", demoUsage, runDemoCmd},
		{"version", "print spin's version", versionUsage, runVersion},
	}
}

func lookupCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

func main() {
	deferFirstGC()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal has cancelled the work, a second one kills.
		<-ctx.Done()
		stop()
	}()
	st := &State{
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Context:   ctx,
		NewClient: dialClient,
		Trust:     trustCluster,
	}
	if env := os.Getenv("SPIN_CONFIG"); env != "" {
		st.ConfigFile = env // -config, if given, still wins.
	}
	stopProfile := startCPUProfile()
	code := run(os.Args[1:], st)
	stopProfile()
	if ctx.Err() != nil && st.cmd != "node" && st.cmd != "mount" {
		// Stopped by Ctrl-C or SIGTERM: the shell's convention, whatever
		// the command did with the signal. A node stopping cleanly on
		// one, as a service does, exits with what it returned, and so
		// does a mount, which Ctrl-C unmounts.
		code = exitInterrupted
	}
	stop()
	os.Exit(code)
}

// run runs the spin command line args (without the program name) in st and
// returns the exit code. It closes any client a command opened.
func run(args []string, st *State) int {
	ctx := st.Context
	if ctx == nil {
		ctx = context.Background()
	}
	gfs, configFile, logLevel := globalFlags()
	if err := gfs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(st.Stdout, mainUsage())
			return exitOK
		}
		fmt.Fprintf(st.Stderr, "spin: %v\n", err)
		fmt.Fprint(st.Stderr, mainUsage())
		return exitUsage
	}
	if *configFile != "" {
		st.ConfigFile = *configFile
	}
	level, ok := parseLevel(*logLevel)
	if !ok {
		fmt.Fprintf(st.Stderr, "spin: -log: unknown level %q (want trace, debug, info, warn or error)\n", *logLevel)
		return exitUsage
	}
	rest := gfs.Args()
	if st.Log == nil {
		opts := &slog.HandlerOptions{Level: level}
		if len(rest) == 0 || rest[0] != "node" {
			// A client's run is short: durations say more than times.
			opts.ReplaceAttr = dropTime
		}
		h := slog.NewTextHandler(st.Stderr, opts)
		st.Log = slog.New(h)
		p2p.LogTo(slog.New(demoted{h}).With("part", "libp2p"))
	}

	if len(rest) == 0 {
		fmt.Fprintf(st.Stderr, "spin: no command given\n")
		fmt.Fprint(st.Stderr, mainUsage())
		return exitUsage
	}
	if rest[0] == "help" {
		return help(st, rest[1:])
	}
	cmd := lookupCommand(rest[0])
	if cmd == nil {
		fmt.Fprintf(st.Stderr, "spin: unknown command %q\n", rest[0])
		st.hint("run: spin help")
		return exitUsage
	}
	st.cmd = cmd.name
	start := time.Now()
	err := cmd.run(ctx, st, rest[1:])
	if st.client != nil {
		if cerr := st.client.Close(); cerr != nil && err == nil {
			err = st.fail("", cerr)
		}
		st.client = nil
	}
	if cmd.name != "node" {
		st.Log.Debug("command done", "command", cmd.name, "took", time.Since(start).Round(10*time.Microsecond))
	}
	var ue *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		fmt.Fprint(st.Stdout, cmd.usage)
		return exitOK
	case errors.As(err, &ue) && ue.flags:
		st.errorf("%s", ue.msg)
		if ue.near != "" {
			st.hint("did you mean %s?", ue.near)
		}
		st.hint("for the flags of %s, run: spin help %s", st.cmd, st.cmd)
		return exitUsage
	case errors.As(err, &ue):
		st.errorf("%s", ue.msg)
		fmt.Fprint(st.Stderr, cmd.usage)
		return exitUsage
	case errors.Is(err, errUsageReported):
		return exitUsage
	case errors.Is(err, errFailed):
		return exitFailure
	default:
		st.fail("", err)
		return exitFailure
	}
}

// levelTrace is the log level of -log trace, below debug: libp2p's debug
// messages, which are many and seldom what a user of spin looks for.
const levelTrace = slog.LevelDebug - 4

// parseLevel parses the level -log names.
func parseLevel(s string) (slog.Level, bool) {
	if strings.EqualFold(s, "trace") {
		return levelTrace, true
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return 0, false
	}
	return level, true
}

// dropTime is a slog ReplaceAttr that leaves out each record's time.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// demoted is a slog handler that passes debug records on at levelTrace,
// so that -log debug shows spin's own debug lines without libp2p's.
type demoted struct{ slog.Handler }

func (h demoted) Enabled(ctx context.Context, l slog.Level) bool {
	return h.Handler.Enabled(ctx, demote(l))
}

func (h demoted) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return h.Handler.Handle(ctx, r)
}

func (h demoted) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoted{h.Handler.WithAttrs(attrs)}
}

func (h demoted) WithGroup(name string) slog.Handler { return demoted{h.Handler.WithGroup(name)} }

// demote lowers debug to levelTrace and leaves higher levels as they are.
func demote(l slog.Level) slog.Level {
	if l <= slog.LevelDebug {
		return l - (slog.LevelDebug - levelTrace)
	}
	return l
}

// globalFlags returns the flag set of the options before the command, and
// the values of -config and -log in it.
func globalFlags() (fs *flag.FlagSet, configFile, logLevel *string) {
	fs = flag.NewFlagSet("spin", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configFile = fs.String("config", "", "")
	logLevel = fs.String("log", "warn", "")
	return fs, configFile, logLevel
}

// help prints the usage of a command, or of spin itself, to stdout.
func help(st *State, args []string) int {
	switch len(args) {
	case 0:
		fmt.Fprint(st.Stdout, mainUsage())
		return exitOK
	case 1:
		if args[0] == "help" {
			fmt.Fprint(st.Stdout, helpUsage)
			return exitOK
		}
		if c := lookupCommand(args[0]); c != nil {
			fmt.Fprint(st.Stdout, c.usage)
			return exitOK
		}
		fmt.Fprintf(st.Stderr, "spin: help: unknown command %q\n", args[0])
		st.hint("run: spin help")
		return exitUsage
	}
	fmt.Fprintf(st.Stderr, "spin: help: want at most one command\n")
	return exitUsage
}

// mainUsage returns spin's own usage text, listing the commands.
func mainUsage() string {
	var b strings.Builder
	cmds := commands()
	width := 0
	for _, c := range cmds {
		width = max(width, len(c.name))
	}
	names := make([]string, 0, len(cmds))
	for _, c := range cmds {
		names = append(names, fmt.Sprintf("    %-*s   %s\n", width, c.name, c.summary))
	}
	b.WriteString(strings.Join(names, ""))
	return fmt.Sprintf(globalUsage, b.String(), version())
}

const helpUsage = `Usage:
    spin help [COMMAND]

Prints the usage of spin, or of one command; "spin COMMAND -help" does too.
`

const versionUsage = `Usage:
    spin version

Prints spin's version: the module version, or for a build from a checkout
the commit it was built from, and the Go version.

Options:
    -h, -help   print this text

Example:
    $ spin version
    spin v0.3.0, go1.26.8
`

func runVersion(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return usagef("want no arguments, got %d", flags.NArg())
	}
	fmt.Fprintln(st.Stdout, version())
	return nil
}

// version describes this build of spin.
func version() string {
	v, rev, dirty := "(devel)", "", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision" && len(s.Value) >= 12:
				rev = " commit " + s.Value[:12]
			case s.Key == "vcs.modified" && s.Value == "true":
				dirty = " (modified)"
			}
		}
	}
	return fmt.Sprintf("spin %s%s%s, %s", v, rev, dirty, runtime.Version())
}
