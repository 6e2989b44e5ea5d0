package spindle

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// A MemFS is a strict file system in memory, for testing that stores make
// durable what they acknowledge. It keeps, beside what is written, what a
// crash would leave: a file's contents as of its last Sync, and a
// directory's entries as of its last SyncDir. [MemFS.Crash] goes back to
// that state, as a power cut would, so a test can check after a crash at
// any point that everything a store acknowledged is there whole and that
// nothing it did not acknowledge is there in part. [MemFS.CrashAfter]
// picks the point: the operation that changes the file system which
// comes after the given number fails, as do all after it, until Crash.
//
// A MemFS is a [DirectFS]: files opened with [MemFS.OpenDirect] keep the
// same contents, durable at the same points, and fail, as O_DIRECT files
// do on Linux, every read or write whose buffer, offset or length is not
// aligned to [DirectAlign].
//
// A MemFS is safe for concurrent use. Its zero value is not usable; call
// [NewMemFS].
type MemFS struct {
	mu      sync.Mutex
	root    *memDir
	gen     int // Incremented by Crash; handles of an older generation fail.
	ops     int // Changing operations so far.
	crashAt int // ops at which the crash happens; 0 means never.
	crashed bool
}

// ErrCrashed is the error of every operation on a [MemFS] after its
// simulated crash, and of files opened before it.
var ErrCrashed = errors.New("memfs: simulated crash")

// NewMemFS returns an empty MemFS. Its root directory "/" always exists;
// relative names are taken from the root.
func NewMemFS() *MemFS { return &MemFS{root: newMemDir()} }

var _ DirectFS = (*MemFS)(nil)

// A memFile is an inode: contents now and as of the last sync.
type memFile struct {
	data, synced []byte
	mode         fs.FileMode
	mtime        time.Time
}

type memDir struct {
	entries map[string]any // *memFile or *memDir, now.
	synced  map[string]any // As of the last SyncDir.
}

func newMemDir() *memDir { return &memDir{entries: map[string]any{}, synced: map[string]any{}} }

// CrashAfter arranges for the crash to happen after n more operations
// that change the file system (writes, syncs, creations, renames,
// removals, truncations, links, directory syncs): the (n+1)th fails with
// ErrCrashed, as does everything after it, and changes nothing. n < 0
// turns the crash off.
func (m *MemFS) CrashAfter(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if n < 0 {
		m.crashAt = 0
		return
	}
	m.crashAt = m.ops + n + 1
}

// Ops returns how many changing operations the file system has done.
func (m *MemFS) Ops() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops
}

// Crashed reports whether the crash CrashAfter arranged has happened.
func (m *MemFS) Crashed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.crashed
}

// Crash simulates a power cut and a restart: every file goes back to its
// contents at its last Sync, every directory to its entries at its last
// SyncDir, and files open before it fail from now on with ErrCrashed.
// The file system is then usable again.
func (m *MemFS) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	resetDir(m.root)
	m.gen++
	m.crashed, m.crashAt = false, 0
}

func resetDir(d *memDir) {
	d.entries = make(map[string]any, len(d.synced))
	for name, e := range d.synced {
		d.entries[name] = e
		switch e := e.(type) {
		case *memFile:
			e.data = slices.Clone(e.synced)
		case *memDir:
			resetDir(e)
		}
	}
}

// change counts a changing operation, failing it if the crash is due.
// m.mu is held.
func (m *MemFS) change() error {
	if m.crashed {
		return ErrCrashed
	}
	m.ops++
	if m.crashAt != 0 && m.ops >= m.crashAt {
		m.crashed = true
		return ErrCrashed
	}
	return nil
}

// split cleans name and returns its elements, none for the root.
func split(name string) []string {
	p := path.Clean("/" + filepath.ToSlash(name))
	if p == "/" {
		return nil
	}
	return strings.Split(p[1:], "/")
}

// dir walks to the directory that elems names. m.mu is held.
func (m *MemFS) dir(op, name string, elems []string) (*memDir, error) {
	d := m.root
	for _, el := range elems {
		switch e := d.entries[el].(type) {
		case *memDir:
			d = e
		case *memFile:
			return nil, &fs.PathError{Op: op, Path: name, Err: errors.New("not a directory")}
		default:
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
	}
	return d, nil
}

// parent returns the directory holding name and name's last element.
// m.mu is held.
func (m *MemFS) parent(op, name string) (*memDir, string, error) {
	elems := split(name)
	if len(elems) == 0 {
		return nil, "", &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	d, err := m.dir(op, name, elems[:len(elems)-1])
	if err != nil {
		return nil, "", err
	}
	return d, elems[len(elems)-1], nil
}

// OpenFile implements [FS]. It knows the flags O_RDONLY, O_WRONLY, O_RDWR,
// O_CREATE, O_EXCL, O_TRUNC and O_APPEND.
func (m *MemFS) OpenFile(name string, flag int, perm fs.FileMode) (FSFile, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrCrashed}
	}
	d, base, err := m.parent("open", name)
	if err != nil {
		return nil, err
	}
	var f *memFile
	switch e := d.entries[base].(type) {
	case *memDir:
		return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("is a directory")}
	case *memFile:
		if flag&os.O_CREATE != 0 && flag&os.O_EXCL != 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrExist}
		}
		f = e
		if flag&os.O_TRUNC != 0 && len(f.data) > 0 {
			if err := m.change(); err != nil {
				return nil, &fs.PathError{Op: "open", Path: name, Err: err}
			}
			f.data = nil
		}
	default:
		if flag&os.O_CREATE == 0 {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		}
		if err := m.change(); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		f = &memFile{mode: perm & fs.ModePerm, mtime: time.Now()}
		d.entries[base] = f
	}
	acc := flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR)
	return &memHandle{fs: m, f: f, name: name, gen: m.gen,
		read:   acc == os.O_RDONLY || acc == os.O_RDWR,
		write:  acc == os.O_WRONLY || acc == os.O_RDWR,
		append: flag&os.O_APPEND != 0}, nil
}

// OpenDirect implements [DirectFS]: it is OpenFile, for a file whose
// reads and writes must be aligned as O_DIRECT's are.
func (m *MemFS) OpenDirect(name string, flag int, perm fs.FileMode) (FSFile, error) {
	f, err := m.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	f.(*memHandle).direct = true
	return f, nil
}

// CreateTemp implements [FS].
func (m *MemFS) CreateTemp(dir, pattern string) (FSFile, error) {
	prefix, suffix, _ := strings.Cut(pattern, "*")
	for range 100 {
		name := path.Join(dir, fmt.Sprintf("%s%d%s", prefix, rand.Uint32(), suffix))
		f, err := m.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: path.Join(dir, pattern), Err: fs.ErrExist}
}

// MkdirAll implements [FS].
func (m *MemFS) MkdirAll(name string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.root
	for _, el := range split(name) {
		switch e := d.entries[el].(type) {
		case *memDir:
			d = e
		case *memFile:
			return &fs.PathError{Op: "mkdir", Path: name, Err: errors.New("not a directory")}
		default:
			if err := m.change(); err != nil {
				return &fs.PathError{Op: "mkdir", Path: name, Err: err}
			}
			nd := newMemDir()
			d.entries[el] = nd
			d = nd
		}
	}
	return nil
}

// ReadDir implements [FS].
func (m *MemFS) ReadDir(name string) ([]fs.DirEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrCrashed}
	}
	d, err := m.dir("readdir", name, split(name))
	if err != nil {
		return nil, err
	}
	var out []fs.DirEntry
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for n := range d.entries {
			if !yield(n) {
				return
			}
		}
	}) {
		out = append(out, fs.FileInfoToDirEntry(info(n, d.entries[n])))
	}
	return out, nil
}

// Stat implements [FS].
func (m *MemFS) Stat(name string) (fs.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.crashed {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrCrashed}
	}
	elems := split(name)
	if len(elems) == 0 {
		return info("/", m.root), nil
	}
	d, base, err := m.parent("stat", name)
	if err != nil {
		return nil, err
	}
	e, ok := d.entries[base]
	if !ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return info(base, e), nil
}

// Rename implements [FS].
func (m *MemFS) Rename(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, obase, err := m.parent("rename", oldname)
	if err != nil {
		return err
	}
	nd, nbase, err := m.parent("rename", newname)
	if err != nil {
		return err
	}
	e, ok := od.entries[obase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if _, isDir := nd.entries[nbase].(*memDir); isDir {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	if err := m.change(); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	delete(od.entries, obase)
	nd.entries[nbase] = e
	return nil
}

// Remove implements [FS]. A directory must be empty.
func (m *MemFS) Remove(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.parent("remove", name)
	if err != nil {
		return err
	}
	e, ok := d.entries[base]
	if !ok {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	if sub, isDir := e.(*memDir); isDir && len(sub.entries) > 0 {
		return &fs.PathError{Op: "remove", Path: name, Err: errors.New("directory not empty")}
	}
	if err := m.change(); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	delete(d.entries, base)
	return nil
}

// Link implements [FS].
func (m *MemFS) Link(oldname, newname string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	od, obase, err := m.parent("link", oldname)
	if err != nil {
		return err
	}
	nd, nbase, err := m.parent("link", newname)
	if err != nil {
		return err
	}
	f, ok := od.entries[obase].(*memFile)
	if !ok {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrNotExist}
	}
	if _, exists := nd.entries[nbase]; exists {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: fs.ErrExist}
	}
	if err := m.change(); err != nil {
		return &os.LinkError{Op: "link", Old: oldname, New: newname, Err: err}
	}
	nd.entries[nbase] = f
	return nil
}

// SyncDir implements [FS].
func (m *MemFS) SyncDir(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, err := m.dir("sync", name, split(name))
	if err != nil {
		return err
	}
	if err := m.change(); err != nil {
		return &fs.PathError{Op: "sync", Path: name, Err: err}
	}
	d.synced = make(map[string]any, len(d.entries))
	for n, e := range d.entries {
		d.synced[n] = e
	}
	return nil
}

// memHandle is an open file.
type memHandle struct {
	fs                  *MemFS
	f                   *memFile
	name                string
	gen                 int
	off                 int64
	read, write, append bool
	direct              bool // Opened by OpenDirect: I/O must be aligned.
	closed              bool
}

// aligned returns the error of a direct read or write of p at off that
// breaks O_DIRECT's alignment rules, if the handle is direct.
func (h *memHandle) aligned(op string, p []byte, off int64) error {
	if !h.direct {
		return nil
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	if off%DirectAlign != 0 || len(p)%DirectAlign != 0 || addr%DirectAlign != 0 {
		return &fs.PathError{Op: op, Path: h.name, Err: syscall.EINVAL}
	}
	return nil
}

// check returns why the handle cannot be used, if it cannot. fs.mu is held.
func (h *memHandle) check(op string, write bool) error {
	switch {
	case h.closed:
		return &fs.PathError{Op: op, Path: h.name, Err: fs.ErrClosed}
	case h.gen != h.fs.gen || h.fs.crashed:
		return &fs.PathError{Op: op, Path: h.name, Err: ErrCrashed}
	case write && !h.write || !write && !h.read:
		return &fs.PathError{Op: op, Path: h.name, Err: fs.ErrPermission}
	}
	return nil
}

func (h *memHandle) Name() string { return h.name }

func (h *memHandle) Read(p []byte) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	n, err := h.readAt(p, h.off)
	h.off += int64(n)
	return n, err
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	n, err := h.readAt(p, off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}

func (h *memHandle) readAt(p []byte, off int64) (int, error) {
	if err := h.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: h.name, Err: fs.ErrInvalid}
	}
	if off >= int64(len(h.f.data)) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF // Whatever the alignment, as on Linux.
	}
	if err := h.aligned("read", p, off); err != nil {
		return 0, err
	}
	return copy(p, h.f.data[off:]), nil
}

func (h *memHandle) Write(p []byte) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	off := h.off
	if h.append {
		off = int64(len(h.f.data))
	}
	n, err := h.writeAt(p, off)
	h.off = off + int64(n)
	return n, err
}

func (h *memHandle) WriteAt(p []byte, off int64) (int, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	return h.writeAt(p, off)
}

func (h *memHandle) writeAt(p []byte, off int64) (int, error) {
	if err := h.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "write", Path: h.name, Err: fs.ErrInvalid}
	}
	if err := h.aligned("write", p, off); err != nil {
		return 0, err
	}
	if err := h.fs.change(); err != nil {
		return 0, &fs.PathError{Op: "write", Path: h.name, Err: err}
	}
	if end := off + int64(len(p)); end > int64(len(h.f.data)) {
		h.f.data = append(h.f.data, make([]byte, end-int64(len(h.f.data)))...)
	}
	copy(h.f.data[off:], p)
	h.f.mtime = time.Now()
	return len(p), nil
}

func (h *memHandle) Seek(offset int64, whence int) (int64, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("seek", h.write && !h.read); err != nil {
		return 0, err
	}
	switch whence {
	case io.SeekCurrent:
		offset += h.off
	case io.SeekEnd:
		offset += int64(len(h.f.data))
	}
	if offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: h.name, Err: fs.ErrInvalid}
	}
	h.off = offset
	return offset, nil
}

func (h *memHandle) Stat() (fs.FileInfo, error) {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.gen != h.fs.gen || h.fs.crashed {
		return nil, &fs.PathError{Op: "stat", Path: h.name, Err: ErrCrashed}
	}
	return info(path.Base(h.name), h.f), nil
}

func (h *memHandle) Sync() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("sync", h.write && !h.read); err != nil {
		return err
	}
	if err := h.fs.change(); err != nil {
		return &fs.PathError{Op: "sync", Path: h.name, Err: err}
	}
	h.f.synced = slices.Clone(h.f.data)
	return nil
}

func (h *memHandle) Truncate(size int64) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if err := h.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &fs.PathError{Op: "truncate", Path: h.name, Err: fs.ErrInvalid}
	}
	if err := h.fs.change(); err != nil {
		return &fs.PathError{Op: "truncate", Path: h.name, Err: err}
	}
	if size <= int64(len(h.f.data)) {
		h.f.data = h.f.data[:size:size]
	} else {
		h.f.data = append(h.f.data, make([]byte, size-int64(len(h.f.data)))...)
	}
	return nil
}

func (h *memHandle) Chmod(mode fs.FileMode) error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.gen != h.fs.gen || h.fs.crashed {
		return &fs.PathError{Op: "chmod", Path: h.name, Err: ErrCrashed}
	}
	h.f.mode = mode & fs.ModePerm
	return nil
}

func (h *memHandle) Close() error {
	h.fs.mu.Lock()
	defer h.fs.mu.Unlock()
	if h.closed {
		return &fs.PathError{Op: "close", Path: h.name, Err: fs.ErrClosed}
	}
	h.closed = true
	return nil
}

// memInfo describes a file or directory of a MemFS.
type memInfo struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
}

func info(name string, e any) memInfo {
	switch e := e.(type) {
	case *memFile:
		return memInfo{name: name, size: int64(len(e.data)), mode: e.mode, mtime: e.mtime}
	default:
		return memInfo{name: name, mode: fs.ModeDir | 0o700}
	}
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return i.mode }
func (i memInfo) ModTime() time.Time { return i.mtime }
func (i memInfo) IsDir() bool        { return i.mode.IsDir() }
func (i memInfo) Sys() any           { return nil }
