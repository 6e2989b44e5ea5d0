package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"spindle.dev/client"
	"spindle.dev/node"
	"spindle.dev/node/wire"
)

// nodeHomeAndArg parses args with -home and returns the node's home (by
// default ~/spin/node) and the one argument left.
func (st *State) nodeHomeAndArg(args []string, what string) (home, arg string, err error) {
	fs := st.flags()
	h := fs.String("home", "", "")
	if err := st.parse(fs, args); err != nil {
		return "", "", err
	}
	if fs.NArg() != 1 {
		return "", "", usagef("want %s", what)
	}
	home = *h
	if home == "" {
		base, err := st.home()
		if err != nil {
			return "", "", err
		}
		home = filepath.Join(base, "spin", "node")
	}
	return home, fs.Arg(0), nil
}

// runNodeBackup runs "spin node backup [-home DIR] DEST": the node
// running in DIR writes a backup of its state to DEST.
func runNodeBackup(ctx context.Context, st *State, args []string) error {
	st.cmd = "node backup"
	home, dest, err := st.nodeHomeAndArg(args, "the directory to write the backup to, which must not exist")
	if err != nil {
		return err
	}
	if dest, err = filepath.Abs(dest); err != nil {
		return err
	}
	addr, err := nodeSocket(home)
	if err != nil {
		st.errorf("%v", err)
		st.hint("a backup is taken by the running node: start it with spin node -home %s", home)
		return errFailed
	}
	resp, err := client.OperatorCall[wire.NodeBackupRequest, wire.NodeBackupResponse](ctx, addr, wire.NodeBackup, &wire.NodeBackupRequest{Dest: dest})
	if err != nil {
		return st.fail("", err)
	}
	fmt.Fprintf(st.Stdout, "backed up node %s to %s\n", resp.Peer, dest)
	if resp.KeyCluster {
		fmt.Fprintf(st.Stdout, "key cluster: its replica, as a snapshot\n")
	}
	fmt.Fprintf(st.Stdout, "directory logs: %d\n", len(resp.Logs))
	for _, u := range resp.Damaged {
		fmt.Fprintf(st.Stdout, "damaged, not copied: %s\n", u)
	}
	fmt.Fprintf(st.Stdout, "restore it on a new machine with: spin node restore %s\n", dest)
	return nil
}

// runNodeRestore runs "spin node restore [-home DIR] SRC": it copies the
// backup in SRC into DIR, a new home.
func runNodeRestore(ctx context.Context, st *State, args []string) error {
	st.cmd = "node restore"
	home, src, err := st.nodeHomeAndArg(args, "the directory of the backup, as spin node backup wrote it")
	if err != nil {
		return err
	}
	if err := node.Restore(src, home); err != nil {
		return st.fail("", err)
	}
	fmt.Fprintf(st.Stdout, "restored the node into %s\n", home)
	if _, err := os.Stat(filepath.Join(home, "raft")); err == nil {
		fmt.Fprintf(st.Stdout, "start it with: spin node -home %s (and the flags it ran with)\n", home)
	} else {
		fmt.Fprintf(st.Stdout, "it was no member of its key cluster: start it with spin node -home %s -keyserver ADDR (and the flags it ran with)\n", home)
	}
	return nil
}
