package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"spindle.dev"
	"spindle.dev/pack"
)

const infoUsage = `Usage:
    spin info PATH...

Describes each PATH in detail: kind, writer, packing, size, time, sequence
number, blocks (and, for a file stored erasure-coded, its code and each
block's shards), the users holding a wrapped key (who can decrypt it: "all
(key wrapped for all)" if anyone can), and the Access file that governs it.
Key holders it cannot name, and the groups it cannot read to name them, are
reported as warnings. A link is described, not followed.

Options:
    -h, -help   print this text

Example:
    $ spin info @/docs/report.pdf
`

func runInfo(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	return st.eachPath(ctx, flags.Args(), func(c spindle.Client, i int, name spindle.PathName) error {
		e, err := c.Lookup(ctx, name, false)
		if err != nil {
			return err
		}
		if i > 0 {
			fmt.Fprintln(st.Stdout)
		}
		var readers []spindle.UserName
		var readersErr error
		if e.Packing == spindle.EEPack && !e.Attr.IsDir() && !e.Attr.IsLink() && !e.Attr.IsIncomplete() {
			readers, readersErr = c.Readers(ctx, name)
		}
		access, accessErr := c.WhichAccess(ctx, name)
		printInfo(st.Stdout, e, readers, access)
		if st.warned(readersErr) {
			// Who else holds keys is not known: said on stderr, not hidden.
			readersErr = nil
		}
		readersErr = st.fail(string(name), readersErr)
		if err := st.fail(string(name), accessErr); err != nil {
			return err
		}
		return readersErr
	})
}

// printInfo prints the description of e, with the readers holding wrapped
// keys and the governing Access file (nil if none).
func printInfo(w io.Writer, e *spindle.DirEntry, readers []spindle.UserName, access *spindle.DirEntry) {
	field := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-9s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	field("name", "%s", printName(e.Name))
	kind := "file"
	switch {
	case e.Attr.IsDir():
		kind = "directory"
	case e.Attr.IsLink():
		kind = "link"
	}
	if e.Attr.IsIncomplete() {
		kind += " (you may list it but not read it)"
	}
	field("kind", "%s", kind)
	if e.Attr.IsLink() {
		field("target", "%s", printName(e.Link))
	}
	if e.Writer != "" {
		field("writer", "%s", printName(e.Writer))
	}
	// Of a file you may not read the client keeps its name alone, the
	// only part of it proved.
	if e.Attr.IsDir() || e.Attr.IsLink() || !e.Attr.IsIncomplete() {
		if !e.Attr.IsDir() && !e.Attr.IsLink() {
			field("packing", "%s", e.Packing)
			field("size", "%d", e.Size)
		}
		field("time", "%s", formatTime(e.Time))
		field("sequence", "%d", e.Sequence)
	}
	if !e.Attr.IsDir() && !e.Attr.IsLink() && !e.Attr.IsIncomplete() {
		field("blocks", "%d", len(e.Blocks))
		code, stripes, _ := pack.Stripes(e)
		if !code.IsZero() {
			field("erasure", "%d+%d: each block stored as %d shards, any %d of which give it back", code.K, code.M, code.K+code.M, code.K)
		}
		for i, b := range e.Blocks {
			fmt.Fprintf(w, "%-9s %d: %s offset %d size %d\n", "", i, b.Ref, b.Offset, b.Size)
			if i < len(stripes) {
				for j, r := range stripes[i] {
					fmt.Fprintf(w, "%-9s    shard %d: %s\n", "", j, r)
				}
			}
		}
		switch e.Packing {
		case spindle.EEPack:
			field("readers", "%s", joinReaders(readers, true))
		default:
			field("readers", "anyone who may read it (%s is not encrypted)", e.Packing)
		}
	}
	if access != nil {
		field("access", "%s", printName(access.Name))
	} else {
		p, _ := spindle.Parse(e.Name)
		field("access", "none: only %s has access", printName(p.User()))
	}
}

// joinUsers lists users separated by commas, "all" for AllUsers.
func joinUsers(users []spindle.UserName) string { return joinReaders(users, false) }

// joinReaders is joinUsers that, if wrappedForAll, says of all that the
// file's key is wrapped for all, so that anyone can in fact decrypt it.
func joinReaders(users []spindle.UserName, wrappedForAll bool) string {
	if len(users) == 0 {
		return "none"
	}
	s := make([]string, len(users))
	for i, u := range users {
		switch {
		case u == spindle.AllUsers && wrappedForAll:
			s[i] = "all (key wrapped for all)"
		case u == spindle.AllUsers:
			s[i] = "all"
		default:
			s[i] = printName(u)
		}
	}
	return strings.Join(s, ", ")
}
