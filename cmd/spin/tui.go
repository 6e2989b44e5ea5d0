package main

// How spin talks to people. Every command follows these rules:
//
//   - Results (listings, file contents, key records, reports) go to stdout,
//     and nothing else does, so that stdout can be piped or redirected.
//   - Diagnostics go to stderr, one line each, lowercase, without a trailing
//     period:
//
//	spin: <command>: <path>: <reason>
//
//     where reason starts with the error's kind ("permission denied",
//     "private", "does not exist", ...) and may add detail after a colon.
//   - A diagnostic may be followed by lines that tell the user what to do:
//
//	spin: hint: dave@example.com must list you in an Access file
//
//   - Binary data is never written to a terminal: get refuses and says how
//     to write it to a file instead.
//   - A progress line is drawn on stderr, and only when stderr is a terminal
//     and the transfer is large.
//   - "-" as a source means stdin; "@" alone or at the start of a path
//     ("@/docs/x") means the user's own root.
//   - A command that did what was asked, but not all that follows from it
//     (an Access file naming a group that does not exist yet), prints
//
//	spin: <command>: warning: <path>: <what was not done>
//
//     and exits 0; a command that fails changes nothing it can avoid.
//   - Names that come from a node (file names, link targets, writers,
//     readers) are untrusted: a log written before names were checked, or a
//     hostile node, may hold any bytes. Results print each one with
//     printName, which leaves a name as it is when every character is
//     printable and otherwise prints it Go-quoted ("a\nb", "\x1b[2J"), so
//     no name can pass for two lines or move the cursor. A name that
//     starts with a double quote is quoted too, so a printed name that
//     starts with one is always a quoted name. Diagnostics escape every
//     character that is not printable (see errorf).
//   - The exit code is 0 when everything worked, 1 when something failed
//     (after all the work that could be done was done) and 2 for bad usage,
//     in which case the command's usage text follows the diagnostic.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// The exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	// exitInterrupted is the status of a command stopped by Ctrl-C
	// (SIGINT) or SIGTERM, 128+2 as shells report a SIGINT.
	exitInterrupted = 130
)

// A State is everything a command runs with: its own standard streams, the
// configuration and the way to reach the network. Tests build one with
// buffers as streams and a NewClient that returns an in-memory client, and
// call run directly.
type State struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Context, if set, bounds every command; main cancels it on SIGINT.
	Context context.Context

	// Home is the user's home directory; if empty, os.UserHomeDir is used.
	Home string
	// ConfigFile is the configuration file; the -config flag sets it and
	// it defaults to $HOME/spin/config.
	ConfigFile string
	// Config is the loaded configuration. If it is nil when a command
	// needs it, it is loaded from ConfigFile.
	Config *Config
	// Log is the logger handed to the network client and node, writing to
	// Stderr at the level -log names.
	Log *slog.Logger

	// NewClient connects to the network as cfg says. main sets it to
	// dialClient (see dial.go).
	NewClient func(ctx context.Context, cfg *Config) (spindle.Client, error)
	// Trust starts the key log for cfg, trusting the key cluster's
	// verifier key as cfg.Verifier pins it or as cfg.Node gives it, and
	// returns the key and its fingerprint. main sets it to trustCluster
	// (see dial.go); spin init uses it.
	Trust func(ctx context.Context, cfg *Config) (vkey, fingerprint string, err error)

	// isTerminal reports whether w is a terminal. Nil means the real test
	// (see isTerminal); tests set it to pretend.
	isTerminal func(w io.Writer) bool

	cmd     string         // The subcommand running, for diagnostics.
	flagSet *flag.FlagSet  // The running command's flags, as flags made them; tests check help texts against them.
	client  spindle.Client // Made on first use by Client, closed by run.
	mu      sync.Mutex     // Serialises diagnostics from concurrent workers.
}

// errFailed is returned by a command that has already printed why it failed.
var errFailed = errors.New("failed")

// errUsageReported is returned by a command that has already printed why
// its command line is wrong.
var errUsageReported = errors.New("bad usage")

// errHelp is returned by parse when -help is given; run then prints the
// command's usage to stdout and exits 0.
var errHelp = errors.New("help requested")

// A usageError is a mistake in the command line. run prints it followed by
// the command's usage text and exits with status 2.
type usageError struct {
	msg   string
	flags bool // A flag the command does not take: run prints hints, not the whole usage.
	near  string
}

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// flags returns an empty FlagSet for the running command. Package flag
// prints nothing: parse turns its errors into usageErrors, which run prints
// with the command's usage text.
func (st *State) flags() *flag.FlagSet {
	fs := flag.NewFlagSet(st.cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	st.flagSet = fs
	return fs
}

// parse parses args with fs, turning -help into errHelp and a bad flag into
// a usageError. Flags come before the other arguments; one of this
// command's flags after them is reported rather than taken for a name
// (a name that starts with - can follow --).
func (st *State) parse(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(expandShortFlags(fs, args))
	switch {
	case errors.Is(err, flag.ErrHelp):
		return errHelp
	case err != nil:
		return &usageError{msg: err.Error(), flags: true, near: nearestFlag(fs, err)}
	}
	rest := fs.Args()
	if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
		return nil
	}
	for _, a := range rest {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name != "" && (fs.Lookup(name) != nil || name == "h" || name == "help") {
			return &usageError{msg: fmt.Sprintf("flag %s must come before the arguments", a)}
		}
	}
	return nil
}

// nearestFlag returns the flag of fs nearest to the undefined one that err,
// from fs.Parse, names ("-R" for "-r", "-l" for "-la"), or "" if err names
// none or no flag is near.
func nearestFlag(fs *flag.FlagSet, err error) string {
	bad, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	bad = strings.TrimPrefix(bad, "-")
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		d := editDistance(bad, f.Name)
		if strings.EqualFold(bad, f.Name) {
			d = 0
		} else if len(f.Name) == 1 && len(bad) > 1 && strings.EqualFold(bad[:1], f.Name) {
			d = min(d, 1) // -la: the first letter of combined short flags.
		} else if len(bad) > 1 && strings.HasPrefix(f.Name, bad) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && best != "" && len(f.Name) < len(best) {
			best, bestD = f.Name, d
		}
	})
	switch {
	case best == "",
		bestD == 1 && len(bad) < 2, // -z is as near -l as any one letter.
		bestD == 2 && len(bad) < 6:
		return ""
	}
	return "-" + best
}

// editDistance returns the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// expandShortFlags splits combined one-letter flags, as other tools take
// them: "-lR" becomes "-l -R" when fs knows no flag "lR" and every letter
// names one of its boolean flags. Arguments after the first that is not a
// flag, or after "--", are left as they are.
func expandShortFlags(fs *flag.FlagSet, args []string) []string {
	var out []string
	for i, a := range args {
		if a == "--" || !strings.HasPrefix(a, "-") || len(a) < 2 {
			return append(out, args[i:]...)
		}
		name := a[1:]
		if len(name) < 2 || strings.HasPrefix(name, "-") || strings.Contains(name, "=") || fs.Lookup(name) != nil {
			out = append(out, a)
			continue
		}
		split := true
		for _, r := range name {
			f := fs.Lookup(string(r))
			if f == nil {
				split = false
				break
			}
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
				split = false
				break
			}
		}
		if !split {
			out = append(out, a)
			continue
		}
		for _, r := range name {
			out = append(out, "-"+string(r))
		}
	}
	return out
}

// Client returns the network client, connecting on first use.
func (st *State) Client(ctx context.Context) (spindle.Client, error) {
	if st.client != nil {
		return st.client, nil
	}
	cfg, err := st.loadConfig()
	if err != nil {
		return nil, err
	}
	if st.NewClient == nil {
		return nil, errors.New("no network client built in")
	}
	c, err := st.NewClient(ctx, cfg)
	if err != nil {
		return nil, st.dialFailed(cfg, err)
	}
	st.client = c
	return c, nil
}

// dialFailed reports why st.NewClient could not connect as cfg's user,
// with hints, and returns errFailed.
func (st *State) dialFailed(cfg *Config, err error) error {
	var ie *identityError
	if errors.As(err, &ie) {
		st.errorf("%s: %s", ie.what, describeAll(ie.err))
		for _, h := range ie.hints {
			st.hint("%s", h)
		}
		return errFailed
	}
	st.errorf("cannot connect: %s", describeAll(err))
	st.connectHint(cfg, err)
	return errFailed
}

// eachPath runs fn on every PATH argument, of which there must be at least
// one, with the command's client. A failure is reported (see fail) and the
// next path tried; eachPath returns errFailed if any path failed.
func (st *State) eachPath(ctx context.Context, paths []string, fn func(c spindle.Client, i int, name spindle.PathName) error) error {
	if len(paths) == 0 {
		return usagef("want at least one PATH")
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	failed := false
	for i, arg := range paths {
		name, err := st.spinPath(c, arg)
		if err == nil {
			err = st.fail(string(name), fn(c, i, name))
		}
		if err != nil {
			failed = true
		}
	}
	if failed {
		return errFailed
	}
	return nil
}

// terminal reports whether w is a terminal.
func (st *State) terminal(w io.Writer) bool {
	if st.isTerminal != nil {
		return st.isTerminal(w)
	}
	return isTerminal(w)
}

// isTerminal reports whether w is an *os.File open on a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printName returns name as spin prints it in results: as it is if every
// character in it is printable (strconv.IsPrint) and it does not start
// with a double quote, and quoted as by strconv.Quote otherwise.
func printName[S ~string](name S) string {
	s := string(name)
	if printable(s) && !strings.HasPrefix(s, `"`) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether s is valid UTF-8 made of printable characters
// only (strconv.IsPrint: letters, marks, numbers, punctuation, symbols and
// the ASCII space).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// escapeLine returns s with every character that is not printable, and
// every byte that is not valid UTF-8, written as a Go escape (\n, \x1b,
// \u2028), so that a diagnostic holding a name from a node stays one line
// and cannot move the cursor.
func escapeLine(s string) string {
	if printable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}

// The longest word, in characters, that a diagnostic shows whole (see
// shorten), and how much of a longer one it shows: its start and its end.
const (
	maxWord  = 200
	wordHead = 60
	wordTail = 20
)

// shorten returns msg with each word (run of characters other than spaces)
// longer than maxWord characters cut to its start and end, with "..."
// between them and its length after it, so that a 10,000-character name
// does not fill the terminal:
//
//	ann@example.com/aaaaaaaa...aaaa (10016 characters): does not exist
//
// A colon or comma that ends the word stays after the length.
func shorten(msg string) string {
	words := strings.SplitAfter(msg, " ")
	changed := false
	for i, w := range words {
		body := strings.TrimRight(w, " ")
		trail := w[len(body):]
		word := strings.TrimRight(body, ":,;")
		punct := body[len(word):]
		r := []rune(word)
		if len(r) <= maxWord {
			continue
		}
		words[i] = fmt.Sprintf("%s...%s (%d characters)%s%s", string(r[:wordHead]), string(r[len(r)-wordTail:]), len(r), punct, trail)
		changed = true
	}
	if !changed {
		return msg
	}
	return strings.Join(words, "")
}

// errorf prints "spin: <command>: message" to stderr, with the characters
// of message that are not printable escaped (see escapeLine) and very long
// words shortened (see shorten).
func (st *State) errorf(format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	msg := shorten(escapeLine(fmt.Sprintf(format, args...)))
	if st.cmd != "" {
		fmt.Fprintf(st.Stderr, "spin: %s: %s\n", st.cmd, msg)
	} else {
		fmt.Fprintf(st.Stderr, "spin: %s\n", msg)
	}
}

// hint prints "spin: hint: message" to stderr.
func (st *State) hint(format string, args ...any) {
	st.mu.Lock()
	defer st.mu.Unlock()
	fmt.Fprintf(st.Stderr, "spin: hint: %s\n", shorten(escapeLine(fmt.Sprintf(format, args...))))
}

// warned reports whether err is a *spindle.Warning: the operation took
// effect, but not everything that follows from it was done. It prints each
// problem as "spin: <command>: warning: <path>: <reason>"; the command then
// goes on as after success and exits 0.
func (st *State) warned(err error) bool {
	return st.warnedIn(err, "")
}

// warnedIn is warned for a command whose change governs the files under
// scope (an Access file's directory, a Group file owner's tree), which
// its hints then name.
func (st *State) warnedIn(err error, scope spindle.PathName) bool {
	w, ok := err.(*spindle.Warning)
	if !ok {
		return false
	}
	for _, p := range w.Problems {
		st.errorf("warning: %s", describeAll(p))
		st.warningHint(p, scope)
	}
	return true
}

// warningHint prints a hint that tells what to do about p, one of the
// problems of a *spindle.Warning, if any; scope is as for warnedIn.
func (st *State) warningHint(p error, scope spindle.PathName) {
	var re *client.ReshareError
	var se *spindle.Error
	switch {
	case scope != "" && errors.As(p, &se) && access.IsGroupFile(se.Path) &&
		(errors.Is(p, spindle.Permission) || errors.Is(p, spindle.Private)):
		// Another user's group that this user may not read: only its
		// owner can change that.
		if gp, err := spindle.Parse(se.Path); err == nil && st.Config != nil {
			st.hint("ask %s to let you read it (read: %s in an Access file of %s/Group), then run: spin share -fix -R %s",
				printName(gp.User()), printName(st.Config.Username), printName(gp.User()), scope)
		}
	case errors.As(p, &re) && re.Tree:
		st.hint("to finish, run: spin share -fix -R %s", re.Path)
	case errors.As(p, &re):
		st.hint("to finish, run: spin share -fix %s", re.Path)
	case errors.Is(p, client.ErrOpenWildcard):
		var se *spindle.Error
		if errors.As(p, &se) && se.Path != "" {
			dir := se.Path
			if sp, err := spindle.Parse(se.Path); err == nil {
				dir = sp.Dir().Path()
			}
			st.hint("spin share %s lists whom it names", dir)
		}
	}
}

// fail prints err as a diagnostic about path (a spin path or a local file
// name, as the user gave it; the path inside err is preferred when set),
// adds a hint where one helps, and returns errFailed.
func (st *State) fail(path string, err error) error {
	if err == nil || err == errFailed {
		return err
	}
	p, msg := describe(err)
	if p == "" {
		p = path
	}
	if p != "" {
		st.errorf("%s: %s", p, msg)
	} else {
		st.errorf("%s", msg)
	}
	st.hintFor(p, err)
	return errFailed
}

// hintFor prints a hint that tells what to do about err on path, if any.
func (st *State) hintFor(path string, err error) {
	owner := spindle.UserName("")
	if p, perr := spindle.Parse(spindle.PathName(path)); perr == nil {
		owner = p.User()
	}
	me := spindle.UserName("")
	switch {
	case st.client != nil:
		me = st.client.User()
	case st.Config != nil:
		me = st.Config.Username
	}
	var down *client.SequencerDownError
	if errors.As(err, &down) {
		st.sequencerHint(down, me)
		return
	}
	if errors.Is(err, client.ErrNotAdmitted) {
		st.hint("ask the node's operator to admit you (spin node -writers %s), or sign up through another node: %s", printName(me), commandLine(st.Config, "init", "-node", "ADDR", string(me)))
		return
	}
	if errors.Is(err, spindle.Permission) && hasOp(err, p2p.BlockServerOp) {
		// The node refused the blocks of a put: it does not admit the
		// writer (a node started again without its -writers, issue 31).
		st.hint("the node you reach does not admit you as a writer; its operator admits writers with spin node -writers")
		return
	}
	var refused *p2p.RefusedError
	if errors.As(err, &refused) && owner != "" && owner != me {
		// The node that hosts another user's tree is down, or cut off:
		// nothing the reader can change but the time.
		st.hint("node %s, which hosts the tree of %s, cannot be reached now: try again later; %s can add a mirror that serves reads while it is off (spin user -dirs)", refused.To, printName(owner), printName(owner))
		return
	}
	if hasOp(err, wire.NotHostedOp) {
		st.hint("the node you reach does not host the tree of %s; its operator admits writers with spin node -writers", printName(owner))
		return
	}
	if errors.Is(err, client.ErrNoDirHost) {
		if owner == "" || owner == me {
			st.hint("no node hosts your tree: run spin signup, through a node that admits you (spin node -writers)")
		} else {
			st.hint("no node hosts the tree of %s: they must run spin signup", printName(owner))
		}
		return
	}
	switch spindle.KindOf(err) {
	case spindle.Permission, spindle.Private:
		if hasOp(err, wire.SessionOp) {
			// The node would not sign this client in: its user has no
			// key record yet. Access files are not the matter.
			st.hint("you are not signed up, so no node will sign you in: %s", commandLine(st.Config, "signup"))
			break
		}
		if st.accessHint(path, err, me) {
			break
		}
		if owner == "" || spindle.BaseUser(owner) == spindle.BaseUser(me) {
			break
		}
		if st.client != nil && spindle.KindOf(err) == spindle.Private {
			// Key records are public: a name nobody registered is
			// more likely a typo than a private tree.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, lerr := st.client.LookupUser(ctx, owner)
			cancel()
			if errors.Is(lerr, spindle.NotExist) {
				st.hint("no user %s is registered: check the spelling of the name", printName(owner))
				break
			}
		}
		st.hint("%s must list you in an Access file", printName(owner))
	case spindle.Damaged:
		if owner != "" {
			st.hint("the directory log of %s is damaged on the node that answered; its operator must run: spin node -repair %s", owner, owner)
		}
	case spindle.CannotDecrypt:
		if owner != "" && owner != me {
			st.hint("ask %s to run: spin share -fix %s", owner, path)
		} else if owner != "" {
			st.hint("run: spin share -fix %s", path)
		}
	}
}

// hasOp reports whether an *spindle.Error of Op op is in err's chain,
// as a node's error is once it came over the wire and the client wrapped
// it in its own.
func hasOp(err error, op spindle.Op) bool {
	for err != nil {
		if e, ok := err.(*spindle.Error); ok && e.Op == op {
			return true
		}
		err = errors.Unwrap(err)
	}
	return false
}

// describe returns the path an error names, if any, and the rest of it as
// a diagnostic: the kind's text followed by the underlying cause, without
// the chain of operations, which means nothing to a user.
func describe(err error) (path, msg string) {
	if errors.Is(err, context.Canceled) {
		path, _ = describeParts(err)
		return path, "interrupted"
	}
	return describeParts(err)
}

func describeParts(err error) (path, msg string) {
	var pe *fs.PathError
	var se *spindle.Error
	switch {
	case errors.As(err, &se) && err != error(se):
		// A wrapper (fmt.Errorf with %w, or an error type of its own)
		// whose text holds se's: keep its words around se's described.
		outer, inner := err.Error(), se.Error()
		if !strings.Contains(outer, inner) {
			return describeParts(se)
		}
		path, msg = describeParts(se)
		return path, flatten(strings.Replace(outer, inner, msg, 1))
	case errors.As(err, &se):
		kind := spindle.Other
		var cause error
		other := "" // A second path further down the chain, such as a rename's target.
		for e := error(se); e != nil; {
			s, ok := e.(*spindle.Error)
			if !ok {
				cause = e
				break
			}
			switch {
			case path == "":
				path = string(s.Path)
			case other == "" && s.Path != "" && string(s.Path) != path:
				other = string(s.Path)
			}
			if kind == spindle.Other && s.Kind != spindle.Other {
				kind = s.Kind
			}
			e = s.Err
		}
		var parts []string
		if kind != spindle.Other {
			parts = append(parts, kind.Error())
		}
		if other != "" {
			parts = append(parts, other)
		}
		if cause != nil {
			if cp, cmsg := describe(cause); cmsg != kind.Error() {
				if cp != "" && cp != path {
					cmsg = cp + ": " + cmsg
				}
				if kind != spindle.Other && spindle.SaysKind(cmsg, kind) {
					// The cause says the kind itself (it came as
					// text, over the wire or through fmt.Errorf).
					parts = parts[1:]
				}
				parts = append(parts, cmsg)
			}
		}
		if len(parts) == 0 {
			parts = append(parts, se.Error())
		}
		return path, strings.Join(parts, ": ")
	case errors.As(err, &pe):
		return pe.Path, flatten(pe.Err.Error())
	}
	return "", flatten(err.Error())
}

// flatten returns msg, an error's text, on one line: a text of several
// lines (libp2p's dial errors list each address tried on a line of its
// own, "  * [/ip4/...] dial backoff"; errors.Join puts each error on one)
// has its lines, trimmed of spaces and list bullets, joined by "; ". Names
// in a diagnostic are escaped instead (see errorf): this is for the causes,
// whose lines are parts of one message.
func flatten(msg string) string {
	if !strings.ContainsAny(msg, "\r\n") {
		return msg
	}
	var parts []string
	for _, line := range strings.FieldsFunc(msg, func(r rune) bool { return r == '\n' || r == '\r' }) {
		line = strings.TrimSpace(line)
		line = strings.TrimSpace(strings.TrimPrefix(line, "* "))
		if line != "" {
			parts = append(parts, line)
		}
	}
	return strings.Join(parts, "; ")
}

// describeAll is describe with the path kept in the message.
func describeAll(err error) string {
	p, msg := describe(err)
	if p != "" {
		return p + ": " + msg
	}
	return msg
}

// gotArgs returns "got 1 argument" or "got N arguments", for usage errors.
func gotArgs(n int) string {
	return fmt.Sprintf("got %d %s", n, plural(n, "argument"))
}

// plural returns word for one and its plural, with an s, for other counts.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
