package spindle

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ReplaceFile replaces the file name with data, so that whoever reads name
// sees either its old contents or the whole new ones, never a part: it
// writes a temporary file of its own in the same directory and renames it
// over name. Writers running at once never leave a mixed file; the last to
// finish wins whole. With durable set, the data and the new directory entry
// are on disk (fsynced) before ReplaceFile returns, so a crash leaves one
// version or the other; without it the file may be lost in a crash, which
// suits state that a later run can rebuild or that is saved very often.
func ReplaceFile(name string, data []byte, perm fs.FileMode, durable bool) error {
	return ReplaceFileIn(OS, name, data, perm, durable)
}

// ReplaceFileIn is ReplaceFile in the file system fsys.
func ReplaceFileIn(fsys FS, name string, data []byte, perm fs.FileMode, durable bool) error {
	tmp, err := writeTemp(fsys, name, data, perm, durable)
	if err != nil {
		return E(IO, err)
	}
	if err := fsys.Rename(tmp, name); err != nil {
		fsys.Remove(tmp)
		return E(IO, err)
	}
	if durable {
		if err := fsys.SyncDir(filepath.Dir(name)); err != nil {
			return E(IO, err)
		}
	}
	return nil
}

// CreateFile creates the file name holding data, durably, as ReplaceFile
// does, but fails with kind Exist, changing nothing, if name exists. It
// suits files that must never be overwritten, such as a private key.
func CreateFile(name string, data []byte, perm fs.FileMode) error {
	return CreateFileIn(OS, name, data, perm)
}

// CreateFileIn is CreateFile in the file system fsys.
func CreateFileIn(fsys FS, name string, data []byte, perm fs.FileMode) error {
	tmp, err := writeTemp(fsys, name, data, perm, true)
	if err != nil {
		return E(IO, err)
	}
	err = fsys.Link(tmp, name)
	// The temporary name goes before the directory is synced, so that a
	// crash leaves no trace of it.
	fsys.Remove(tmp)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return E(Exist, err)
		}
		return E(IO, err)
	}
	if err := fsys.SyncDir(filepath.Dir(name)); err != nil {
		return E(IO, err)
	}
	return nil
}

// SyncDir makes the entries of directory dir durable: a file created,
// renamed or removed in it survives a crash once SyncDir returns.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// writeTemp writes data to a new temporary file beside name, with mode
// perm, synced if durable, and returns its path.
func writeTemp(fsys FS, name string, data []byte, perm fs.FileMode, durable bool) (string, error) {
	f, err := fsys.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return "", err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fsys.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// A FileLock is an exclusive lock on a file, held across processes.
type FileLock struct{ f *os.File }

// LockFile takes an exclusive lock on the file name, creating it (mode
// 0600) if need be. With wait, it waits until no other process holds the
// lock; without, it fails at once with kind Exist if another does. The
// lock lasts until Unlock, or until the process ends, however it ends.
func LockFile(name string, wait bool) (*FileLock, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, E(IO, err)
	}
	if busy, err := lock(f, wait); err != nil {
		f.Close()
		if busy {
			return nil, E(Exist, fmt.Errorf("%s is locked by another process", name))
		}
		return nil, E(IO, err)
	}
	return &FileLock{f}, nil
}

// Unlock releases the lock.
func (l *FileLock) Unlock() error { return l.f.Close() }

// FormatBytes says n bytes in IEC units with one decimal, for people:
// 512 B, 34.0 MiB, 1.2 GiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	suffix := "KMGTPE"
	i := -1
	for v >= unit && i+1 < len(suffix) {
		v /= unit
		i++
	}
	if v >= 999.95 && i+1 < len(suffix) { // 1023.99 KiB would print as 1024.0 KiB.
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, suffix[i])
}
