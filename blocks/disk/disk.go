// Package disk is a block store kept in files under one directory.
//
// Each block is a file named by the hex form of its SHA-256 digest, in a
// subdirectory named by the first two hex digits:
//
//	DIR/3f/3fa9…e1
//
// A Put writes a temporary file under DIR/tmp, syncs it, renames it into
// place and syncs the directory, so a block is durable before Put returns
// and a crash never leaves a partial block under its name. Temporary files
// left by a crash are removed by [Open]. Blocks under 64 KiB are not given
// a file each: they are appended to segment files under DIR/small, and
// concurrent Puts share one fsync (see small.go).
//
// Put checks the block's SHA-256 and stores a CRC-32C beside it; every Get
// checks what it read against the CRC, or the hash if the CRC is missing
// or wrong, and a copy that does not match is reported as Integrity and
// removed, never served.
//
// A directory is used by one Store at a time: Open takes an advisory lock
// on DIR/lock that Close releases.
package disk

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"

	"spindle.dev"
	"spindle.dev/blocks"
)

const (
	tmpDir   = "tmp"
	lockFile = "lock"
)

// Store is a [spindle.BlockStore] and [spindle.BlockLister] on disk.
// It is safe for concurrent use.
type Store struct {
	fs     spindle.FS
	direct spindle.DirectFS // fs, if it does direct I/O; else nil.
	dir    string
	lock   *spindle.FileLock // Nil on a file system other than spindle.OS.

	// stripes serialise the changes to one block file (rename into place,
	// removal of a corrupt copy, delete), so that removing a bad copy can
	// never remove a good one that a concurrent Put has just stored.
	stripes [64]sync.Mutex

	dirMu   sync.Mutex
	dirMade [256]bool // Fan-out subdirectories known to exist.

	small *smallStore // Blocks under smallMax bytes.

	closed bool

	noDirect     atomic.Bool // The file system does not support direct writes.
	noDirectRead atomic.Bool // Nor direct reads.
}

var (
	_ spindle.BlockStore  = (*Store)(nil)
	_ spindle.BlockLister = (*Store)(nil)
)

// Open opens the store in dir, creating dir if needed, and removes the
// temporary files a crash may have left. It fails with Exist if another
// Store holds dir.
func Open(dir string) (*Store, error) { return OpenFS(spindle.OS, dir) }

// OpenFS is Open on the file system fsys (tests use a spindle.MemFS). If
// fsys is a [spindle.DirectFS], large blocks are written and read with
// direct I/O, as on spindle.OS; otherwise every block goes through the
// page cache. On any file system other than spindle.OS the store takes no
// lock across processes.
func OpenFS(fsys spindle.FS, dir string) (*Store, error) {
	const op spindle.Op = "disk.Open"
	if dir == "" {
		return nil, spindle.E(op, spindle.Invalid, "empty directory name")
	}
	dir = filepath.Clean(dir)
	s := &Store{fs: fsys, dir: dir}
	if d, ok := fsys.(spindle.DirectFS); ok {
		s.direct = d
	} else {
		s.noDirect.Store(true)
		s.noDirectRead.Store(true)
	}
	if err := s.mkdir(dir); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	if err := s.mkdir(filepath.Join(dir, tmpDir)); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	if fsys == spindle.OS {
		markTopDir(dir)
		lock, err := spindle.LockFile(filepath.Join(dir, lockFile), false)
		if err != nil {
			if errors.Is(err, spindle.Exist) {
				return nil, spindle.E(op, spindle.Exist, fmt.Sprintf("block store %s is in use by another process or store", dir))
			}
			return nil, spindle.E(op, err)
		}
		s.lock = lock
	}
	if err := s.removeTemps(); err != nil {
		s.Close()
		return nil, spindle.E(op, spindle.IO, err)
	}
	var err error
	if s.small, err = openSmall(fsys, dir); err != nil {
		s.Close()
		return nil, spindle.E(op, spindle.IO, err)
	}
	return s, nil
}

// mkdir makes dir, and its parent's entry for it durable, if it does not
// exist.
func (s *Store) mkdir(dir string) error {
	if _, err := s.fs.Stat(dir); err == nil {
		return nil
	}
	if err := s.fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return s.fs.SyncDir(filepath.Dir(dir))
}

// removeTemps deletes every file under DIR/tmp.
func (s *Store) removeTemps() error {
	tmp := filepath.Join(s.dir, tmpDir)
	ents, err := s.fs.ReadDir(tmp)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := s.fs.Remove(filepath.Join(tmp, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Damage describes the damage Open found in the segments that hold small
// blocks and could not repair: the blocks it hides read as absent until
// they are put again.
func (s *Store) Damage() []error { return s.small.damage }

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Close releases the store's directory. The Store must not be used after.
func (s *Store) Close() error {
	const op spindle.Op = "disk.Close"
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if s.small != nil {
		err = s.small.close()
		s.small = nil
	}
	if s.lock != nil {
		if lerr := s.lock.Unlock(); err == nil {
			err = lerr
		}
		s.lock = nil
	}
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	return nil
}

// Path returns the file name that holds the block with digest d. It exists
// for tests and tools that inspect the store.
func (s *Store) Path(d blocks.Digest) string {
	h := hex.EncodeToString(d[:])
	return filepath.Join(s.dir, h[:2], h)
}

func (s *Store) stripe(d blocks.Digest) *sync.Mutex { return &s.stripes[d[0]%byte(len(s.stripes))] }

// Put implements [spindle.BlockStore]. The block is on stable storage
// when Put returns. Putting a block whose file is present and sound does
// not write it again; a corrupt file is replaced.
func (s *Store) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "disk.Put"
	if err := ctx.Err(); err != nil {
		return "", spindle.E(op, spindle.Transient, err)
	}
	ref, d, err := blocks.Receive(data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	if len(data) < smallMax {
		if s.small.stored(d) {
			return ref, nil
		}
		if err := s.small.put(d, data); err != nil {
			return "", spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
		}
		return ref, nil
	}
	name := s.Path(d)
	if s.sound(d, name) {
		return ref, nil
	}
	tmp, err := s.writeTemp(data)
	if err != nil {
		return "", spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
	}
	if err := s.install(d, tmp, name); err != nil {
		s.fs.Remove(tmp)
		return "", spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
	}
	return ref, nil
}

// writeTemp writes data to a new synced file under DIR/tmp and returns its name.
func (s *Store) writeTemp(data []byte) (string, error) {
	if len(data) >= directMin && !s.noDirect.Load() {
		name, ok, err := s.writeTempDirect(data)
		if ok {
			return name, err
		}
		s.noDirect.Store(true) // The file system refuses direct I/O: buffer from now on.
	}
	f, err := s.fs.CreateTemp(filepath.Join(s.dir, tmpDir), "put-*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	_, err = f.Write(data)
	if err == nil {
		_, err = f.Write(appendTrailer(nil, data))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.fs.Remove(name)
		return "", err
	}
	return name, nil
}

// install renames tmp to name, creating the fan-out directory if needed,
// and syncs the directory that now holds name.
func (s *Store) install(d blocks.Digest, tmp, name string) error {
	sub := filepath.Dir(name)
	if err := s.makeSubdir(d[0], sub); err != nil {
		return err
	}
	mu := s.stripe(d)
	mu.Lock()
	err := s.fs.Rename(tmp, name)
	mu.Unlock()
	if err != nil {
		return err
	}
	return s.fs.SyncDir(sub)
}

// makeSubdir creates the fan-out directory sub for digests starting with
// b, syncing the store's directory so that the new entry is durable.
func (s *Store) makeSubdir(b byte, sub string) error {
	s.dirMu.Lock()
	defer s.dirMu.Unlock()
	if s.dirMade[b] {
		return nil
	}
	_, err := s.fs.Stat(sub)
	if errors.Is(err, fs.ErrNotExist) {
		err = s.fs.MkdirAll(sub, 0o700)
		if err == nil {
			err = s.fs.SyncDir(s.dir)
		}
	}
	if err != nil {
		return err
	}
	s.dirMade[b] = true
	return nil
}

// List implements [spindle.BlockLister]. Files that are not named like
// blocks are skipped. fn may call other methods of the store.
func (s *Store) List(ctx context.Context, fn func(spindle.Ref) error) error {
	const op spindle.Op = "disk.List"
	small := make(map[blocks.Digest]bool)
	err := s.small.list(func(d blocks.Digest) error {
		if err := ctx.Err(); err != nil {
			return spindle.E(op, spindle.Transient, err)
		}
		small[d] = true
		return fn(d.Ref())
	})
	if err != nil {
		return err
	}
	subs, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return spindle.E(op, spindle.IO, err)
	}
	for _, sub := range subs {
		if !sub.IsDir() || !isHex(sub.Name(), 2) {
			continue
		}
		ents, err := s.fs.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			return spindle.E(op, spindle.IO, err)
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return spindle.E(op, spindle.Transient, err)
			}
			n := e.Name()
			if !e.Type().IsRegular() || !isHex(n, 2*len(blocks.Digest{})) || n[:2] != sub.Name() {
				continue
			}
			var d blocks.Digest
			hex.Decode(d[:], []byte(n))
			if small[d] {
				continue // Listed already.
			}
			if err := fn(d.Ref()); err != nil {
				return err
			}
		}
	}
	return nil
}

// isHex reports whether s is n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// Delete implements [spindle.BlockLister]. The removal is durable when
// Delete returns.
func (s *Store) Delete(ctx context.Context, ref spindle.Ref) error {
	const op spindle.Op = "disk.Delete"
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return spindle.E(op, err)
	}
	if err := s.small.remove(d); err != nil {
		return spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
	}
	name := s.Path(d)
	mu := s.stripe(d)
	mu.Lock()
	err = s.fs.Remove(name)
	mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = s.fs.SyncDir(filepath.Dir(name))
	}
	if err != nil {
		return spindle.E(op, spindle.IO, fmt.Errorf("block %s: %w", ref, err))
	}
	return nil
}
