package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"spindle.dev"
	"spindle.dev/access"
)

const putUsage = `Usage:
    spin put [-packing P] [SRC] PATH

Stores the local file SRC, or stdin if SRC is - or left out, as the spin
file PATH, replacing any file there. Putting an Access or Group file
re-wraps the keys of the files it governs, so that new readers can read
them at once; it is refused, and nothing changes, if a line is malformed. A
group it names that does not exist yet, or that you cannot read, is
allowed and reported with a warning: its members get keys once you can
read it (spin share -fix). So is an Access file that does not give you,
its owner, write, create and delete: you keep read and list, and may
still change Access and Group files, but lose the rest there.

Options:
    -p, -packing P   how to store the file: ee (encrypted), eeintegrity (signed
                     plain text) or plain; default: the config's packing, or ee
    -h, -help        print this text

Example:
    $ spin put report.pdf @/docs/report.pdf
    $ printf '*: ann@example.com\nread: bob@example.com\n' | spin put @/docs/Access
`

func runPut(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	packingName := flags.String("packing", "", "")
	flags.StringVar(packingName, "p", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	args = flags.Args()
	switch {
	case len(args) == 1 && isSpinPath(args[0]):
		args = []string{"-", args[0]} // As Upspin's put: stdin.
	case len(args) != 2:
		return usagef("want SRC and PATH, or a spin PATH alone to read stdin; %s", gotArgs(len(args)))
	}
	packing, err := parsePacking(*packingName)
	if err != nil {
		return err
	}
	src, dst := args[0], args[1]
	if dirPath(dst) {
		st.errorf("%s: a directory path given for a file: PATH must name the file to write", dst)
		st.hint("to put %s into the directory, use: spin cp %s %s", src, src, dst)
		return errFailed
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	name, err := st.spinPath(c, dst)
	if err != nil {
		return err
	}
	if src == "-" {
		var pb *progress
		if f, ok := st.Stdin.(*os.File); ok {
			if info, err := f.Stat(); err == nil && info.Mode().IsRegular() {
				pb = st.progress(info.Size(), fmt.Sprintf("put %s", base(name)))
			}
		}
		_, err := c.Put(ctx, name, pb.reader(st.Stdin), packing, nil)
		if st.warnedIn(err, shareScope(name)) {
			err = nil
		}
		pb.done(err == nil)
		if err != nil {
			return st.putFailed(name, err)
		}
		st.warnKeyless(ctx, c, name)
		return nil
	}
	return st.putFile(ctx, c, src, name, packing, true)
}

// parsePacking parses the value of a -packing flag; "" means the user's
// default.
func parsePacking(s string) (spindle.Packing, error) {
	if s == "" {
		return spindle.UnknownPack, nil
	}
	p, err := spindle.ParsePacking(s)
	if err != nil {
		return 0, usagef("-packing: unknown packing %q (want ee, eeintegrity or plain)", s)
	}
	return p, nil
}

// putFile stores the local file src as name, with a progress bar of its
// own if bar is set and the file is large.
func (st *State) putFile(ctx context.Context, c spindle.Client, src string, name spindle.PathName, packing spindle.Packing, bar bool) error {
	f, err := os.Open(src)
	if err != nil {
		return st.fail(src, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return st.fail(src, err)
	}
	if info.IsDir() {
		st.errorf("%s: is a directory", src)
		st.hint("to copy a directory, use: spin cp -R %s %s", src, name)
		return errFailed
	}
	var pb *progress
	if bar && info.Mode().IsRegular() {
		pb = st.progress(info.Size(), fmt.Sprintf("put %s", base(name)))
	}
	_, err = c.Put(ctx, name, pb.reader(f), packing, nil)
	if st.warnedIn(err, shareScope(name)) {
		err = nil
	}
	pb.done(err == nil)
	if err != nil {
		return st.putFailed(name, err)
	}
	st.warnKeyless(ctx, c, name)
	return nil
}

// shareScope returns what a put of name re-shares: for an Access file its
// directory, for a Group file its owner's tree, and "" for other files.
func shareScope(name spindle.PathName) spindle.PathName {
	p, err := spindle.Parse(name)
	switch {
	case err != nil:
		return ""
	case access.IsAccessFile(name):
		return p.Dir().Path()
	case access.IsGroupFile(name):
		return p.First(0).Path()
	}
	return ""
}

// warnKeyless warns, after an Access or Group file is put as name, about
// the users it names who have no key record: a misspelled name passes
// parsing, and such a user gets keys only after signing up. For an Access
// file it also warns when the file takes rights from the owner (see
// warnOwnerLeftOut).
func (st *State) warnKeyless(ctx context.Context, c spindle.Client, name spindle.PathName) {
	isAccess := access.IsAccessFile(name)
	if !isAccess && !access.IsGroupFile(name) {
		return
	}
	f, err := c.Open(ctx, name)
	if err != nil {
		return
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return
	}
	var names []spindle.UserName
	var a *access.Access
	if isAccess {
		a, err = access.Parse(name, data)
		if err != nil {
			return
		}
		names = a.Names()
	} else {
		g, err := access.ParseGroup(name, data)
		if err != nil {
			return
		}
		names = g.Names()
	}
	var keyless []string
	for _, u := range names {
		if _, err := c.LookupUser(ctx, u); errors.Is(err, spindle.NotExist) {
			keyless = append(keyless, string(u))
		}
	}
	if len(keyless) > 0 {
		st.errorf("warning: %s: no key record for %s", name, strings.Join(keyless, ", "))
		st.hint("check the spelling; a user who has not signed up yet gets keys when they sign up")
	}
	if a != nil {
		st.warnOwnerLeftOut(ctx, c, a)
	}
}

// warnOwnerLeftOut warns when the Access file a does not grant its owner
// write, create or delete, directly or through a wildcard, all or a group:
// the owner keeps read and list, and may still change Access and Group
// files, but can no longer write, create or delete other files in the
// directory a governs. Such a file is allowed, as in Upspin, but is more
// often a mistake than a wish (issue 31). If a group cannot be read, it
// says nothing rather than guess.
func (st *State) warnOwnerLeftOut(ctx context.Context, c spindle.Client, a *access.Access) {
	p, err := spindle.Parse(a.Path())
	if err != nil {
		return
	}
	dir := p.Dir().Path()
	load := func(g spindle.PathName) (*access.Group, error) {
		f, err := c.Open(ctx, g)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		data, err := io.ReadAll(f)
		if err != nil {
			return nil, err
		}
		return access.ParseGroup(g, data)
	}
	var lost []string
	for _, r := range []access.Right{access.Write, access.Create, access.Delete} {
		ok, err := a.Can(a.Owner(), r, dir, load)
		if err != nil {
			return
		}
		if !ok {
			lost = append(lost, r.String())
		}
	}
	if len(lost) == 0 {
		return
	}
	line := fmt.Sprintf("%s: %s", strings.Join(lost, ", "), a.Owner())
	if len(lost) == 3 {
		line = fmt.Sprintf("*: %s", a.Owner())
	}
	st.errorf("warning: %s: does not list its owner %s for %s: the owner can still read and list, but can no longer %s files in %s",
		a.Path(), a.Owner(), orList(lost), orList(lost), dir)
	st.hint("to keep those rights, add the line %q and put the file again", line)
}

// orList joins words as "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// putFailed reports a failed put to name.
func (st *State) putFailed(name spindle.PathName, err error) error {
	st.fail(string(name), err)
	if errors.Is(err, spindle.IsDir) {
		st.hint("PATH names the file to write; to copy into the directory, use: spin cp SRC %s", name)
	}
	return errFailed
}
