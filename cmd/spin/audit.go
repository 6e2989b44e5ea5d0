package main

import (
	"context"
	"fmt"
	"time"

	"spindle.dev"
	"spindle.dev/node/client"
)

const auditUsage = `Usage:
    spin audit

Checks your node's word about your tree against your tree's log: reads the
whole log, checks every entry's signature with the key its writer held,
and recomputes the tree map that the node's signed head commits to. Every
answer your client gets about your tree is proved against such a head; an
audit shows that the head itself is true. A node that dropped, reverted or
invented an entry fails it with an integrity error showing both values.
Only the owner of a tree may read its log.

Options:
    -h, -help   print this text

Example:
    $ spin audit
    ann@example.com: ... entries by ...; map root ...
    signed by 12D3KooW... at ...: true to the log
`

// auditor is a client that can audit its user's tree.
type auditor interface {
	Audit(ctx context.Context) (*client.AuditReport, error)
}

func runAudit(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("spin audit takes no arguments; it audits your own tree")
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	a, ok := c.(auditor)
	if !ok {
		return st.fail("audit", spindle.E(spindle.Invalid, "this client cannot audit"))
	}
	rep, err := a.Audit(ctx)
	if err != nil {
		return st.fail(string(c.User()), err)
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
	return nil
}
