package fsys

import (
	"context"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"spindle.dev"
	"spindle.dev/client"
)

// snapshotsName is the read-only directory, at the root of the client's
// own tree, of the tree's past states (see the package comment).
const snapshotsName = ".snapshots"

// pastReader is a client that can read its own tree's past; a
// *[client.Client] is one.
type pastReader interface {
	PastAt(ctx context.Context, seq int64, when time.Time) (*client.Past, error)
	Retained(ctx context.Context) ([]client.Version, error)
}

var _ pastReader = (*client.Client)(nil)

// Snapshot caching. Reading a past state reads and checks the whole log,
// so a state is kept for a while once read: one that cannot change (a
// sequence, or a day before today, UTC) for longer.
const (
	snapTTL      = 10 * time.Second
	snapFixedTTL = 10 * time.Minute
	snapKept     = 16 // States kept at most.
)

// snapshots reads and caches the past states of the client's own tree.
type snapshots struct {
	f *filesys

	mu     sync.Mutex // Guards the fields below.
	states map[string]*snapState
	days   []string
	daysAt time.Time
}

// A snapState is one past state, by the name it has in .snapshots.
type snapState struct {
	past  *client.Past
	at    time.Time // When it was read.
	fixed bool
}

// parseSnapshot returns what the name of a snapshot means: a sequence
// (seq-N), or the end of a day, UTC (YYYY-MM-DD).
func parseSnapshot(name string) (seq int64, when time.Time, fixed, ok bool) {
	if n, found := strings.CutPrefix(name, "seq-"); found {
		seq, err := strconv.ParseInt(n, 10, 64)
		if err != nil || seq <= 0 || strconv.FormatInt(seq, 10) != n {
			return 0, time.Time{}, false, false
		}
		return seq, time.Time{}, true, true
	}
	day, err := time.Parse(time.DateOnly, name)
	if err != nil || day.Format(time.DateOnly) != name {
		return 0, time.Time{}, false, false
	}
	end := day.Add(24*time.Hour - time.Nanosecond)
	return 0, end, end.Before(time.Now().UTC()), true
}

// state returns the past state called name.
func (s *snapshots) state(ctx context.Context, name string) (*client.Past, error) {
	seq, when, fixed, ok := parseSnapshot(name)
	if !ok {
		return nil, spindle.E(spindle.NotExist, spindle.PathName(name), "not a snapshot's name: want YYYY-MM-DD or seq-N")
	}
	pr, ok := s.f.client.(pastReader)
	if !ok {
		return nil, spindle.E(spindle.NotExist, "this client cannot read the past")
	}
	s.mu.Lock()
	st := s.states[name]
	s.mu.Unlock()
	if st != nil {
		ttl := snapTTL
		if st.fixed {
			ttl = snapFixedTTL
		}
		if time.Since(st.at) < ttl {
			return st.past, nil
		}
	}
	past, err := bounded(ctx, s.f.timeout, func(ctx context.Context) (*client.Past, error) {
		return pr.PastAt(ctx, seq, when)
	})
	if err != nil {
		if st != nil && unreachable(err) {
			return st.past, nil
		}
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.states == nil {
		s.states = map[string]*snapState{}
	}
	s.states[name] = &snapState{past: past, at: time.Now(), fixed: fixed}
	for len(s.states) > snapKept {
		var oldest string
		for n, st := range s.states {
			if oldest == "" || st.at.Before(s.states[oldest].at) {
				oldest = n
			}
		}
		delete(s.states, oldest)
	}
	return past, nil
}

// list returns the names of the days that have entries of the retained
// log, oldest first.
func (s *snapshots) list(ctx context.Context) ([]string, error) {
	pr, ok := s.f.client.(pastReader)
	if !ok {
		return nil, nil
	}
	s.mu.Lock()
	if s.days != nil && time.Since(s.daysAt) < snapTTL {
		days := s.days
		s.mu.Unlock()
		return days, nil
	}
	s.mu.Unlock()
	vs, err := bounded(ctx, s.f.timeout, func(ctx context.Context) ([]client.Version, error) {
		return pr.Retained(ctx)
	})
	if err != nil {
		return nil, err
	}
	var days []string
	for _, v := range vs {
		d := v.Time.Go().UTC().Format(time.DateOnly)
		if len(days) == 0 || days[len(days)-1] != d {
			days = append(days, d)
		}
	}
	slices.Sort(days)
	days = slices.Compact(days)
	s.mu.Lock()
	s.days, s.daysAt = days, time.Now()
	s.mu.Unlock()
	return days, nil
}

// isSnapshots reports whether elem in dir is the .snapshots directory.
func (f *filesys) isSnapshots(dir spindle.PathName, elem string) bool {
	return elem == snapshotsName && dir == f.ownRoot()
}

// ownRoot returns the name of the root of the client's own tree.
func (f *filesys) ownRoot() spindle.PathName {
	return spindle.PathName(string(f.client.User()) + "/")
}

// snapshotsChild returns the inode of .snapshots under parent, the root
// of the client's own tree.
func (f *filesys) snapshotsChild(ctx context.Context, parent *fs.Inode, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if _, ok := f.client.(pastReader); !ok {
		return nil, syscall.ENOENT
	}
	readOnlyDirAttr(&out.Attr)
	if ch := parent.GetChild(snapshotsName); ch != nil {
		if _, ok := ch.Operations().(*snapsNode); ok {
			return ch, 0
		}
	}
	return parent.NewInode(ctx, &snapsNode{fs: f}, fs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func readOnlyDirAttr(out *fuse.Attr) {
	dirAttr(out)
	out.Mode = syscall.S_IFDIR | 0o555
}

// readOnly refuses every change with EROFS.
type readOnly struct{}

var (
	_ fs.NodeMkdirer   = readOnly{}
	_ fs.NodeCreater   = readOnly{}
	_ fs.NodeUnlinker  = readOnly{}
	_ fs.NodeRmdirer   = readOnly{}
	_ fs.NodeRenamer   = readOnly{}
	_ fs.NodeSymlinker = readOnly{}
	_ fs.NodeLinker    = readOnly{}
	_ fs.NodeSetattrer = readOnly{}
	_ fs.NodeStatfser  = readOnly{}
)

func (readOnly) Mkdir(context.Context, string, uint32, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Create(context.Context, string, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

func (readOnly) Unlink(context.Context, string) syscall.Errno { return syscall.EROFS }
func (readOnly) Rmdir(context.Context, string) syscall.Errno  { return syscall.EROFS }

func (readOnly) Rename(context.Context, string, fs.InodeEmbedder, string, uint32) syscall.Errno {
	return syscall.EROFS
}

func (readOnly) Symlink(context.Context, string, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Link(context.Context, fs.InodeEmbedder, string, *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

func (readOnly) Setattr(context.Context, fs.FileHandle, *fuse.SetAttrIn, *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

func (readOnly) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(out)
}

// snapsNode is .snapshots: a directory of the tree's past states.
type snapsNode struct {
	fs.Inode
	readOnly
	fs *filesys
}

var (
	_ fs.NodeLookuper  = (*snapsNode)(nil)
	_ fs.NodeReaddirer = (*snapsNode)(nil)
	_ fs.NodeGetattrer = (*snapsNode)(nil)
)

func (n *snapsNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	readOnlyDirAttr(&out.Attr)
	return 0
}

// Readdir lists one directory per day with entries; seq-N is found by
// name only.
func (n *snapsNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	days, err := n.fs.snaps.list(ctx)
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, 0, len(days))
	for _, d := range days {
		list = append(list, fuse.DirEntry{Name: d, Mode: syscall.S_IFDIR})
	}
	return fs.NewListDirStream(list), 0
}

func (n *snapsNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	past, err := n.fs.snaps.state(ctx, name)
	if err != nil {
		return nil, errno(err)
	}
	root, err := past.Lookup(n.fs.ownRoot())
	if err != nil {
		return nil, errno(err)
	}
	return n.fs.snapChild(ctx, &n.Inode, name, name, root, out), 0
}

// snapChild returns the inode for e, of the snapshot snap, as the child
// elem of parent.
func (f *filesys) snapChild(ctx context.Context, parent *fs.Inode, snap, elem string, e *spindle.DirEntry, out *fuse.EntryOut) *fs.Inode {
	snapAttr(e, &out.Attr)
	mode := modeOf(e)
	if ch := parent.GetChild(elem); ch != nil && ch.StableAttr().Mode == mode {
		return ch
	}
	var ops fs.InodeEmbedder
	switch mode {
	case syscall.S_IFDIR:
		ops = &snapDirNode{snapNode: snapNode{fs: f, snap: snap, name: e.Name}}
	case syscall.S_IFLNK:
		ops = &snapLinkNode{snapNode: snapNode{fs: f, snap: snap, name: e.Name}}
	default:
		ops = &snapFileNode{snapNode: snapNode{fs: f, snap: snap, name: e.Name}}
	}
	return parent.NewInode(ctx, ops, fs.StableAttr{Mode: mode})
}

// snapAttr describes e, an item of a past state, as read-only.
func snapAttr(e *spindle.DirEntry, out *fuse.Attr) {
	fillAttr(e, out)
	out.Mode &^= 0o222
}

// snapNode is what every item of a snapshot holds: the snapshot it is in
// and its Spindle name there.
type snapNode struct {
	fs.Inode
	readOnly
	fs   *filesys
	snap string
	name spindle.PathName
}

// entry returns the item's entry in its snapshot.
func (n *snapNode) entry(ctx context.Context) (*client.Past, *spindle.DirEntry, error) {
	past, err := n.fs.snaps.state(ctx, n.snap)
	if err != nil {
		return nil, nil, err
	}
	e, err := past.Lookup(n.name)
	return past, e, err
}

func (n *snapNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	_, e, err := n.entry(ctx)
	if err != nil {
		return errno(err)
	}
	snapAttr(e, &out.Attr)
	return 0
}

// snapDirNode is a directory of a snapshot.
type snapDirNode struct{ snapNode }

var (
	_ fs.NodeLookuper  = (*snapDirNode)(nil)
	_ fs.NodeReaddirer = (*snapDirNode)(nil)
	_ fs.NodeGetattrer = (*snapDirNode)(nil)
)

func (n *snapDirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	past, err := n.fs.snaps.state(ctx, n.snap)
	if err != nil {
		return nil, errno(err)
	}
	e, err := past.Lookup(childName(n.name, name))
	if err != nil {
		return nil, errno(err)
	}
	return n.fs.snapChild(ctx, &n.Inode, n.snap, name, e, out), 0
}

func (n *snapDirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	past, err := n.fs.snaps.state(ctx, n.snap)
	if err != nil {
		return nil, errno(err)
	}
	es, err := past.List(n.name)
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, 0, len(es))
	for _, e := range es {
		list = append(list, fuse.DirEntry{Name: path.Base(string(e.Name)), Mode: modeOf(e)})
	}
	return fs.NewListDirStream(list), 0
}

// snapLinkNode is a link of a snapshot, shown as a symbolic link.
type snapLinkNode struct{ snapNode }

var _ fs.NodeReadlinker = (*snapLinkNode)(nil)

func (n *snapLinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	_, e, err := n.entry(ctx)
	if err != nil {
		return nil, errno(err)
	}
	return []byte(relTarget(e.Name, e.Link)), 0
}

// snapFileNode is a file of a snapshot.
type snapFileNode struct{ snapNode }

var _ fs.NodeOpener = (*snapFileNode)(nil)

// Open opens the file as it was, for reading only.
func (n *snapFileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	past, e, err := n.entry(ctx)
	if err != nil {
		return nil, 0, errno(err)
	}
	h := &handle{fs: n.fs, entry: e, open: func(ctx context.Context) (spindle.File, error) {
		return past.Open(ctx, e.Name)
	}}
	return &snapHandle{h: h}, fuse.FOPEN_KEEP_CACHE, 0
}

// snapHandle is an open file of a snapshot.
type snapHandle struct{ h *handle }

var (
	_ fs.FileReader   = (*snapHandle)(nil)
	_ fs.FileReleaser = (*snapHandle)(nil)
)

func (s *snapHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	k, err := s.h.readAt(ctx, dest, off)
	if err != nil {
		if errors.Is(err, errChanged) {
			err = spindle.E(spindle.IO, err)
		}
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (s *snapHandle) Release(ctx context.Context) syscall.Errno {
	s.h.close()
	return 0
}
