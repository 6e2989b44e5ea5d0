package main

// Hints that name the cause of a failure and the command that mends it:
// keys that cannot be loaded or are not the registered ones (no node can
// help with those), and a right that an Access file does not grant.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// An identityError is a failure to act as the configured user that no
// node can mend: keys that cannot be loaded, or that are not the ones
// registered for the user. State.Client prints it with its hints instead
// of asking whether the node is running.
type identityError struct {
	what     string // What failed, as "cannot load the keys of ann@example.com".
	err      error
	hints    []string
	mismatch bool // The keys load but are not the registered ones.
}

func (e *identityError) Error() string { return e.what + ": " + e.err.Error() }
func (e *identityError) Unwrap() error { return e.err }

// keysProblem returns the identityError for keys of cfg that pack.Load
// refused with err.
func keysProblem(cfg *Config, err error) error {
	again := initCommand(cfg, true)
	ie := &identityError{what: "cannot load the keys of " + string(cfg.Username), err: err}
	var open []string // Private key files others may read or write.
	for _, f := range []string{pack.PrivateKeyFile, pack.ArchiveFile} {
		f = filepath.Join(cfg.Secrets, f)
		if fi, err := os.Stat(f); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o077 != 0 {
			open = append(open, f)
		}
	}
	_, serr := os.Stat(filepath.Join(cfg.Secrets, pack.PrivateKeyFile))
	switch {
	case len(open) > 0:
		ie.hints = []string{"run: chmod 600 " + strings.Join(open, " ")}
	case errors.Is(serr, fs.ErrNotExist):
		ie.hints = []string{fmt.Sprintf("there are no keys in %s: if you moved them, move them back; else make them again from your recovery secret: %s", cfg.Secrets, again)}
	default:
		ie.hints = []string{fmt.Sprintf("the key files in %s are damaged: restore them from a backup, or make them again from your recovery secret: %s", cfg.Secrets, again)}
	}
	return ie
}

// keysOfOther returns the identityError for a config whose keys belong to
// another user.
func keysOfOther(cfg *Config, other spindle.UserName) error {
	file := cfg.File
	if file == "" {
		file = "the config"
	}
	return &identityError{
		what: "cannot load the keys of " + string(cfg.Username),
		err:  fmt.Errorf("the keys in %s are for %s", cfg.Secrets, other),
		hints: []string{
			fmt.Sprintf("set secrets: in %s to the keys of %s, or make them again from the recovery secret: %s", file, cfg.Username, initCommand(cfg, true)),
		},
	}
}

// keyMismatch returns the identityError for keys that load but are not
// the ones registered for cfg.Username, whose key record holds registered.
// A key directory that spin init -force moved aside and that holds the
// registered key is named, with the commands that put it back.
func keyMismatch(cfg *Config, err error, registered spindle.PublicKey) error {
	ie := &identityError{what: "cannot sign in as " + string(cfg.Username), err: err, mismatch: true}
	if f := pendingRotation(cfg.Secrets); f != "" {
		ie.hints = []string{fmt.Sprintf("a key rotation was stopped before it finished (the new secret waits in %s); finish it with: spin rotate", f)}
		return ie
	}
	if old := asideWithKey(cfg.Secrets, registered); old != "" {
		ie.hints = []string{fmt.Sprintf("the registered keys are in %s, moved aside by spin init -force; to use them again, run: mv %s %s.unregistered && mv %s %s",
			old, cfg.Secrets, cfg.Secrets, old, cfg.Secrets)}
		return ie
	}
	ie.hints = []string{
		fmt.Sprintf("the keys in %s are new ones (as spin init -force without -recover makes); make the registered ones again from your recovery secret: %s",
			cfg.Secrets, initCommand(cfg, true)),
		fmt.Sprintf("if %s is not yours, the name is taken: choose another with spin init -force", cfg.Username),
	}
	return ie
}

// asideWithKey returns the newest of the key directories that spin init
// -force moved aside from dir (dir.old-TIME) whose current key is key,
// or "" if there is none.
func asideWithKey(dir string, key spindle.PublicKey) string {
	olds, _ := filepath.Glob(dir + ".old-*")
	slices.Sort(olds)
	for i := len(olds) - 1; i >= 0; i-- {
		if k, err := pack.Load(olds[i]); err == nil && k.PublicKey() == key {
			return olds[i]
		}
	}
	return ""
}

// initCommand returns the spin init command that makes cfg again, with
// -force and, if recoverKeys is set, -recover: the flags that cfg's values
// need, so that the new config reaches the same node.
func initCommand(cfg *Config, recoverKeys bool) string {
	args := []string{"init", "-force"}
	if recoverKeys {
		args = append(args, "-recover")
	}
	if cfg.Node != "" {
		args = append(args, "-node", string(cfg.Node))
	}
	if len(cfg.Keyserver) > 0 && !(len(cfg.Keyserver) == 1 && cfg.Keyserver[0] == cfg.Node) {
		ks := make([]string, len(cfg.Keyserver))
		for i, k := range cfg.Keyserver {
			ks[i] = string(k)
		}
		args = append(args, "-keyserver", strings.Join(ks, ","))
	}
	if cfg.Verifier != "" {
		args = append(args, "-verifier", cfg.Verifier)
	}
	if cfg.Packing != "" && cfg.Packing != "ee" {
		args = append(args, "-packing", cfg.Packing)
	}
	if cfg.File != "" && cfg.Secrets != keysDir(cfg.File) {
		args = append(args, "-secrets", cfg.Secrets)
	}
	return commandLine(cfg, append(args, string(cfg.Username))...)
}

// commandLine returns the command line that runs spin with args as the
// user of cfg: with -config FILE first unless cfg is the usual
// $HOME/spin/config (or cfg is nil).
func commandLine(cfg *Config, args ...string) string {
	out := []string{"spin"}
	if cfg != nil && cfg.File != "" {
		if home, err := os.UserHomeDir(); err != nil || cfg.File != filepath.Join(home, "spin", "config") {
			out = append(out, "-config", cfg.File)
		}
	}
	return strings.Join(append(out, args...), " ")
}

// sequencerHint follows a write that failed because the sequencer of a
// tree cannot be reached with what to do. For the user's own tree: the
// failover when a mirror holds the newest head, else to start the
// sequencer again. For another's tree: that the owner can fail over.
func (st *State) sequencerHint(e *client.SequencerDownError, me spindle.UserName) {
	seq := peerID(e.Sequencer)
	up := e.CaughtUp()
	switch {
	case e.Owner != me && len(up) > 0:
		st.hint("writes to the tree of %s wait until dir host %s answers again, or until %s moves the sequencing to dir host %s with: spin user -failover", e.Owner, seq, e.Owner, peerID(up[0]))
	case e.Owner != me:
		st.hint("writes to the tree of %s wait until dir host %s answers again", e.Owner, seq)
	case len(up) > 0:
		st.hint("to make dir host %s the sequencer of your tree, run: %s", peerID(up[0]), commandLine(st.Config, "user", "-failover"))
	case len(e.Mirrors) == 0:
		st.hint("your writes wait until dir host %s answers again: ask its operator to start it (spin node -home DIR)", seq)
	default:
		st.hint("no mirror can take over without losing the entries it lacks: start dir host %s again (its operator runs spin node -home DIR); once a mirror has caught up, %s moves the sequencing to it", seq, commandLine(st.Config, "user", "-failover"))
		hosts := []string{peerID(e.Mirrors[0].Host), seq}
		for _, m := range e.Mirrors[1:] {
			hosts = append(hosts, peerID(m.Host))
		}
		st.hint("to move it now and lose those entries: %s", commandLine(st.Config, "user", "-dirs", strings.Join(hosts, ",")))
	}
}

// neededRights returns the rights of which the client operation that
// failed with err needed one, or nil if it cannot tell: write or create
// for a put or link (write to replace, create for a new name), create for
// a directory, delete for a remove or rename, read to open a file and
// list to list a directory. The operation is the outermost client one in
// err's chain.
func neededRights(err error) []access.Right {
	for ; err != nil; err = errors.Unwrap(err) {
		se, ok := err.(*spindle.Error)
		if !ok {
			continue
		}
		switch se.Op {
		case "client.Put", "client.PutLink":
			return []access.Right{access.Write, access.Create}
		case "client.MakeDirectory":
			return []access.Right{access.Create}
		case "client.Delete", "client.Rename":
			return []access.Right{access.Delete}
		case "client.Open":
			return []access.Right{access.Read}
		case "client.Glob":
			return []access.Right{access.List}
		}
	}
	return nil
}

// accessHint explains a Permission or Private error on path: it names
// the Access file that decides and the right it does not grant. It asks
// the node's WhichAccess, which answers only a user with some right on
// the path (as Upspin's did), with the Access file's text in its answer:
// so the hint tells the user nothing the node would not, and a user
// without any right gets no hint from it.
// It reports whether it printed a hint; it prints none when it cannot
// name a right that is missing (a group it cannot read, or a refusal
// that is not about rights, such as a node that does not host the tree).
func (st *State) accessHint(path string, err error, me spindle.UserName) bool {
	if st.client == nil || me == "" {
		return false
	}
	needed := neededRights(err)
	p, perr := spindle.Parse(spindle.PathName(path))
	if len(needed) == 0 || perr != nil {
		return false
	}
	owner := p.User()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := st.client
	if slices.Contains(needed, access.Write) {
		// Replacing needs write and making a new name create: ask
		// which, as the user may (some right on the name lets one
		// look it up).
		switch _, lerr := c.Lookup(ctx, p.Path(), false); {
		case lerr == nil:
			needed = []access.Right{access.Write}
		case errors.Is(lerr, spindle.NotExist):
			needed = []access.Right{access.Create}
		}
	}
	if (access.IsAccessFile(p.Path()) || access.IsGroupFile(p.Path())) && needed[0] != access.Read && needed[0] != access.List {
		if me == owner {
			return false
		}
		st.hint("only %s may write, create or delete the Access and Group files of %s", printName(owner), printName(owner))
		return true
	}
	ae, werr := c.WhichAccess(ctx, p.Path())
	if werr != nil || ae == nil {
		return false
	}
	a, aerr := access.Parse(ae.Name, ae.Inline)
	if aerr != nil {
		return false
	}
	loadGroup := func(name spindle.PathName) (*access.Group, error) {
		e, err := c.Lookup(ctx, name, false)
		if err != nil {
			return nil, err
		}
		return access.ParseGroup(name, e.Inline)
	}
	var held []string
	for _, r := range []access.Right{access.Read, access.Write, access.List, access.Create, access.Delete} {
		ok, cerr := a.Can(me, r, p.Path(), loadGroup)
		if cerr != nil && slices.Contains(needed, r) {
			return false // A group that may grant it could not be read.
		}
		if ok {
			if slices.Contains(needed, r) {
				return false // Not refused for want of this right.
			}
			held = append(held, r.String())
		}
	}
	missing := make([]string, len(needed))
	for i, r := range needed {
		missing[i] = r.String()
	}
	want := strings.Join(missing, " or ")
	if me == owner {
		st.hint("your Access file %s does not give you, its owner, the %s right: add %s to a %s line in it and put it again",
			printName(ae.Name), want, printName(me), missing[0]+":")
		return true
	}
	grants := "gives you no right here"
	if len(held) > 0 {
		grants = "gives you " + strings.Join(held, ", ") + " here"
	}
	st.hint("%s %s, but not the %s right: ask %s to add you to a %s line in it", printName(ae.Name), grants, want, printName(owner), missing[0]+":")
	return true
}

// warnIfRegistered warns, after spin init -force made new keys, when the
// name is registered with another key: the new keys cannot sign in, and
// the hints say how to get the registered ones back. It reports whether
// it warned.
func (st *State) warnIfRegistered(ctx context.Context, cfg *Config) bool {
	if cfg.Node == "" || st.NewClient == nil {
		return false
	}
	c, err := st.NewClient(ctx, cfg)
	var ie *identityError
	switch {
	case err == nil:
		c.Close()
		return false
	case !errors.As(err, &ie) || !ie.mismatch:
		return false // The next command will say what is wrong.
	}
	st.errorf("warning: %s is registered with another key: the new keys cannot sign in as %s", cfg.Username, cfg.Username)
	for _, h := range ie.hints {
		st.hint("%s", h)
	}
	return true
}

// connectHint follows a failure to connect with what to do: for a node
// that could not be reached, to start it; for a key log that is missing,
// to restore it or start it again. A refusal or a failed check (a key
// cluster that is not the trusted one) is explained by the error alone:
// asking whether the node runs would point the wrong way.
func (st *State) connectHint(cfg *Config, err error) {
	switch spindle.KindOf(err) {
	case spindle.NotExist:
		if log := keyLogFile(cfg.File); cfg.File != "" && !fileExists(log) {
			st.hint("restore %s from a backup, or start a new one, trusting the key cluster of the node as on first use: %s", log, initCommand(cfg, true))
		}
	case spindle.Integrity:
		if errors.Is(err, client.ErrOtherCluster) {
			st.hint("if you moved to another key cluster on purpose, trust its key instead: %s", initCommand(cfg, true))
		}
	case spindle.IO, spindle.Transient, spindle.Other:
		if cfg.Node != "" {
			if home := socketHome(string(cfg.Node)); home != "" {
				st.hint("is the node at %s running? start it again, with the flags it had: spin node -home %s", cfg.Node, home)
			} else {
				st.hint("is the node at %s running? start one with: spin node -home DIR", cfg.Node)
			}
			st.hint("or reach the network through another node, keeping your keys: %s", commandLine(cfg, "init", "-node", "ADDR", string(cfg.Username)))
		}
	}
}

// socketHome returns the home of the node whose Unix socket the address
// names (/unix/HOME/sock/p2p/ID, as spin node prints it), or "".
func socketHome(addr string) string {
	rest, ok := strings.CutPrefix(addr, "/unix")
	if !ok {
		return ""
	}
	sock, _, _ := strings.Cut(rest, "/p2p/")
	if filepath.Base(sock) != "sock" {
		return ""
	}
	return filepath.Dir(sock)
}
