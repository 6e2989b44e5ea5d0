package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"spindle.dev"
	"spindle.dev/pack"
)

const userUsage = `Usage:
    spin user [NAME]
    spin user -dirs ADDR,...
    spin user -quorum N
    spin user -failover

Prints the key record of the user NAME, or your own: the public key and the
nodes that host the user's directory, the first of which sequences it.

With -dirs, names the nodes that hold your directory, in order, and prints
the new record: the first sequences your writes, the others mirror it and
serve reads while it is down. A node added copies your whole log. To move
the sequencing to a mirror (its node is gone), list it first; do this when
its head matches the old sequencer's, or the entries it lacks are lost and
the hosts that hold them report a fork. A node named that does not admit
you as a writer would never hold your directory: it is named with a
warning (its operator admits you with spin node -writers).

With -quorum, asks readers of your tree to take a head of it only when N
of your dir hosts other than the one that signed it have cosigned it:
each replayed your log, so a host that signs a head over a tree map its
log does not give is caught even by a reader that never saw your tree.
N must be below the number of your dir hosts; 0, the default, asks for
none. The first read after each write then waits for a mirror's
cosignature (a round trip); a mirror that is down costs nothing while the
others make the quorum.

With -failover, does that safely while your sequencer cannot be reached:
it asks every dir host for its head of your log, and lists first the
first mirror that holds the newest head this client has seen, the others
after it in their order. It refuses, changing nothing, while the
sequencer answers, and when no mirror has caught up (the entries it
lacks would be lost): start the sequencer again and wait for the mirrors.

Options:
    -dirs ADDR,...  set your dir hosts (node multiaddrs or peer IDs)
    -quorum N       how many of your other dir hosts must cosign a head
    -failover       make a caught-up mirror your sequencer, while the
                    sequencer cannot be reached
    -h, -help       print this text

Example:
    $ spin user bob@example.com
    name:      bob@example.com
    key:       p256:B...
    dir host:  12D3KooW...
`

func runUser(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	dirs := flags.String("dirs", "", "")
	failover := flags.Bool("failover", false, "")
	quorum := flags.Int("quorum", -1, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if *quorum < -1 {
		return usagef("-quorum %d: want 0 or more", *quorum)
	}
	if flags.NArg() > 1 {
		return usagef("want at most one NAME, %s", gotArgs(flags.NArg()))
	}
	if *failover {
		if *dirs != "" || *quorum >= 0 || flags.NArg() > 0 {
			return usagef("-failover moves your own sequencing: want no -dirs and no NAME")
		}
		return runFailover(ctx, st)
	}
	if *quorum >= 0 && flags.NArg() > 0 {
		return usagef("-quorum sets your own dir quorum: want no NAME")
	}
	var hosts []spindle.PeerAddr
	if *dirs != "" {
		if flags.NArg() > 0 {
			return usagef("-dirs sets your own dir hosts: want no NAME")
		}
		var err error
		if hosts, err = parseDirHosts(*dirs); err != nil {
			return err
		}
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	if len(hosts) > 0 {
		if err := setDirHosts(ctx, st, c, hosts); err != nil {
			return err
		}
	}
	if *quorum >= 0 {
		if err := setDirQuorum(ctx, st, c, *quorum); err != nil {
			return err
		}
	}
	name := c.User()
	if flags.NArg() == 1 {
		name, err = spindle.CleanUser(spindle.UserName(flags.Arg(0)))
		if err != nil {
			_, msg := describe(err)
			st.errorf("%s: not a user name: %s", flags.Arg(0), msg)
			return errFailed
		}
	}
	u, err := c.LookupUser(ctx, name)
	if errors.Is(err, spindle.NotExist) && flags.NArg() == 0 && len(hosts) == 0 && *quorum < 0 {
		// Not signed up yet: what an operator who admits you needs is
		// your key, which is here.
		if keys, kerr := pack.Load(st.Config.Secrets); kerr == nil && keys.UserName() == name {
			fmt.Fprintf(st.Stdout, "name:      %s\n", printName(name))
			fmt.Fprintf(st.Stdout, "key:       %s\n", printName(keys.PublicKey()))
			fmt.Fprintf(st.Stdout, "signed up: no\n")
			st.hint("the key cluster has no record of you yet: %s", commandLine(st.Config, "signup"))
			return nil
		}
	}
	if err != nil {
		return st.fail(string(name), err)
	}
	printUser(st.Stdout, u)
	return nil
}

// A failoverer is a client that can move the sequencing of the user's
// tree to a caught-up mirror (the network client; see client.Failover).
type failoverer interface {
	Failover(ctx context.Context) (*spindle.User, error)
}

// runFailover runs spin user -failover.
func runFailover(ctx context.Context, st *State) error {
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	f, ok := c.(failoverer)
	if !ok {
		return st.fail(string(c.User()), errors.New("this client cannot change dir hosts"))
	}
	u, err := f.Failover(ctx)
	if err != nil {
		if errors.Is(err, spindle.Exist) {
			st.fail(string(c.User()), err)
			st.hint("to move the sequencing anyway, name your dir hosts in the order you want: %s", commandLine(st.Config, "user", "-dirs", "ADDR,..."))
			return errFailed
		}
		return st.fail(string(c.User()), err)
	}
	printUser(st.Stdout, u)
	return nil
}

// printUser prints a key record.
func printUser(w io.Writer, u *spindle.User) {
	fmt.Fprintf(w, "name:      %s\n", printName(u.Name))
	fmt.Fprintf(w, "key:       %s\n", printName(u.PublicKey))
	if len(u.DirHosts) == 0 {
		fmt.Fprintf(w, "dir host:  none\n")
	}
	for _, h := range u.DirHosts {
		fmt.Fprintf(w, "dir host:  %s\n", printName(h))
	}
	if u.DirQuorum > 0 {
		fmt.Fprintf(w, "quorum:    %d\n", u.DirQuorum)
	}
	switch {
	case u.Keep == spindle.KeepNone:
		fmt.Fprintf(w, "keep:      none\n")
	case u.Keep > 0:
		fmt.Fprintf(w, "keep:      %s\n", keepWindow(u.Keep))
	}
	for _, p := range u.Pins {
		fmt.Fprintf(w, "snapshot:  %s (sequence %d)\n", p.Name, p.Seq)
	}
}
