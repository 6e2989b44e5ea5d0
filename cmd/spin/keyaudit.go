package main

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"spindle.dev"
	"spindle.dev/client"
)

const keyAuditText = `spin key audit replays every version of USER's key record (yours if none
is given) from the key cluster's log, each with its proof, and prints one
line per version: its place in the log, its key (the first 12 hex digits of
the key's SHA-256), who signed it, and "ok" if it is signed by the key of
the version before it (the first by its own key; a +suffix user's by its
base user). A version that is not is a change the key cluster accepted
without the owner's say: audit names it and exits 1. A proof that does not
verify, or a history that hides versions this client has seen, fails the
audit with an integrity error.
`

const keyAuditExample = `    $ spin key audit
    ann@example.com: ... proved in the key log
    version 1 at log index ...: key ... signed by ann@example.com: ok
    ...
`

const keyLogText = `spin key log prints the key cluster's current signed tree head, once it
has checked that a key this client trusts signed it and that it extends
every head the client has seen before (the head is kept in the key log
next to your config): the number of records, the tree hash, the signer,
and the signed note itself, which anyone holding the cluster's verifier
key can check. The head comes with the proof of your own record, so you
must have signed up.
`

const keyLogExample = `    $ spin key log
    records:   ...
    hash:      ...
    ...
`

// keyAuditor is a client that can audit a key record's history and show
// the key log's head.
type keyAuditor interface {
	KeyAudit(ctx context.Context, name spindle.UserName) (*client.KeyAuditReport, error)
	KeyHead(ctx context.Context) (*client.KeyHead, error)
}

// keyClient returns the command's client as a keyAuditor.
func (st *State) keyClient(ctx context.Context) (keyAuditor, spindle.UserName, error) {
	c, err := st.Client(ctx)
	if err != nil {
		return nil, "", err
	}
	k, ok := c.(keyAuditor)
	if !ok {
		return nil, "", st.fail("", spindle.E(spindle.Invalid, "this client cannot check the key log"))
	}
	return k, c.User(), nil
}

func runKeyAudit(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 1 {
		return usagef("want at most one USER, got %d arguments", flags.NArg())
	}
	k, me, err := st.keyClient(ctx)
	if err != nil {
		return err
	}
	user := me
	if flags.NArg() == 1 {
		user = spindle.UserName(flags.Arg(0))
	}
	rep, err := k.KeyAudit(ctx, user)
	if err != nil {
		return st.fail(string(user), err)
	}
	fmt.Fprintf(st.Stdout, "%s: %d %s, each proved in the key log\n", printName(rep.User), len(rep.Versions), plural(len(rep.Versions), "version"))
	for i, v := range rep.Versions {
		u := v.User
		line := fmt.Sprintf("version %d at log index %d: key %s signed by %s", u.Version, v.Index, keyID(u.PublicKey), printName(u.SignedBy))
		if i > 0 && rep.Versions[i-1].User.PublicKey != u.PublicKey {
			line += fmt.Sprintf(" (new key; the old one signs the tree's entries up to %d)", u.DirSeq)
		}
		status := "ok"
		if v.Problem != "" {
			status = "NOT OK: " + v.Problem
		}
		fmt.Fprintf(st.Stdout, "%s: %s\n", line, status)
	}
	if bad := rep.Problems(); len(bad) > 0 {
		st.errorf("%s: %d of %d %s not made with the key before %s: the key cluster accepted changes the owner did not sign",
			printName(rep.User), len(bad), len(rep.Versions), plural(len(rep.Versions), "version"), map[bool]string{true: "it", false: "them"}[len(bad) == 1])
		return errFailed
	}
	return nil
}

// keyID returns a short name of key: the first 12 hex digits of its hash.
func keyID(key spindle.PublicKey) string {
	h, err := spindle.KeyHash(key)
	if err != nil {
		return "(malformed key)"
	}
	return hex.EncodeToString(h[:6])
}

func runKeyLog(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("spin key log takes no arguments")
	}
	k, me, err := st.keyClient(ctx)
	if err != nil {
		return err
	}
	h, err := k.KeyHead(ctx)
	if err != nil {
		st.fail(string(me), err)
		if errors.Is(err, spindle.NotExist) {
			st.hint("the head comes with the proof of your own key record: run spin signup first")
		}
		return errFailed
	}
	fmt.Fprintf(st.Stdout, "records:   %d\n", h.Tree.N)
	fmt.Fprintf(st.Stdout, "hash:      %s\n", h.Tree.Hash)
	for _, s := range h.Signers {
		fmt.Fprintf(st.Stdout, "signed by: %s\n", s)
	}
	fmt.Fprintf(st.Stdout, "checked:   signed by a trusted key; extends every head seen before\n")
	fmt.Fprintf(st.Stdout, "\n%s", h.Note)
	return nil
}
