package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"spindle.dev"
	"spindle.dev/client"
)

const auditUsage = `Usage:
    spin audit [USER]
    spin audit -evidence FILE

Checks the dir hosts' word about a tree. For your own tree: reads the
whole log, checks every entry's signature with the key its writer held,
and recomputes the tree map that the node's signed head commits to. Every
answer your client gets about your tree is proved against such a head; an
audit shows that the head itself is true. A node that dropped, reverted or
invented an entry fails it with an integrity error showing both values.

For the key cluster's log: publishes the newest head your client has
verified and compares it with the heads of that size others published
(gossip). Another head of that size signed by the members is a fork of
the key log, shown to you and to someone else: an integrity error, with
the two heads saved as evidence.

For every tree (yours, or USER's): compares the head its dir host serves
with the newest head published in the DHT and the newest your client has
seen. A host serving an older head than the published one (a rollback),
two signed heads for one sequence number (a fork), and a published head
not signed by a dir host the key record names are integrity errors. Only
the owner of a tree may read its log: it names every file and writer,
also those of private parts, so for another user's tree the audit checks
heads only (and the host serves a head only to users with a right in the
tree; the published head anyone may read).

The evidence of a rollback, fork or bad entry is saved beside your
config (evidence/), and can be shown to others: -evidence FILE checks
such a file against the user's key record and says what it proves. A
fork of the key cluster's own log (two heads its members signed that
cannot both be true: key-fork-cluster-...) is saved there too, and
checked against the members your client follows.

Options:
    -evidence FILE   check the evidence in FILE
    -h, -help        print this text

Example:
    $ spin audit
    ann@example.com: ... entries by ...; map root ...
    signed by 12D3KooW... at ...: true to the log
    published head: sequence ..., by 12D3KooW...
    key log: ... records; heads of that size published: ... agree, 0 not valid (ignored)
    $ spin audit -evidence ~/spin/evidence/fork-ann@example.com-...
    proved: fork of ann@example.com's log at sequence ...
`

// auditor is a client that can audit its user's tree.
type auditor interface {
	Audit(ctx context.Context) (*client.AuditReport, error)
	CheckHeads(ctx context.Context, owner spindle.UserName) (*client.HeadsReport, error)
	VerifyEvidence(ctx context.Context, e *client.Evidence) (string, error)
}

func runAudit(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	evidence := flags.String("evidence", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 1 || *evidence != "" && flags.NArg() != 0 {
		return usagef("spin audit takes at most one user, or -evidence FILE alone")
	}
	var ev *client.Evidence
	if *evidence != "" {
		data, err := os.ReadFile(*evidence)
		if err != nil {
			return st.fail("audit", spindle.E(spindle.IO, err))
		}
		if ev, err = client.UnmarshalEvidence(data); err != nil {
			return st.fail(*evidence, err)
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	a, ok := c.(auditor)
	if !ok {
		return st.fail("audit", spindle.E(spindle.Invalid, "this client cannot audit"))
	}
	if ev != nil {
		verdict, err := a.VerifyEvidence(ctx, ev)
		if err != nil {
			return st.fail(*evidence, err)
		}
		fmt.Fprintln(st.Stdout, verdict)
		return nil
	}
	owner := c.User()
	if flags.NArg() == 1 {
		if owner, err = spindle.CleanUser(spindle.UserName(flags.Arg(0))); err != nil {
			return usagef("spin audit: %v", err)
		}
	}
	if owner == c.User() {
		rep, err := a.Audit(ctx)
		if err != nil {
			return st.fail(string(owner), err)
		}
		h := rep.Head
		entries := "entries"
		if h.Seq == 1 {
			entries = "entry"
		}
		fmt.Fprintf(st.Stdout, "%s: %d %s by %d %s; map root %.12s\n",
			printName(h.User), h.Seq, entries, len(rep.Writers), plural(len(rep.Writers), "writer"), h.Root)
		if rep.Checkpoint > 0 {
			fmt.Fprintf(st.Stdout, "compacted: from a checkpoint at entry %d, signed by a dir host, with every entry it keeps\n", rep.Checkpoint)
		}
		fmt.Fprintf(st.Stdout, "signed by %s at %s: true to the log\n", h.Host, h.Time.Go().Local().Format(time.DateTime))
	}
	hr, err := a.CheckHeads(ctx, owner)
	if err != nil {
		return st.fail(string(owner), err)
	}
	if owner != c.User() {
		if hr.Served == nil && hr.Published == nil {
			// Nothing to compare: no right in the tree, or no tree.
			return st.fail(string(owner), hr.ServedErr)
		}
		if hr.Served != nil {
			fmt.Fprintf(st.Stdout, "%s: head at sequence %d, signed by %s at %s\n", printName(owner), hr.Served.Seq, hr.Served.Host, hr.Served.Time.Go().Local().Format(time.DateTime))
		} else {
			fmt.Fprintf(st.Stdout, "%s: the dir host serves you no head: %v\n", printName(owner), hr.ServedErr)
		}
	}
	if p := hr.Published; p != nil {
		fmt.Fprintf(st.Stdout, "published head: sequence %d, by %s at %s\n", p.Seq, p.Host, p.Time.Go().Local().Format(time.DateTime))
	} else {
		fmt.Fprintln(st.Stdout, "published head: none found in the DHT")
	}
	if g, ok := c.(keyGossiper); ok {
		rep, err := g.GossipKeyHead(ctx)
		switch {
		case errors.Is(err, spindle.Integrity):
			return st.fail("key log", err)
		case err != nil:
			fmt.Fprintf(st.Stdout, "key log: not compared with others: %v\n", err)
		default:
			fmt.Fprintf(st.Stdout, "key log: %d %s; heads of that size published: %d agree, %d not valid (ignored)\n",
				rep.Size, plural(int(rep.Size), "record"), rep.Agree, len(rep.Ignored))
		}
	}
	return nil
}

// keyGossiper is a client that compares its key log's head with the heads
// others published.
type keyGossiper interface {
	GossipKeyHead(ctx context.Context) (*client.GossipReport, error)
}
