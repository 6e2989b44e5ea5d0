package node

// Backups of a node's own state (spin node backup, spin node restore).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// BackupReadme names the file in a backup that says what it holds.
const BackupReadme = "BACKUP"

// Backup writes to dest, a directory that must not exist, what a node
// started on a new home needs to be this node again, taken while it
// runs: its peer identity, its key cluster replica (a snapshot taken
// now; see keyraft.Cluster.Backup), the directory logs it holds (each as
// it was at one moment; see dirlog/host.Server.Backup), whether it
// joined the cluster, and the peers it remembers. Blocks are not in it:
// the network holds their copies, and the restored node fetches those
// its trees need. A witness's state is not in it either: a witness
// restored from an older state could cosign a head that disagrees with
// one it cosigned since; a restored witness starts afresh.
func (n *Node) Backup(ctx context.Context, dest string) (*wire.NodeBackupResponse, error) {
	const op spindle.Op = "node.Backup"
	if n.cfg.Home == "" {
		return nil, spindle.E(op, spindle.Invalid, "a node without a home keeps nothing on disk to back up")
	}
	if !filepath.IsAbs(dest) {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("backup directory %q is not an absolute path", dest))
	}
	if err := os.Mkdir(dest, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, spindle.E(op, spindle.Exist, fmt.Sprintf("%s exists: a backup goes to a new directory", dest))
		}
		return nil, spindle.E(op, spindle.IO, err)
	}
	resp := &wire.NodeBackupResponse{Peer: n.host.ID().String()}
	copyFile := func(name string) error {
		data, err := os.ReadFile(filepath.Join(n.cfg.Home, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return spindle.ReplaceFile(filepath.Join(dest, name), data, 0o600, true)
	}
	for _, f := range []string{spindle.FormatFile, p2p.IdentityFile, PeersFile, joinedFile, keyServersFile} {
		if err := copyFile(f); err != nil {
			return nil, spindle.E(op, spindle.IO, err)
		}
	}
	if keys := n.kst().keys; keys != nil {
		if err := keys.Backup(filepath.Join(dest, "raft")); err != nil {
			return nil, spindle.E(op, err)
		}
		resp.KeyCluster = true
	}
	copied, damaged, err := n.dir.Backup(ctx, filepath.Join(dest, "dirlogs"))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	resp.Logs, resp.Damaged = copied, damaged
	var b strings.Builder
	fmt.Fprintf(&b, "A backup of the Spindle node %s, taken at %s.\n", resp.Peer, spindle.Now().Go().UTC().Format("2006-01-02 15:04:05 UTC"))
	fmt.Fprintf(&b, "Restore it into a new home with: spin node restore %s -home DIR\n", dest)
	fmt.Fprintf(&b, "key cluster replica: %v\n", resp.KeyCluster)
	for _, u := range copied {
		fmt.Fprintf(&b, "directory log: %s\n", u)
	}
	for _, u := range damaged {
		fmt.Fprintf(&b, "damaged, not copied: %s\n", u)
	}
	b.WriteString("not copied: blocks (the network holds their copies), the witness state (a restored witness starts afresh)\n")
	if err := spindle.ReplaceFile(filepath.Join(dest, BackupReadme), []byte(b.String()), 0o600, true); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	if err := spindle.SyncDir(dest); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	n.log.Info("node backed up", "dest", dest, "logs", len(copied), "damaged", len(damaged), "keycluster", resp.KeyCluster)
	return resp, nil
}

func (n *Node) serveBackup(ctx context.Context, _ *caller, req *wire.NodeBackupRequest) (*wire.NodeBackupResponse, error) {
	return n.Backup(ctx, req.Dest)
}

// Restore copies the backup in src (see Backup) into home, which must not
// exist or be empty, so that a node started on home is the node that was
// backed up. The node must not be running on home.
func Restore(src, home string) error {
	const op spindle.Op = "node.Restore"
	if _, err := os.Stat(filepath.Join(src, BackupReadme)); err != nil {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("%s is not a backup of a node (it has no %s file): %v", src, BackupReadme, err))
	}
	if _, err := os.Stat(filepath.Join(src, p2p.IdentityFile)); err != nil {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("the backup in %s has no peer identity (%s): %v", src, p2p.IdentityFile, err))
	}
	if des, err := os.ReadDir(home); err == nil && len(des) > 0 {
		return spindle.E(op, spindle.Exist, fmt.Sprintf("%s is not empty: restore into a new home, and keep the old one until the restored node serves", home))
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return spindle.E(op, spindle.IO, err)
	}
	if err := os.MkdirAll(home, 0o700); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil || rel == "." || rel == BackupReadme {
			return err
		}
		to := filepath.Join(home, rel)
		if d.IsDir() {
			return os.Mkdir(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return spindle.ReplaceFile(to, data, 0o600, true)
	})
	if err == nil {
		err = filepath.WalkDir(home, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				err = spindle.SyncDir(path)
			}
			return err
		})
	}
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	return nil
}
