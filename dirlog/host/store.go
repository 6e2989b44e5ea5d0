package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// A Store holds one append-only log of records per user.
type Store interface {
	// Users returns the users that have a log, in no particular order.
	Users(ctx context.Context) ([]spindle.UserName, error)
	// Open returns the user's log, creating an empty one if there is none.
	// A log is opened at most once at a time.
	Open(ctx context.Context, user spindle.UserName) (Log, error)
}

// A Log is one user's sequence of records. Each record is framed with its
// length and a CRC-32C. A Log is used by one goroutine at a time.
type Log interface {
	// Scan calls fn with every whole record, in order, and stops at the
	// first error fn returns, which it returns; a scan fn stops does not
	// move where the next Append writes. If the log ends in a
	// truncated or damaged record, Scan stops before it and returns an
	// error of kind Integrity wrapping a *[dirlog.TailError]; the log itself is
	// not changed. fn must not keep the slice it is given.
	Scan(ctx context.Context, fn func(rec []byte) error) error
	// ScanFrom is Scan from record first (0 for the first) on: it reads
	// only the records from there when the log knows where they are (it
	// was scanned or appended to), so that a page of a long log costs
	// its own records.
	ScanFrom(ctx context.Context, first int, fn func(rec []byte) error) error
	// Append adds records at the end of the valid records, in order and
	// durably, with one sync for them all, before it returns. If it fails,
	// none of them counts as appended: the next Append writes over them.
	Append(ctx context.Context, recs ...[]byte) error
	// Truncate keeps the first n records and cuts the rest, moving the
	// cut bytes aside (for inspection and salvage) and returning where
	// they are kept. It needs a Scan first. A log whose header is damaged
	// keeps no record: all of it is moved aside.
	Truncate(ctx context.Context, n int) (kept string, err error)
	// Name says where the log is kept, for messages to the operator.
	Name() string
	// Raw returns the log's framed records as stored, damage included,
	// or nil if the log's header is damaged. It is for repairs.
	Raw(ctx context.Context) ([]byte, error)
	// Patch durably overwrites the framed records from byte off with b,
	// after keeping a copy of the whole log as it was, and returns where
	// the copy is kept. It is for repairs; a Scan must follow.
	Patch(ctx context.Context, off int64, b []byte) (kept string, err error)
	// Replace durably replaces the whole log with recs, so that a crash
	// at any point leaves either the old log or the new one (see
	// [spindle.ReplaceFile]). It is for compaction (see
	// [Server.Compact]).
	Replace(ctx context.Context, recs ...[]byte) error
	// Close releases the log.
	Close() error
}

// DiskStore returns a store keeping each user's log in the file
// dir/USER.log, creating dir if needed. Cut tails are kept in
// dir/USER.log.damaged-TIME.
func DiskStore(dir string) (Store, error) { return DiskStoreFS(spindle.OS, dir) }

// DiskStoreFS is DiskStore on the file system fsys.
func DiskStoreFS(fsys spindle.FS, dir string) (Store, error) {
	const op spindle.Op = "dirlog.DiskStore"
	if _, err := fsys.Stat(dir); err != nil {
		// A new directory's entry is durable once its parent is synced.
		if err := fsys.MkdirAll(dir, 0o700); err != nil {
			return nil, spindle.E(op, spindle.IO, err)
		}
		if err := fsys.SyncDir(filepath.Dir(dir)); err != nil {
			return nil, spindle.E(op, spindle.IO, err)
		}
	}
	return &diskStore{fs: fsys, dir: dir}, nil
}

type diskStore struct {
	fs    spindle.FS
	dir   string
	marks marks
}

var _ Store = (*diskStore)(nil)

const logSuffix = ".log"

func (s *diskStore) Users(ctx context.Context) ([]spindle.UserName, error) {
	const op spindle.Op = "dirlog.DiskStore.Users"
	des, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	var users []spindle.UserName
	for _, de := range des {
		name, ok := strings.CutSuffix(de.Name(), logSuffix)
		if !ok || !de.Type().IsRegular() {
			continue
		}
		u, err := spindle.CleanUser(spindle.UserName(name))
		if err != nil || string(u) != name {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("log file %s does not name a user", de.Name()))
		}
		users = append(users, u)
	}
	return users, nil
}

func (s *diskStore) path(user spindle.UserName) (string, error) {
	u, err := spindle.CleanUser(user)
	if err != nil || u != user {
		return "", spindle.E(spindle.Invalid, user, "not a clean user name")
	}
	return filepath.Join(s.dir, string(user)+logSuffix), nil
}

func (s *diskStore) Open(ctx context.Context, user spindle.UserName) (Log, error) {
	const op spindle.Op = "dirlog.DiskStore.Open"
	name, err := s.path(user)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	f, err := s.fs.OpenFile(name, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		if err := spindle.ReplaceFileIn(s.fs, name, []byte(dirlog.FileHeader), 0o600, true); err != nil {
			return nil, spindle.E(op, spindle.IO, user, err)
		}
		f, err = s.fs.OpenFile(name, os.O_RDWR, 0)
	}
	if err != nil {
		return nil, spindle.E(op, spindle.IO, user, err)
	}
	return &diskLog{fs: s.fs, user: user, name: name, f: f, end: -1}, nil
}

type diskLog struct {
	fs      spindle.FS
	user    spindle.UserName
	name    string
	f       spindle.FSFile
	offsets []int64 // Start of every valid record.
	end     int64   // End of the last valid record; -1 before the first Scan.
	badHdr  bool    // The file header is damaged: no record counts.
}

func (l *diskLog) Name() string { return l.name }

// readAll returns the whole log file.
func (l *diskLog) readAll() ([]byte, error) {
	info, err := l.f.Stat()
	if err != nil {
		return nil, err
	}
	data := make([]byte, info.Size())
	if _, err := l.f.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, err
	}
	return data, nil
}

func (l *diskLog) Raw(ctx context.Context) ([]byte, error) {
	data, err := l.readAll()
	if err != nil {
		return nil, spindle.E(spindle.Op("dirlog.Log.Raw"), spindle.IO, l.user, err)
	}
	if !strings.HasPrefix(string(data), dirlog.FileHeader) {
		return nil, nil
	}
	return data[len(dirlog.FileHeader):], nil
}

func (l *diskLog) Patch(ctx context.Context, off int64, b []byte) (string, error) {
	const op spindle.Op = "dirlog.Log.Patch"
	data, err := l.readAll()
	if err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	// The copy is durable, entry and all, before the log changes.
	keep := fmt.Sprintf("%s.damaged-%d", l.name, time.Now().UnixNano())
	if err := spindle.CreateFileIn(l.fs, keep, data, 0o600); err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	if _, err := l.f.WriteAt(b, int64(len(dirlog.FileHeader))+off); err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	if err := l.f.Sync(); err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	l.end = -1
	return keep, nil
}

var _ Log = (*diskLog)(nil)

func (l *diskLog) Scan(ctx context.Context, fn func([]byte) error) error {
	const op spindle.Op = "dirlog.Log.Scan"
	if _, err := l.f.Seek(0, io.SeekStart); err != nil {
		return spindle.E(op, spindle.IO, l.user, err)
	}
	var hdr [len(dirlog.FileHeader)]byte
	if _, err := io.ReadFull(l.f, hdr[:]); err != nil || string(hdr[:]) != dirlog.FileHeader {
		l.offsets, l.end, l.badHdr = nil, 0, true
		return spindle.E(op, spindle.Integrity, l.user, &dirlog.TailError{Reason: fmt.Sprintf("%s is not a dirlog file (bad header)", l.name)})
	}
	l.badHdr = false
	var fnErr error
	offsets, end, err := dirlog.ScanFrames(l.f, int64(len(dirlog.FileHeader)), func(b []byte) error {
		fnErr = fn(b)
		return fnErr
	})
	// A scan fn stopped short of the end does not say where the log ends.
	if fnErr == nil {
		l.offsets, l.end = offsets, end
	}
	var te *dirlog.TailError
	switch {
	case err == nil:
		return nil
	case fnErr != nil:
		return fnErr
	case errors.As(err, &te):
		return spindle.E(op, spindle.Integrity, l.user, err)
	}
	return spindle.E(op, spindle.IO, l.user, err)
}

func (l *diskLog) ScanFrom(ctx context.Context, first int, fn func([]byte) error) error {
	if l.end < 0 || first <= 0 || first > len(l.offsets) {
		return scanSkipping(ctx, l, first, fn)
	}
	if first == len(l.offsets) {
		return nil
	}
	off := l.offsets[first]
	_, _, err := dirlog.ScanFrames(io.NewSectionReader(l.f, off, l.end-off), off, fn)
	var te *dirlog.TailError
	if errors.As(err, &te) {
		// The bytes known to be whole read as damaged: the file changed.
		return spindle.E(spindle.Op("dirlog.Log.Scan"), spindle.Integrity, l.user, err)
	}
	return err
}

// scanSkipping is ScanFrom by a Scan of the whole log.
func scanSkipping(ctx context.Context, l Log, first int, fn func([]byte) error) error {
	i := 0
	return l.Scan(ctx, func(b []byte) error {
		if i++; i <= first {
			return nil
		}
		return fn(b)
	})
}

func (l *diskLog) Append(ctx context.Context, recs ...[]byte) error {
	const op spindle.Op = "dirlog.Log.Append"
	if l.end < 0 {
		if err := l.Scan(ctx, func([]byte) error { return nil }); err != nil {
			return spindle.E(op, err)
		}
	}
	frames, err := appendFrames(l.user, recs)
	if err != nil {
		return spindle.E(op, err)
	}
	if _, err := l.f.WriteAt(frames, l.end); err != nil {
		l.f.Truncate(l.end) // Best effort: a later Scan cuts a partial frame anyway.
		return spindle.E(op, spindle.IO, l.user, err)
	}
	if err := l.f.Sync(); err != nil {
		return spindle.E(op, spindle.IO, l.user, err)
	}
	for _, rec := range recs {
		l.offsets = append(l.offsets, l.end)
		l.end += dirlog.FrameSize + int64(len(rec))
	}
	return nil
}

// appendFrames frames recs for Append, refusing an empty or oversized
// record and an empty list.
func appendFrames(user spindle.UserName, recs [][]byte) ([]byte, error) {
	if len(recs) == 0 {
		return nil, spindle.E(spindle.Invalid, user, "no records to append")
	}
	size := 0
	for _, rec := range recs {
		if len(rec) == 0 || len(rec) > dirlog.MaxRecord {
			return nil, spindle.E(spindle.Invalid, user, fmt.Sprintf("record of %d bytes", len(rec)))
		}
		size += dirlog.FrameSize + len(rec)
	}
	b := make([]byte, 0, size)
	for _, rec := range recs {
		b = dirlog.AppendFrame(b, rec)
	}
	return b, nil
}

func (l *diskLog) Truncate(ctx context.Context, n int) (string, error) {
	const op spindle.Op = "dirlog.Log.Truncate"
	if l.end < 0 {
		return "", spindle.E(op, spindle.Internal, l.user, "Truncate before Scan")
	}
	if n < 0 || n > len(l.offsets) {
		return "", spindle.E(op, spindle.Invalid, l.user, fmt.Sprintf("cannot keep %d of %d records", n, len(l.offsets)))
	}
	cut := l.end
	if n < len(l.offsets) {
		cut = l.offsets[n]
	}
	info, err := l.f.Stat()
	if err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	keep := ""
	if info.Size() > cut {
		// Keep the cut bytes, synced, before removing them.
		tail := make([]byte, info.Size()-cut)
		if _, err := l.f.ReadAt(tail, cut); err != nil && err != io.EOF {
			return "", spindle.E(op, spindle.IO, l.user, err)
		}
		keep = fmt.Sprintf("%s.damaged-%d", l.name, time.Now().UnixNano())
		// The kept copy is durable, entry and all, before the log is cut.
		if err := spindle.CreateFileIn(l.fs, keep, tail, 0o600); err != nil {
			return "", spindle.E(op, spindle.IO, l.user, err)
		}
		if err := l.f.Truncate(cut); err != nil {
			return "", spindle.E(op, spindle.IO, l.user, err)
		}
	}
	if l.badHdr {
		if _, err := l.f.WriteAt([]byte(dirlog.FileHeader), 0); err != nil {
			return "", spindle.E(op, spindle.IO, l.user, err)
		}
		cut = int64(len(dirlog.FileHeader))
		l.badHdr = false
	}
	if err := l.f.Sync(); err != nil {
		return "", spindle.E(op, spindle.IO, l.user, err)
	}
	l.offsets = l.offsets[:n]
	l.end = cut
	return keep, nil
}

func (l *diskLog) Replace(ctx context.Context, recs ...[]byte) error {
	const op spindle.Op = "dirlog.Log.Replace"
	frames, err := appendFrames(l.user, recs)
	if err != nil {
		return spindle.E(op, err)
	}
	data := append([]byte(dirlog.FileHeader), frames...)
	rerr := spindle.ReplaceFileIn(l.fs, l.name, data, 0o600, true)
	// The file may have been replaced even if an error came after (in
	// syncing its directory): read and append to whichever is there,
	// after a new Scan.
	f, err := l.fs.OpenFile(l.name, os.O_RDWR, 0)
	if err != nil {
		l.end = -1
		return spindle.E(op, spindle.IO, l.user, err)
	}
	l.f.Close()
	if rerr != nil {
		l.f, l.end = f, -1
		return spindle.E(op, spindle.IO, l.user, rerr)
	}
	l.f, l.badHdr, l.offsets, l.end = f, false, nil, int64(len(dirlog.FileHeader))
	for _, rec := range recs {
		l.offsets = append(l.offsets, l.end)
		l.end += dirlog.FrameSize + int64(len(rec))
	}
	return nil
}

func (l *diskLog) Close() error {
	if err := l.f.Close(); err != nil {
		return spindle.E(spindle.Op("dirlog.Log.Close"), spindle.IO, l.user, err)
	}
	return nil
}

// MemStore is a [Store] that keeps logs in memory, framed exactly as on
// disk. Its zero value is ready to use. It is meant for tests, which may
// read and damage the bytes of a log with [MemStore.Bytes] and
// [MemStore.SetBytes].
type MemStore struct {
	mu    sync.Mutex
	logs  map[spindle.UserName]*memData
	marks map[spindle.UserName]Mark
}

type memData struct {
	data []byte   // Framed records, without a file header.
	cuts [][]byte // Tails removed by Truncate.
}

var _ Store = (*MemStore)(nil)

func (s *MemStore) get(user spindle.UserName) *memData {
	if s.logs == nil {
		s.logs = make(map[spindle.UserName]*memData)
	}
	d := s.logs[user]
	if d == nil {
		d = &memData{}
		s.logs[user] = d
	}
	return d
}

// Users implements [Store].
func (s *MemStore) Users(ctx context.Context) ([]spindle.UserName, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var users []spindle.UserName
	for u := range s.logs {
		users = append(users, u)
	}
	sort.Slice(users, func(i, j int) bool { return users[i] < users[j] })
	return users, nil
}

// Open implements [Store].
func (s *MemStore) Open(ctx context.Context, user spindle.UserName) (Log, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(user)
	return &memLog{s: s, user: user, end: -1}, nil
}

// Bytes returns a copy of the user's framed log.
func (s *MemStore) Bytes(user spindle.UserName) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.get(user).data...)
}

// SetBytes replaces the user's framed log with a copy of data.
func (s *MemStore) SetBytes(user spindle.UserName, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(user).data = append([]byte(nil), data...)
}

// Cuts returns copies of the tails cut from the user's log.
func (s *MemStore) Cuts(user spindle.UserName) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for _, c := range s.get(user).cuts {
		out = append(out, append([]byte(nil), c...))
	}
	return out
}

type memLog struct {
	s       *MemStore
	user    spindle.UserName
	offsets []int64
	end     int64
}

var _ Log = (*memLog)(nil)

func (l *memLog) Scan(ctx context.Context, fn func([]byte) error) error {
	l.s.mu.Lock()
	data := append([]byte(nil), l.s.get(l.user).data...)
	l.s.mu.Unlock()
	var fnErr error
	offsets, end, err := dirlog.ScanFrames(strings.NewReader(string(data)), 0, func(b []byte) error {
		fnErr = fn(b)
		return fnErr
	})
	if fnErr == nil {
		l.offsets, l.end = offsets, end
	} // Else fn stopped the scan short of the end: keep what was known.
	if fnErr != nil {
		return fnErr
	}
	var te *dirlog.TailError
	if errors.As(err, &te) {
		return spindle.E(spindle.Op("dirlog.Log.Scan"), spindle.Integrity, l.user, err)
	}
	return err
}

func (l *memLog) ScanFrom(ctx context.Context, first int, fn func([]byte) error) error {
	return scanSkipping(ctx, l, first, fn)
}

func (l *memLog) Append(ctx context.Context, recs ...[]byte) error {
	const op spindle.Op = "dirlog.Log.Append"
	if l.end < 0 {
		if err := l.Scan(ctx, func([]byte) error { return nil }); err != nil {
			return spindle.E(op, err)
		}
	}
	frames, err := appendFrames(l.user, recs)
	if err != nil {
		return spindle.E(op, err)
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	d := l.s.get(l.user)
	d.data = append(d.data[:l.end], frames...)
	for _, rec := range recs {
		l.offsets = append(l.offsets, l.end)
		l.end += dirlog.FrameSize + int64(len(rec))
	}
	return nil
}

func (l *memLog) Name() string { return "memory log of " + string(l.user) }

func (l *memLog) Raw(ctx context.Context) ([]byte, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return append([]byte(nil), l.s.get(l.user).data...), nil
}

func (l *memLog) Patch(ctx context.Context, off int64, b []byte) (string, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	d := l.s.get(l.user)
	d.cuts = append(d.cuts, append([]byte(nil), d.data...))
	copy(d.data[off:], b)
	l.end = -1
	return fmt.Sprintf("cut %d of the memory log (MemStore.Cuts)", len(d.cuts)), nil
}

func (l *memLog) Truncate(ctx context.Context, n int) (string, error) {
	const op spindle.Op = "dirlog.Log.Truncate"
	if l.end < 0 {
		return "", spindle.E(op, spindle.Internal, l.user, "Truncate before Scan")
	}
	if n < 0 || n > len(l.offsets) {
		return "", spindle.E(op, spindle.Invalid, l.user, fmt.Sprintf("cannot keep %d of %d records", n, len(l.offsets)))
	}
	cut := l.end
	if n < len(l.offsets) {
		cut = l.offsets[n]
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	d := l.s.get(l.user)
	keep := ""
	if int64(len(d.data)) > cut {
		d.cuts = append(d.cuts, append([]byte(nil), d.data[cut:]...))
		d.data = d.data[:cut:cut]
		keep = fmt.Sprintf("cut %d of the memory log (MemStore.Cuts)", len(d.cuts))
	}
	l.offsets = l.offsets[:n]
	l.end = cut
	return keep, nil
}

func (l *memLog) Replace(ctx context.Context, recs ...[]byte) error {
	frames, err := appendFrames(l.user, recs)
	if err != nil {
		return spindle.E(spindle.Op("dirlog.Log.Replace"), err)
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	l.s.get(l.user).data = frames
	l.offsets, l.end = nil, 0
	for _, rec := range recs {
		l.offsets = append(l.offsets, l.end)
		l.end += dirlog.FrameSize + int64(len(rec))
	}
	return nil
}

func (l *memLog) Close() error { return nil }
