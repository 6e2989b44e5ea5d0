package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/pack"
)

const suffixUsage = `Usage:
    spin suffix [-out FILE] SUFFIX

Creates the user you+SUFFIX (ann+camera@example.com for ann@example.com
and SUFFIX camera): a user of its own, with its own keys and tree, that
only you may register. Give it to a program or a device that should not
hold your keys, and grant it in your Access files what it needs, as to
anyone else. Suffix makes its keys from a new recovery secret, printed
once; registers it with the key cluster, signed by you; writes its keys
and configuration next to yours; and signs it up on your node.

Options:
    -o, -out FILE   write its configuration to FILE (default: NAME.yaml next
                    to your config, its keys in NAME.keys)
    -h, -help       print this text

Example:
    $ spin suffix camera
    $ SPIN_CONFIG=$HOME/spin/ann+camera@example.com.yaml spin put report.pdf @/shot.pdf
`

func runSuffix(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	out := flags.String("out", "", "")
	flags.StringVar(out, "o", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usagef("want one SUFFIX, got %d %s", flags.NArg(), plural(flags.NArg(), "argument"))
	}
	cfg, err := st.loadConfig()
	if err != nil {
		return err
	}
	name, err := suffixedName(cfg.Username, flags.Arg(0))
	if err != nil {
		st.errorf("%s: %s", printName(flags.Arg(0)), err)
		return errFailed
	}
	file := *out
	if file == "" {
		file = filepath.Join(filepath.Dir(cfg.File), string(name)+".yaml")
	}
	if file, err = filepath.Abs(file); err != nil {
		return st.fail(*out, err)
	}
	secrets := keysDir(file)
	for _, f := range []string{file, secrets, keyLogFile(file)} {
		if fileExists(f) {
			st.errorf("%s already exists", f)
			st.hint("to act as %s, use: spin -config %s COMMAND; to make the user elsewhere, use: spin suffix -out FILE %s", name, file, flags.Arg(0))
			return errFailed
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	keys, secret, err := pack.Generate(name)
	if err != nil {
		return st.fail(string(name), err)
	}
	scfg := &Config{
		Username:  name,
		Keyserver: cfg.Keyserver,
		Node:      cfg.Node,
		Packing:   cfg.Packing,
		Secrets:   secrets,
		Verifier:  cfg.Verifier,
		File:      file,
		Log:       st.Log,
	}
	// Everything is written before the name is registered, so that a
	// registered name never lacks its keys; a refusal removes it all.
	if err := writeSuffixed(scfg, keys, keyLogFile(cfg.File)); err != nil {
		return st.fail(file, err)
	}
	if err := c.SignupSuffixed(ctx, keys); err != nil {
		removeSuffixed(scfg)
		st.fail(string(name), err)
		if errors.Is(err, spindle.Exist) {
			st.hint("names are never reassigned: use the configuration %s was made with, or choose another suffix", name)
		}
		return errFailed
	}
	o := st.Stdout
	fmt.Fprintf(o, "Registered %s, signed by %s.\n", name, c.User())
	fmt.Fprintf(o, "Its recovery secret is:\n\n    %s\n\n", secret)
	fmt.Fprintf(o, "Keep it safe: it makes the keys again (spin -config %s init -force -recover %s).\n", file, name)
	fmt.Fprintf(o, "Keys for %s are in %s\n", name, secrets)
	fmt.Fprintf(o, "Configuration written to %s\n", file)
	sc, err := st.NewClient(ctx, scfg)
	if err == nil {
		err = sc.Signup(ctx)
		if cerr := sc.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		st.fail(string(name), err)
		st.hint("finish with: spin -config %s signup", file)
		return errFailed
	}
	fmt.Fprintf(o, "To act as %s, give spin its configuration:\n", name)
	fmt.Fprintf(o, "    SPIN_CONFIG=%s spin ls @\n", file)
	fmt.Fprintf(o, "    spin -config %s ls @\n", file)
	fmt.Fprintf(o, "and grant it rights in your Access files, as in: write, create: %s\n", name)
	return nil
}

// suffixedName returns the +suffix user of base that arg names: a bare
// suffix (camera) or the whole name (ann+camera@example.com).
func suffixedName(base spindle.UserName, arg string) (spindle.UserName, error) {
	_, user, suffix, domain, err := spindle.ParseUser(base)
	if err != nil {
		return "", err
	}
	if suffix != "" {
		return "", fmt.Errorf("%s is itself a +suffix user: only its base user %s can make suffix users", base, spindle.BaseUser(base))
	}
	name := spindle.UserName(arg)
	if !strings.Contains(arg, "@") {
		name = spindle.UserName(user + "+" + arg + "@" + domain)
	}
	name, err = spindle.CleanUser(name)
	if err != nil {
		_, msg := describe(err)
		return "", fmt.Errorf("not a user name: %s", strings.TrimPrefix(msg, spindle.Invalid.Error()+": "))
	}
	if name == base || spindle.BaseUser(name) != base {
		return "", fmt.Errorf("not a +suffix user of %s: only its base user may make it", base)
	}
	return name, nil
}

// writeSuffixed saves keys and writes cfg, and a copy of the key log in
// keyLog so that the new user trusts the key cluster its base user trusts
// instead of whatever its node says on first use.
func writeSuffixed(cfg *Config, keys *pack.Keys, keyLog string) error {
	if err := keys.Save(cfg.Secrets); err != nil {
		return err
	}
	if data, err := os.ReadFile(keyLog); err == nil {
		if err := spindle.ReplaceFile(keyLogFile(cfg.File), data, 0o600, true); err != nil {
			removeSuffixed(cfg)
			return err
		}
	}
	data, err := cfg.Marshal()
	if err == nil {
		err = spindle.ReplaceFile(cfg.File, data, 0o600, true)
	}
	if err != nil {
		removeSuffixed(cfg)
		return err
	}
	return nil
}

// removeSuffixed removes what writeSuffixed wrote.
func removeSuffixed(cfg *Config) {
	os.RemoveAll(cfg.Secrets)
	os.Remove(keyLogFile(cfg.File))
	os.Remove(cfg.File)
}
