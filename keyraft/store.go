package keyraft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	bolt "go.etcd.io/bbolt"

	"spindle.dev"
)

// A member's Raft state lives in Dir/raft/: raft.db, the bolt database
// that raft-boltdb keeps the Raft log and stable store in, and snapshots/.
// Bolt trusts its file: a damaged page makes it panic, sometimes in a
// goroutine raft started, where nothing can recover, and sometimes read
// memory past the end of its mapping. So before raft sees the store,
// openStore checks it from the calling goroutine, where panics and faults
// are caught and turned into errors: the bolt structure (every page
// reachable from the root, and bolt's own consistency check), every log
// entry (present under its index, decodable, and matching the checksum it
// was stored with), and every snapshot (raft's CRC). Damage is reported as
// an error of kind Integrity that names the file and what to do; nothing
// is changed.

// ErrDamaged is wrapped by the error Open returns when the member's stored
// Raft state is damaged.
var ErrDamaged = errors.New("stored key cluster state is damaged")

// recoverHint tells the operator what to do about damaged Raft state.
const recoverHint = "restore raft/ from a backup of the node's home, or, if the key cluster has other members, move raft/ aside and add this member again (see docs/operating.md, \"Damaged node home\")"

// boltLockTimeout bounds the wait for another process's lock on raft.db.
const boltLockTimeout = 3 * time.Second

// damaged returns the error for damage found in file.
func damaged(file string, cause error) error {
	return spindle.E(spindle.Integrity, fmt.Errorf("%w: %s: %v; %s", ErrDamaged, file, cause, recoverHint))
}

// openStore checks and opens the Raft store in dir (Dir/raft). The returned
// closer closes it.
func openStore(dir string) (raft.LogStore, raft.StableStore, io.Closer, error) {
	path := filepath.Join(dir, "raft.db")
	if err := checkPresent(dir, path); err != nil {
		return nil, nil, nil, err
	}
	if err := checkPages(path); err != nil {
		return nil, nil, nil, damaged(path, err)
	}
	if err := checkBoltBounded(path); err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, nil, nil, spindle.E(spindle.IO, fmt.Errorf("%s is locked by another process: is another node running on this home?", path))
		}
		return nil, nil, nil, damaged(path, err)
	}
	var bs *raftboltdb.BoltStore
	err := safely(func() error {
		var err error
		bs, err = raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &bolt.Options{Timeout: boltLockTimeout}})
		return err
	})
	if err != nil {
		return nil, nil, nil, damaged(path, err)
	}
	logs := &checkedLogs{LogStore: bs}
	if err := safely(func() error { return checkLogs(logs, bs) }); err != nil {
		bs.Close()
		return nil, nil, nil, damaged(path, err)
	}
	return logs, bs, bs, nil
}

// checkPresent refuses a missing or empty raft.db in a directory that shows
// the member has run before (its snapshots directory, made after raft.db
// on the first start, exists): bolt would make a new empty store, and the
// member would bootstrap a new cluster over the old one.
func checkPresent(dir, path string) error {
	fi, err := os.Stat(path)
	if err == nil && fi.Size() > 0 {
		return nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return spindle.E(spindle.IO, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots")); err != nil {
		return nil // A fresh member.
	}
	what := "is missing"
	if err == nil {
		what = "is empty"
	}
	return damaged(path, fmt.Errorf("the store %s but this member has run before (raft/snapshots exists); starting afresh would make a new key cluster", what))
}

// safely runs fn, turning a panic or a memory fault in it (bolt reads its
// file through a memory mapping) into an error.
func safely(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the store cannot be read: %v", r)
		}
	}()
	return fn()
}

// checkBoltBounded runs checkBolt in a goroutine of its own, bounded in
// time: on damage that checkPages did not catch, bolt may loop for ever.
// The goroutine is then left behind; the member does not start.
func checkBoltBounded(path string) error {
	limit := 10 * time.Second
	if fi, err := os.Stat(path); err == nil {
		limit += time.Duration(fi.Size()>>26) * time.Second // A second per 64 MiB.
	}
	done := make(chan error, 1)
	go func() { done <- safely(func() error { return checkBolt(path) }) }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		return fmt.Errorf("bolt did not finish reading the store within %v", limit)
	}
}

// checkBolt opens the bolt database at path, which checkPages has passed,
// reads every key and value of every bucket through bolt, and runs bolt's
// consistency check.
func checkBolt(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: boltLockTimeout})
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			return walkBucket(b, 0)
		}); err != nil {
			return err
		}
		// Every page was just read from this goroutine, so Check, which
		// runs in a goroutine of its own, meets no page it cannot read.
		var errs []string
		for err := range tx.Check() {
			if len(errs) < 3 {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return errors.New(strings.Join(errs, "; "))
		}
		return nil
	})
}

// walkBucket reads every key and value in b and its nested buckets,
// checking that keys are in order.
func walkBucket(b *bolt.Bucket, depth int) error {
	if depth > 8 {
		return errors.New("buckets nested too deeply")
	}
	c := b.Cursor()
	var prev []byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if prev != nil && string(k) <= string(prev) {
			return fmt.Errorf("keys out of order: %x after %x", k, prev)
		}
		prev = append(prev[:0], k...)
		if v == nil {
			nb := b.Bucket(k)
			if nb == nil {
				return fmt.Errorf("key %x has no value and is not a bucket", k)
			}
			if err := walkBucket(nb, depth+1); err != nil {
				return err
			}
			continue
		}
		var sum byte
		for _, x := range v {
			sum += x // Touch every byte.
		}
		_ = sum
	}
	return nil
}

// checkLogs reads every entry of the Raft log and the stable store's keys.
func checkLogs(logs *checkedLogs, stable raft.StableStore) error {
	for _, k := range []string{"CurrentTerm", "LastVoteTerm"} {
		if _, err := stable.GetUint64([]byte(k)); err != nil && err.Error() != "not found" {
			return fmt.Errorf("stable store key %s: %v", k, err)
		}
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if first > last {
		return fmt.Errorf("log runs from index %d to %d", first, last)
	}
	if last == 0 {
		return nil
	}
	var l raft.Log
	for i := first; i <= last; i++ {
		if err := logs.GetLog(i, &l); err != nil {
			return fmt.Errorf("log entry %d of %d..%d: %v", i, first, last, err)
		}
	}
	return nil
}

// checkedLogs is a raft.LogStore that stores with every entry a checksum of
// its index, term, type and data, in the entry's Extensions (which raft
// leaves to middleware such as this), and verifies it on every read: bolt
// keeps no checksums of its own, so a flipped bit in a stored record would
// otherwise reach the FSM, which would reject it, silently dropping a
// committed change. Entries stored before checksums were kept have none and
// are read unchecked.
type checkedLogs struct {
	raft.LogStore
}

// logSumMagic starts the Extensions of a checksummed entry.
const logSumMagic = "spLC1"

func logSum(l *raft.Log) []byte {
	var b [17]byte
	binary.BigEndian.PutUint64(b[:8], l.Index)
	binary.BigEndian.PutUint64(b[8:16], l.Term)
	b[16] = byte(l.Type)
	c := crc32.Update(0, castagnoli, b[:])
	c = crc32.Update(c, castagnoli, l.Data)
	return binary.BigEndian.AppendUint32([]byte(logSumMagic), c)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// GetLog implements raft.LogStore.
func (s *checkedLogs) GetLog(index uint64, l *raft.Log) error {
	if err := s.LogStore.GetLog(index, l); err != nil {
		return err
	}
	if l.Index != index {
		return fmt.Errorf("log entry stored under index %d claims index %d", index, l.Index)
	}
	if strings.HasPrefix(string(l.Extensions), logSumMagic) {
		if string(l.Extensions) != string(logSum(l)) {
			return fmt.Errorf("log entry %d does not match its checksum", index)
		}
		l.Extensions = nil
	}
	return nil
}

// StoreLog implements raft.LogStore.
func (s *checkedLogs) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore. It leaves the caller's entries as
// they were.
func (s *checkedLogs) StoreLogs(ls []*raft.Log) error {
	out := make([]*raft.Log, len(ls))
	for i, l := range ls {
		c := *l
		c.Extensions = logSum(l)
		out[i] = &c
	}
	return s.LogStore.StoreLogs(out)
}

// checkSnapshots opens every snapshot in dir/snapshots, which makes raft
// verify its CRC. Raft itself would skip a damaged snapshot and restore an
// older one, or none, with log entries the newer one replaced no longer
// there to replay.
func checkSnapshots(dir string, snaps raft.SnapshotStore) error {
	sdir := filepath.Join(dir, "snapshots")
	des, err := os.ReadDir(sdir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return spindle.E(spindle.IO, err)
	}
	for _, de := range des {
		if !de.IsDir() || strings.HasSuffix(de.Name(), ".tmp") {
			continue
		}
		_, rc, err := snaps.Open(de.Name())
		if err != nil {
			return damaged(filepath.Join(sdir, de.Name()), fmt.Errorf("snapshot: %v", err))
		}
		rc.Close()
	}
	return nil
}
