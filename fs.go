package spindle

import (
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
