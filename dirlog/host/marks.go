package host

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// A Mark is how far a host has acknowledged a user's log: the sequence
// number and hash of the last entry it stored.
type Mark struct {
	Seq  int64
	Hash dirlog.Hash
}

// A Marker is a [Store] that also keeps, durably and apart from the logs,
// the newest [Mark] of every log: a host's memory of its own past, so
// that a log deleted or cut short (by a disk, a backup restored, a
// mistaken hand) is reported as damage when the server opens, never
// served as an older state or as a new empty tree. DiskStore and
// MemStore are Markers.
type Marker interface {
	// Marks returns the newest mark of every user marked. If the marks
	// were found damaged it returns those read before the damage with
	// an error of kind Integrity saying so, once.
	Marks(ctx context.Context) (map[spindle.UserName]Mark, error)
	// Mark records durably that user's log is acknowledged up to m.
	Mark(ctx context.Context, user spindle.UserName, m Mark) error
	// Unmark forgets user's mark, when its operator accepts the log as
	// it is (a repair), so that it is checked from then on against
	// what the host stores next.
	Unmark(ctx context.Context, user spindle.UserName) error
}

// marksFile is the name of the marks in a DiskStore's directory: not a
// log, since it lacks the suffix.
const marksFile = "heads"

// marks holds a DiskStore's marks, read once, appended to as a file of
// framed records (see appendFrame), each a user's newest mark or, with a
// negative sequence number, the forgetting of one.
type marks struct {
	mu      sync.Mutex
	read    bool
	m       map[spindle.UserName]Mark
	recs    int            // Records in the file.
	f       spindle.FSFile // Open for appending, once read.
	pending bool           // Marks written and not yet synced; a sync is due.
	damaged error          // The file was found damaged; told once by Marks.
}

// markSyncDelay bounds how long a mark waits for its sync. The log it
// marks is synced before the mark is written, so a crash in between
// leaves the mark behind the log, never ahead of it: the check on the
// next start then misses only a loss of the last entries, in that window
// and on top of the crash. Syncing every mark would make each append wait
// for two syncs, doubling its cost.
const markSyncDelay = 50 * time.Millisecond

func encodeMark(user spindle.UserName, m Mark) []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(m.Seq))
	b = append(b, m.Hash[:]...)
	return append(b, user...)
}

func decodeMark(b []byte) (spindle.UserName, Mark, error) {
	if len(b) < 8+len(dirlog.Hash{})+1 {
		return "", Mark{}, fmt.Errorf("mark of %d bytes is too short", len(b))
	}
	var m Mark
	m.Seq = int64(binary.BigEndian.Uint64(b))
	copy(m.Hash[:], b[8:])
	u := spindle.UserName(b[8+len(dirlog.Hash{}):])
	if cu, err := spindle.CleanUser(u); err != nil || cu != u {
		return "", Mark{}, fmt.Errorf("mark names %q, which is not a clean user name", u)
	}
	return u, m, nil
}

// load reads the marks file, once. A torn last record (a crash while a
// mark was written) is dropped: the log it marks was synced first. The
// file is written anew, compact, when it holds far more records than
// users. s.marks.mu is held.
func (s *diskStore) loadMarks() error {
	k := &s.marks
	if k.read {
		return nil
	}
	name := filepath.Join(s.dir, marksFile)
	k.m = make(map[spindle.UserName]Mark)
	f, err := s.fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return spindle.E(spindle.IO, err)
	}
	_, end, err := dirlog.ScanFrames(f, 0, func(b []byte) error {
		u, m, err := decodeMark(b)
		if err != nil {
			return spindle.E(spindle.Integrity, fmt.Errorf("%s: %w", name, err))
		}
		if m.Seq < 0 {
			delete(k.m, u)
		} else {
			k.m[u] = m
		}
		k.recs++
		return nil
	})
	if te, ok := err.(*dirlog.TailError); ok && te.Torn {
		// Cut the torn record, so that the next mark follows a sound one.
		if err = f.Truncate(end); err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			return spindle.E(spindle.IO, err)
		}
	}
	rewrite := k.recs > 4*len(k.m)+1024
	if err != nil {
		// Damage in the middle (a disk's): keep the marks read before
		// it, set the file aside, and go on with a sound one.
		f.Close()
		aside := fmt.Sprintf("%s.damaged-%d", name, time.Now().UnixNano())
		if rerr := s.fs.Rename(name, aside); rerr != nil {
			return spindle.E(spindle.IO, rerr)
		}
		k.damaged = fmt.Errorf("%s was damaged (%v); the %d marks before the damage are kept, the file is in %s", name, err, len(k.m), aside)
		rewrite = true
	}
	if rewrite {
		if err == nil {
			f.Close()
		}
		if f, end, err = s.rewriteMarks(name); err != nil {
			return err
		}
	}
	if _, err := f.Seek(end, 0); err != nil {
		f.Close()
		return spindle.E(spindle.IO, err)
	}
	k.f, k.read = f, true
	return nil
}

// rewriteMarks replaces the marks file with one record per user.
func (s *diskStore) rewriteMarks(name string) (spindle.FSFile, int64, error) {
	var b []byte
	for u, m := range s.marks.m {
		b = dirlog.AppendFrame(b, encodeMark(u, m))
	}
	tmp, err := s.fs.CreateTemp(s.dir, marksFile+".tmp*")
	if err != nil {
		return nil, 0, spindle.E(spindle.IO, err)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.fs.Rename(tmp.Name(), name)
	}
	if err == nil {
		err = s.fs.SyncDir(s.dir)
	}
	if err != nil {
		s.fs.Remove(tmp.Name())
		return nil, 0, spindle.E(spindle.IO, err)
	}
	s.marks.recs = len(s.marks.m)
	f, err := s.fs.OpenFile(name, os.O_RDWR, 0o600)
	if err != nil {
		return nil, 0, spindle.E(spindle.IO, err)
	}
	return f, int64(len(b)), nil
}

// Marks implements [Marker].
func (s *diskStore) Marks(ctx context.Context) (map[spindle.UserName]Mark, error) {
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	const op spindle.Op = "dirlog.DiskStore.Marks"
	if err := s.loadMarks(); err != nil {
		return nil, spindle.E(op, err)
	}
	if d := s.marks.damaged; d != nil {
		s.marks.damaged = nil
		return maps.Clone(s.marks.m), spindle.E(op, spindle.Integrity, d)
	}
	return maps.Clone(s.marks.m), nil
}

// Mark implements [Marker].
func (s *diskStore) Mark(ctx context.Context, user spindle.UserName, m Mark) error {
	return s.writeMark(user, m)
}

// Unmark implements [Marker].
func (s *diskStore) Unmark(ctx context.Context, user spindle.UserName) error {
	return s.writeMark(user, Mark{Seq: -1})
}

func (s *diskStore) writeMark(user spindle.UserName, m Mark) error {
	const op spindle.Op = "dirlog.DiskStore.Mark"
	k := &s.marks
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := s.loadMarks(); err != nil {
		return spindle.E(op, err)
	}
	if _, err := k.f.Write(dirlog.AppendFrame(nil, encodeMark(user, m))); err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	switch {
	case m.Seq < 0:
		// Forgetting a mark is an operator's repair: at once.
		if err := k.f.Sync(); err != nil {
			return spindle.E(op, spindle.IO, err)
		}
	case !k.pending:
		k.pending = true
		f := k.f
		time.AfterFunc(markSyncDelay, func() { s.syncMarks(f) })
	}
	k.recs++
	if m.Seq < 0 {
		delete(k.m, user)
	} else {
		k.m[user] = m
	}
	return nil
}

// syncMarks syncs the marks written to f, if it is still the file open.
func (s *diskStore) syncMarks(f spindle.FSFile) {
	k := &s.marks
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.f != f || !k.pending {
		return
	}
	k.pending = false
	f.Sync() // A failure shows at the next start, as a mark behind its log.
}

// closeMarks syncs and closes the marks file.
func (s *diskStore) closeMarks() {
	s.marks.mu.Lock()
	defer s.marks.mu.Unlock()
	if s.marks.f != nil {
		if s.marks.pending {
			s.marks.f.Sync()
		}
		s.marks.f.Close()
		s.marks.f, s.marks.read, s.marks.pending = nil, false, false
	}
}

// Marks implements [Marker].
func (s *MemStore) Marks(ctx context.Context) (map[spindle.UserName]Mark, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.marks), nil
}

// Mark implements [Marker].
func (s *MemStore) Mark(ctx context.Context, user spindle.UserName, m Mark) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.marks == nil {
		s.marks = make(map[spindle.UserName]Mark)
	}
	s.marks[user] = m
	return nil
}

// Unmark implements [Marker].
func (s *MemStore) Unmark(ctx context.Context, user spindle.UserName) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.marks, user)
	return nil
}

// Delete removes user's log, as a lost file would be: for tests.
func (s *MemStore) Delete(user spindle.UserName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.logs, user)
}
