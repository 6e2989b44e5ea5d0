package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// runNodeCmd runs "spin node" through runNode (see dial.go), and "spin
// node status" itself.
func runNodeCmd(ctx context.Context, st *State, args []string) error {
	if wantsHelp(args) {
		return errHelp
	}
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return runNodeStatus(ctx, st, args[1:])
		case "install":
			return runNodeInstall(ctx, st, args[1:])
		case "uninstall":
			return runNodeUninstall(ctx, st, args[1:])
		case "backup":
			return runNodeBackup(ctx, st, args[1:])
		case "restore":
			return runNodeRestore(ctx, st, args[1:])
		}
	}
	if runNode == nil {
		return errors.New("spin node is not built in")
	}
	if code := runNode(ctx, st, args); code != exitOK {
		if code == exitUsage {
			return errUsageReported
		}
		return errFailed
	}
	return nil
}

// wantsHelp reports whether args, up to the first non-flag, ask for help.
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help", "--h":
			return true
		case "--":
			return false
		}
	}
	return false
}

// runNodeStatus runs "spin node status": it asks the node running in the
// home given, through the node's socket, for its status and prints it.
func runNodeStatus(ctx context.Context, st *State, args []string) error {
	st.cmd = "node status"
	fs := st.flags()
	home := fs.String("home", "", "")
	if err := st.parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *home == "" {
		h := st.Home
		if h == "" {
			var err error
			if h, err = os.UserHomeDir(); err != nil {
				return err
			}
		}
		*home = filepath.Join(h, "spin", "node")
	}
	addr, err := nodeSocket(*home)
	if err != nil {
		st.errorf("%v", err)
		st.hint("start a node there: spin node -home %s", *home)
		return errFailed
	}
	s, err := client.NodeStatus(ctx, addr)
	if err != nil {
		if spindle.KindOf(err) == spindle.IO {
			if sock, ok := p2p.SocketPath(*home); ok && !exists(sock) {
				st.errorf("the node in %s is not running: its socket %s is gone", *home, sock)
			} else {
				st.errorf("cannot reach the node in %s: %s", *home, strings.Join(strings.Fields(describeAll(err)), " "))
			}
			st.hint("is it running? start it with: spin node -home %s", *home)
			return errFailed
		}
		return st.fail("", err)
	}
	printStatus(st.Stdout, s, time.Now())
	return nil
}

// nodeSocket returns the address of the socket of the node whose home is
// home, from the addresses the node wrote to home/addr as it started.
func nodeSocket(home string) (spindle.PeerAddr, error) {
	data, err := os.ReadFile(filepath.Join(home, "addr"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no node has run in %s: it has no file addr", home)
	}
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(data)) {
		if a := spindle.PeerAddr(strings.TrimSpace(line)); p2p.IsLocalAddr(a) {
			return a, nil
		}
	}
	return "", fmt.Errorf("the node in %s has no socket (its home's path is too long for one), and it tells its status only through its socket", home)
}

// printStatus prints a node's status, one "name: value" a line. What the
// node does not report is said to be so, never printed as a number.
func printStatus(w io.Writer, s *wire.Status, now time.Time) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-19s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	const notKept = "not reported (this node does not keep it yet)"
	started := s.Started.Go()
	line("peer", "%s", s.Peer)
	for _, a := range s.Addrs {
		line("address", "%s", a)
	}
	line("started", "%s (%s ago)", started.UTC().Format("2006-01-02 15:04:05 UTC"), now.Sub(started).Round(time.Second))
	line("reachability", "%s", s.Reachability)
	line("peers connected", "%d", s.Peers)
	line("DHT routing table", "%d %s", s.DHTPeers, plural(s.DHTPeers, "peer"))
	line("peers remembered", "%d", s.Remembered)
	line("blocks held", "%d", s.Blocks)
	line("bytes held", "%s (%d bytes)", formatBytes(s.Bytes), s.Bytes)
	if s.HoldLimit != nil {
		refused := ""
		if s.ReplicaFull != nil && *s.ReplicaFull > 0 {
			refused = fmt.Sprintf("; copies refused for it since the start: %d", *s.ReplicaFull)
		}
		line("hold limit", "%s: copies from other nodes are refused past it%s", formatBytes(*s.HoldLimit), refused)
	}
	switch s.KeyRole {
	case "leader":
		line("key cluster", "member, the leader (log index %d, applied %d)", s.KeyLast, s.KeyApplied)
	case "follower":
		leader := s.KeyLeader
		if leader == "" {
			leader = "none known"
		}
		line("key cluster", "member, following leader %s (log index %d, applied %d)", leader, s.KeyLast, s.KeyApplied)
	case "joining":
		line("key cluster", "joining")
	case "client":
		member := s.KeyMember
		if member == "" {
			member = "none has answered yet"
		}
		line("key cluster", "runs none: carries key requests to member %s (spin node -keyserver)", member)
	case "member":
		line("key cluster", "member")
	}
	switch {
	case s.Network == keylog.NetworkMembers && s.NetworkMember:
		line("network", "members only (%d); this node is one", s.NetworkMembers)
	case s.Network == keylog.NetworkMembers:
		line("network", "members only (%d); this node is NOT one: it holds no blocks for others and takes no puts (an operator admits it: spin key node add %s)", s.NetworkMembers, s.Peer)
	case s.Network == keylog.NetworkOpen:
		line("network", "open")
	}
	if s.WitnessKey != "" {
		line("witness key", "%s", s.WitnessKey)
		advanced := "not since the node started"
		if s.WitnessAdvanced != nil {
			advanced = fmt.Sprintf("advanced %s ago", now.Sub(s.WitnessAdvanced.Go()).Round(time.Second))
		}
		line("witnessed", "the key log up to %d records (%s)", *s.WitnessSize, advanced)
	}
	if s.Relay {
		line("relay service", "on (offered while AutoNAT finds this node reachable from outside)")
	} else {
		line("relay service", "off")
	}
	switch {
	case s.Announced == nil:
		line("blocks announced", notKept)
	case s.AnnouncedAt == nil:
		line("blocks announced", "%d", *s.Announced)
	default:
		line("blocks announced", "%d, last at %s", *s.Announced, s.AnnouncedAt.Go().UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	switch {
	case s.CacheBytes == nil:
		line("cache", notKept)
	case s.CacheMax == nil:
		line("cache", "%s", formatBytes(*s.CacheBytes))
	default:
		line("cache", "%s of %s", formatBytes(*s.CacheBytes), formatBytes(*s.CacheMax))
	}
	if s.RepairBacklog == nil {
		line("repair backlog", notKept)
	} else {
		missing := ""
		if s.RepairMissing != nil {
			word := "copies"
			if *s.RepairMissing == 1 {
				word = "copy"
			}
			missing = fmt.Sprintf(", %d %s missing", *s.RepairMissing, word)
		}
		line("repair backlog", "%d %s%s", *s.RepairBacklog, plural(int(*s.RepairBacklog), "block"), missing)
	}
	if s.Leases == nil || s.LeasedBlocks == nil {
		line("leases held", notKept)
	} else {
		line("leases held", "%d, on %d %s", *s.Leases, *s.LeasedBlocks, plural(int(*s.LeasedBlocks), "block"))
	}
	if s.Collectable != nil && s.Unleased != nil {
		line("blocks collectable", "%d (and %d without a lease, within the grace)", *s.Collectable, *s.Unleased)
	}
	if s.CollectPaused != nil {
		line("collection", "paused until %s", s.CollectPaused.Go().UTC().Format("2006-01-02 15:04:05 UTC"))
	}
	if s.LeasesRenewed != nil {
		line("leases renewed", "%d in the last round", *s.LeasesRenewed)
	}
	for _, w := range s.LogsWaiting {
		line("log waiting", "%s", w)
	}
	for _, d := range s.LogsDamaged {
		line("log damaged", "%s", d)
	}
	printLogs(line, s.Logs, now)
}

// printLogs prints the directory logs a node hosts: for each, a "log"
// line with the node's role, the head it holds and its lag behind the
// dir host it copies from; at the sequencer, a "log mirror" line for each
// other dir host; and a "log error" line with the last pull's error.
func printLogs(line func(name, format string, args ...any), logs []wire.LogStatus, now time.Time) {
	line("logs hosted", "%d", len(logs))
	ago := func(t *spindle.Time) string { return now.Sub(t.Go()).Round(time.Second).String() + " ago" }
	for _, l := range logs {
		head := fmt.Sprintf("head %d", l.Seq)
		if l.Seq < 0 {
			head = "head unknown (the log is damaged)"
		}
		var what string
		switch l.Role {
		case "sequencer":
			what = fmt.Sprintf("sequencer, %s, lag 0", head)
		case "mirror":
			switch {
			case l.Source == "":
				what = fmt.Sprintf("mirror, %s, lag unknown (no dir host has answered yet)", head)
			case l.Pulled == nil:
				what = fmt.Sprintf("mirror, %s, lag %d behind %s (at %d when it last answered), never pulled", head, l.Lag, l.Source, l.SourceSeq)
			default:
				what = fmt.Sprintf("mirror, %s, lag %d behind %s (at %d when it last answered), last pulled %s", head, l.Lag, l.Source, l.SourceSeq, ago(l.Pulled))
			}
		case "not listed":
			what = fmt.Sprintf("not listed (the owner's key record does not name this node), %s", head)
		default:
			what = fmt.Sprintf("role unknown (the owner's key record has not been looked up yet), %s", head)
		}
		line("log", "%s: %s", l.User, what)
		for _, h := range l.Hosts {
			if h.Asked == nil {
				line("log mirror", "%s: %s has not asked for the log since this node started or listed it", l.User, h.Peer)
				continue
			}
			line("log mirror", "%s: %s at %d, lag %d, asked %s", l.User, h.Peer, h.Seq, max(l.Seq-h.Seq, 0), ago(h.Asked))
		}
		if l.Err != "" {
			line("log error", "%s: last pull failed: %s", l.User, l.Err)
		}
	}
}

// exists reports whether a file of any type is at name.
func exists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}
