package main

import (
	"context"
	"fmt"
	"strings"

	"spindle.dev/keyraft/keylog"
)

// A subcommand is one subcommand of spin key.
type subcommand struct {
	name     string
	synopsis string // After "spin key NAME": its arguments.
	text     string // What it does, a paragraph of the help text.
	example  string // Its example lines: "$ spin key NAME" and what it prints.
	run      func(ctx context.Context, st *State, args []string) error
}

// keySubcommands returns the subcommands of spin key, in the order its
// help lists them; each is defined in the file of its name.
func keySubcommands() []*subcommand {
	return []*subcommand{
		{"audit", "[USER]", keyAuditText, keyAuditExample, runKeyAudit},
		{"log", "", keyLogText, keyLogExample, runKeyLog},
		{"members", "", keyMembersText, keyMembersExample, runKeyMembers},
		{"init", "", keyInitText, keyInitExample, runKeyInit},
		{"admit", "PUBKEY", keyAdmitText, keyAdmitExample, keyChangeCmd(keylog.ChangeAdmit)},
		{"unadmit", "PUBKEY", "", "", keyChangeCmd(keylog.ChangeUnadmit)},
		{"operator", "add|remove PUBKEY", "", "", runKeyOperator},
		{"join", "[-home DIR]", keyJoinText, keyJoinExample, runKeyJoin},
		{"leave", "[-home DIR]", "", "", runKeyLeave},
		{"policy", "open|domain|invite", keyPolicyText, keyPolicyExample, runKeyPolicy},
		{"domain", "add DOMAIN PUBKEY | remove DOMAIN", "", "", runKeyDomain},
		{"network", "open|members", keyNetworkText, keyNetworkExample, runKeyNetwork},
		{"node", "add|remove PEERID", "", "", runKeyNode},
		{"grant", "REQUEST", keyGrantText, keyGrantExample, runKeyGrant},
		{"witness", "add VERIFIERKEY | remove ID | quorum K", keyWitnessText, keyWitnessExample, runKeyWitness},
		{"witnesses", "", keyWitnessesText, "", runKeyWitnesses},
	}
}

// keyUsage returns spin key's help text, made of its subcommands'.
func keyUsage() string {
	var b strings.Builder
	b.WriteString("Usage:\n")
	for _, s := range keySubcommands() {
		fmt.Fprintf(&b, "    %s\n", strings.TrimSpace("spin key "+s.name+" "+s.synopsis))
	}
	b.WriteString("\nLooks at the key cluster, which holds every user's key record in a\n" +
		"transparency log whose signed tree heads your client checks, and changes\n" +
		"its members and configuration. Those commands go through the node whose\n" +
		"home is ~/spin/node if one has run there, else through the node in your\n" +
		"config; a change is signed with your key, and the cluster takes it only\n" +
		"from an operator's.\n")
	for _, s := range keySubcommands() {
		if s.text != "" {
			b.WriteString("\n" + s.text)
		}
	}
	b.WriteString("\nOptions:\n    -home DIR   (join, leave) the home of the node to act on (default ~/spin/node)\n    -h, -help   print this text\n\nExample:\n")
	for _, s := range keySubcommands() {
		b.WriteString(s.example)
	}
	return b.String()
}

// runKey runs the spin key subcommand args name.
func runKey(ctx context.Context, st *State, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		flags := st.flags()
		flags.String("home", "", "") // Of join and leave; documented with spin key's options.
		if err := st.parse(flags, args); err != nil {
			return err
		}
		return usagef("want a subcommand: %s", strings.Join(keyNames(), ", "))
	}
	for _, s := range keySubcommands() {
		if s.name == args[0] {
			st.cmd = "key " + s.name
			return s.run(ctx, st, args[1:])
		}
	}
	return usagef("unknown subcommand %q: want %s", args[0], strings.Join(keyNames(), ", "))
}

func keyNames() []string {
	var names []string
	for _, s := range keySubcommands() {
		names = append(names, s.name)
	}
	return names
}
