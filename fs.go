package spindle

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// An FS is the file system a store keeps its files in. Stores take one so
// that their durability can be tested: [OS] is the machine's file system,
// and [MemFS] one in memory that forgets, when a crash is simulated,
// everything that was not synced, as a power cut does.
//
// Names are slash-separated paths, as for package os. The rules a store
// must follow for durability are the POSIX ones: data written to a file is
// durable once the file is synced, and a new, renamed or removed directory
// entry once its directory is synced (SyncDir).
type FS interface {
	// OpenFile opens a file as os.OpenFile does.
	OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error)
	// CreateTemp creates a new file in dir as os.CreateTemp does.
	CreateTemp(dir, pattern string) (FSFile, error)
	// MkdirAll makes a directory and its parents as os.MkdirAll does.
	MkdirAll(name string, perm fs.FileMode) error
	// ReadDir lists a directory, sorted by name, as os.ReadDir does.
	ReadDir(name string) ([]fs.DirEntry, error)
	// Stat describes a file as os.Stat does.
	Stat(name string) (fs.FileInfo, error)
	// Rename, Remove and Link change directory entries as os's
	// functions of those names do.
	Rename(oldname, newname string) error
	Remove(name string) error
	Link(oldname, newname string) error
	// SyncDir makes the entries of directory name durable.
	SyncDir(name string) error
}

// An FSFile is an open file of an [FS]. *os.File implements it.
type FSFile interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Seeker
	io.Closer
	Name() string
	Stat() (fs.FileInfo, error)
	Sync() error
	Truncate(size int64) error
	Chmod(mode fs.FileMode) error
}

// OS is the machine's file system.
var OS FS = osFS{}

type osFS struct{}

var _ FSFile = (*os.File)(nil)

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // Not a nil *os.File in a non-nil FSFile.
	}
	return f, nil
}

func (osFS) CreateTemp(dir, pattern string) (FSFile, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (osFS) MkdirAll(name string, perm fs.FileMode) error { return os.MkdirAll(name, perm) }
func (osFS) ReadDir(name string) ([]fs.DirEntry, error)   { return os.ReadDir(name) }
func (osFS) Stat(name string) (fs.FileInfo, error)        { return os.Stat(name) }
func (osFS) Rename(oldname, newname string) error         { return os.Rename(oldname, newname) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) Link(oldname, newname string) error           { return os.Link(oldname, newname) }
func (osFS) SyncDir(name string) error                    { return SyncDir(name) }

// DirectAlign is the alignment that files opened with
// [DirectFS.OpenDirect] need: of the memory of every buffer read into or
// written from, of every offset and of every length. It is the page size,
// which satisfies every Linux file system's O_DIRECT rules.
const DirectAlign = 4096

// ErrNoDirect is the error, within an *fs.PathError, of
// [DirectFS.OpenDirect] on a file system that does not support direct I/O.
var ErrNoDirect = errors.New("direct I/O not supported")

// A DirectFS is an [FS] that can also open files for direct I/O, which
// moves data between the caller's buffer and the device without copying
// it through the page cache (O_DIRECT on Linux). Stores use it for large
// writes and reads that would only evict more useful pages. [OS] is a
// DirectFS, and so is [MemFS].
//
// Direct I/O changes where data goes, not when it is durable: a file's
// data, size and allocation are durable only once the file is synced, as
// with buffered I/O.
type DirectFS interface {
	FS
	// OpenDirect opens a file for direct I/O, as OpenFile does with
	// O_DIRECT. Reads and writes through the file must use buffers,
	// offsets and lengths aligned to DirectAlign, or they fail with an
	// error matching syscall.EINVAL, as on Linux; a read that starts at
	// or past the end of the file returns io.EOF whatever its alignment.
	// Truncate, Sync and Stat are as for any file. If the file system
	// holding name does not support direct I/O, OpenDirect fails with an
	// error matching ErrNoDirect and the caller should use OpenFile.
	OpenDirect(name string, flag int, perm fs.FileMode) (FSFile, error)
}

var _ DirectFS = osFS{}
