package keyraft

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"spindle.dev"
)

// Backup writes to dir, which must not exist, what a member started on
// a new home needs to be this member again: a snapshot of the
// replicated state taken now (or the newest one, if nothing was applied
// since), the member's note key, and a Raft store that holds the
// snapshot's term and no log entry. Raft starts from the snapshot; in a
// cluster of several members the leader then sends the member what was
// applied after it. The member goes on while it is written.
//
// The layout is that of HOME/raft, so that a node's home restored with
// dir as its raft directory opens.
func (c *Cluster) Backup(dir string) error {
	const op spindle.Op = "keyraft.Backup"
	if c.snaps == nil {
		return spindle.E(op, spindle.Invalid, "a key cluster kept in memory has nothing on disk to back up")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	meta, rc, err := c.snapshotNow()
	if err != nil {
		return spindle.E(op, err)
	}
	defer rc.Close()
	fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, hclog.NewNullLogger())
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	sink, err := fss.Create(meta.Version, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, c.trans)
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		sink.Cancel()
		return spindle.E(op, spindle.IO, fmt.Errorf("copy the snapshot: %w", err))
	}
	if err := sink.Close(); err != nil { // It syncs the snapshot.
		return spindle.E(op, spindle.IO, err)
	}
	bs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	err = bs.SetUint64([]byte("CurrentTerm"), meta.Term)
	if cerr := bs.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	key, err := os.ReadFile(filepath.Join(c.cfg.Dir, "raft", noteKeyFile))
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	if err := spindle.ReplaceFile(filepath.Join(dir, noteKeyFile), key, 0o600, true); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	c.log.Info("key cluster state backed up", "dir", dir, "index", meta.Index, "term", meta.Term)
	return nil
}

// snapshotNow has Raft take a snapshot and opens it; if nothing was
// applied since the newest one, it opens that.
func (c *Cluster) snapshotNow() (*raft.SnapshotMeta, io.ReadCloser, error) {
	f := c.raft.Snapshot()
	err := f.Error()
	if err == nil {
		return f.Open()
	}
	if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, nil, spindle.E(spindle.IO, fmt.Errorf("take a snapshot: %w", err))
	}
	list, err := c.snaps.List()
	if err != nil {
		return nil, nil, spindle.E(spindle.IO, err)
	}
	if len(list) == 0 {
		return nil, nil, spindle.E(spindle.Internal, "raft took no snapshot, as nothing is new, yet keeps none")
	}
	return c.snaps.Open(list[0].ID)
}

// noteKeyFile, in HOME/raft, holds the member's note signing key.
const noteKeyFile = "notekey"
