package fsys

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"spindle.dev"
	"spindle.dev/access"
)

// renameNoReplace is RENAME_NOREPLACE of renameat2(2).
const renameNoReplace = 1

// spinName returns the Spindle name of the node n, and false if n is no
// longer in the tree (it was removed while open).
func spinName(n *fs.Inode) (spindle.PathName, bool) {
	p := n.Path(n.Root())
	if p == "" {
		return "", false // Orphaned: the kernel forgot it.
	}
	if strings.HasPrefix(p, ".go-fuse.") || strings.Contains(p, "/.go-fuse.") {
		return "", false
	}
	if !strings.Contains(p, "/") {
		return spindle.PathName(p + "/"), true
	}
	return spindle.PathName(p), true
}

// childName returns the name of elem in directory dir.
func childName(dir spindle.PathName, elem string) spindle.PathName {
	if strings.HasSuffix(string(dir), "/") {
		return dir + spindle.PathName(elem)
	}
	return dir + "/" + spindle.PathName(elem)
}

func isRules(name spindle.PathName) bool {
	return access.IsAccessFile(name) || access.IsGroupFile(name)
}

// modeOf returns the file type bits for e.
func modeOf(e *spindle.DirEntry) uint32 {
	switch {
	case e.Attr.IsDir():
		return syscall.S_IFDIR
	case e.Attr.IsLink():
		return syscall.S_IFLNK
	}
	return syscall.S_IFREG
}

// fillAttr describes e in out.
func fillAttr(e *spindle.DirEntry, out *fuse.Attr) {
	out.Mode = modeOf(e)
	switch out.Mode {
	case syscall.S_IFDIR:
		out.Mode |= 0o755
		if e.Attr.IsIncomplete() {
			out.Mode = syscall.S_IFDIR | 0o711
		}
		out.Size = 4096
	case syscall.S_IFLNK:
		out.Mode |= 0o777
		out.Size = uint64(len(relTarget(e.Name, e.Link)))
	default:
		out.Mode |= 0o644
		out.Size = uint64(fileSize(e))
		if e.Attr.IsIncomplete() {
			out.Mode &^= 0o444
		}
	}
	out.Nlink = 1
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	t := e.Time.Go()
	out.SetTimes(&t, &t, &t)
	out.Owner = fuse.Owner{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
}

// fileSize is the size of the file e.
func fileSize(e *spindle.DirEntry) int64 {
	if e.Inline != nil || (isRules(e.Name) && len(e.Blocks) == 0) {
		return int64(len(e.Inline))
	}
	return e.Size
}

func dirAttr(out *fuse.Attr) {
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 1
	out.Size = 4096
	out.Owner = fuse.Owner{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
}

// relTarget returns the target of the link at name as a relative path
// from the link's directory in the mount.
func relTarget(name, target spindle.PathName) string {
	dir := strings.TrimSuffix(string(parentOf(name)), "/")
	rel, err := filepath.Rel(dir, strings.TrimSuffix(string(target), "/"))
	if err != nil {
		return string(target)
	}
	return rel
}

// linkTarget returns the Spindle name a symbolic link target written in
// the directory dir of the mount at mountDir stands for.
func linkTarget(mountDir string, dir spindle.PathName, target string) (spindle.PathName, error) {
	var p string
	if filepath.IsAbs(target) {
		rel, err := filepath.Rel(mountDir, target)
		if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
			return "", spindle.E(spindle.Invalid, "a link must point into the mount")
		}
		p = rel
	} else {
		p = path.Join(strings.TrimSuffix(string(dir), "/"), target)
	}
	if p == ".." || strings.HasPrefix(p, "../") || !strings.Contains(strings.SplitN(p, "/", 2)[0], "@") {
		return "", spindle.E(spindle.Invalid, "a link must point into the mount")
	}
	if !strings.Contains(p, "/") {
		p += "/"
	}
	return spindle.PathName(p), nil
}

// newChild returns the inode for e as the child name of parent: the one
// there if it is of the same type, else a new one.
func (f *filesys) newChild(ctx context.Context, parent *fs.Inode, name string, e *spindle.DirEntry, out *fuse.EntryOut) *fs.Inode {
	mode := modeOf(e)
	if ch := parent.GetChild(name); ch != nil && ch.StableAttr().Mode == mode {
		if fn, ok := ch.Operations().(*fileNode); ok {
			fn.setEntry(e)
			fn.attr(e, &out.Attr)
			return ch
		}
		fillAttr(e, &out.Attr)
		return ch
	}
	var ops fs.InodeEmbedder
	switch mode {
	case syscall.S_IFDIR:
		ops = &dirNode{fs: f}
	case syscall.S_IFLNK:
		ops = &linkNode{fs: f}
	default:
		ops = &fileNode{fs: f, entry: e}
	}
	fillAttr(e, &out.Attr)
	return parent.NewInode(ctx, ops, fs.StableAttr{Mode: mode})
}

// rootNode is the mount's root: a directory of users' trees.
type rootNode struct {
	fs.Inode
	fs *filesys
}

var (
	_ fs.NodeLookuper  = (*rootNode)(nil)
	_ fs.NodeReaddirer = (*rootNode)(nil)
	_ fs.NodeGetattrer = (*rootNode)(nil)
	_ fs.NodeStatfser  = (*rootNode)(nil)
)

// Lookup enters the tree of the user name.
func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !strings.Contains(name, "@") {
		return nil, syscall.ENOENT
	}
	if _, err := spindle.CleanUser(spindle.UserName(name)); err != nil {
		return nil, syscall.ENOENT
	}
	e, err := r.fs.userRoot(ctx, spindle.PathName(name+"/"))
	if err != nil {
		return nil, errno(err)
	}
	return r.fs.newChild(ctx, &r.Inode, name, e, out), 0
}

// userRoot returns the entry of the root of a user's tree. A user's tree
// can be entered without any right on its root (that it exists is no
// secret: the user's key record says so), to reach what is shared below
// it; such a root is described as a directory that can be searched but not
// listed.
func (f *filesys) userRoot(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	e, err := f.meta.lookup(ctx, name)
	if errors.Is(err, spindle.Private) || errors.Is(err, spindle.Permission) {
		_, uerr := bounded(ctx, f.timeout, func(ctx context.Context) (*spindle.User, error) {
			return f.client.LookupUser(ctx, userOf(name))
		})
		if uerr != nil {
			return nil, uerr
		}
		return &spindle.DirEntry{Name: name, Attr: spindle.AttrDirectory | spindle.AttrIncomplete}, nil
	}
	return e, err
}

// Readdir lists the client's own user.
func (r *rootNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	return fs.NewListDirStream([]fuse.DirEntry{{Name: string(r.fs.client.User()), Mode: syscall.S_IFDIR}}), 0
}

func (r *rootNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	dirAttr(&out.Attr)
	return 0
}

// Statfs reports a large, mostly free file system, so that tools that
// check for space before they write go on.
func (r *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(out)
}

func statfs(out *fuse.StatfsOut) syscall.Errno {
	const blocks = 1 << 40 / 4096
	out.Bsize = 4096
	out.Frsize = 4096
	out.Blocks = blocks
	out.Bfree = blocks
	out.Bavail = blocks
	out.Files = 1 << 30
	out.Ffree = 1 << 30
	out.NameLen = 255
	return 0
}

// dirNode is a directory of a user's tree.
type dirNode struct {
	fs.Inode
	fs *filesys
}

var (
	_ fs.NodeLookuper  = (*dirNode)(nil)
	_ fs.NodeReaddirer = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
	_ fs.NodeSetattrer = (*dirNode)(nil)
	_ fs.NodeMkdirer   = (*dirNode)(nil)
	_ fs.NodeRmdirer   = (*dirNode)(nil)
	_ fs.NodeCreater   = (*dirNode)(nil)
	_ fs.NodeUnlinker  = (*dirNode)(nil)
	_ fs.NodeRenamer   = (*dirNode)(nil)
	_ fs.NodeSymlinker = (*dirNode)(nil)
	_ fs.NodeStatfser  = (*dirNode)(nil)
)

func (d *dirNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	return statfs(out)
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return nil, syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return d.fs.snapshotsChild(ctx, &d.Inode, out)
	}
	ch := d.GetChild(name)
	if ch != nil {
		if fn, ok := ch.Operations().(*fileNode); ok && fn.staged(&out.Attr) {
			return ch, 0
		}
	}
	if fn := d.fs.wb.owner(childName(dir, name)); fn != nil && ch == nil {
		// The kernel forgot a file whose put is queued: what it
		// finds must be what was written.
		if e := fn.storeNow(ctx); e != 0 {
			return nil, e
		}
	}
	e, err := d.fs.meta.lookup(ctx, childName(dir, name))
	if err != nil {
		return nil, errno(err)
	}
	return d.fs.newChild(ctx, &d.Inode, name, e, out), 0
}

func (d *dirNode) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return nil, syscall.ENOENT
	}
	// Files created here and not yet put, found before the listing:
	// one whose put lands meanwhile is in the listing.
	var local []string
	for name, ch := range d.Children() {
		if fn, ok := ch.Operations().(*fileNode); ok && fn.hasStage() {
			local = append(local, name)
		}
	}
	for _, p := range d.fs.wb.in(dir) {
		local = append(local, path.Base(string(p)))
	}
	es, err := d.fs.meta.list(ctx, dir)
	if errors.Is(err, spindle.Private) {
		// The directory is entered, so that it exists is known: it is
		// one that may not be listed (another user's root, say).
		return nil, syscall.EACCES
	}
	if err != nil {
		return nil, errno(err)
	}
	if len(es) == 0 {
		// A pattern finds nothing in a directory that may not be
		// listed: say so rather than show it empty.
		if _, err := d.fs.meta.lookup(ctx, dir); errors.Is(err, spindle.Private) || errors.Is(err, spindle.Permission) {
			return nil, syscall.EACCES
		}
	}
	list := make([]fuse.DirEntry, 0, len(es))
	seen := make(map[string]bool, len(es))
	for _, e := range es {
		name := path.Base(string(e.Name))
		if d.fs.isSnapshots(dir, name) {
			continue // Hidden by the mount's own.
		}
		seen[name] = true
		list = append(list, fuse.DirEntry{Name: name, Mode: modeOf(e)})
	}
	for _, name := range local {
		if !seen[name] {
			seen[name] = true
			list = append(list, fuse.DirEntry{Name: name, Mode: syscall.S_IFREG})
		}
	}
	return fs.NewListDirStream(list), 0
}

func (d *dirNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	dir, ok := spinName(&d.Inode)
	if !ok {
		dirAttr(&out.Attr)
		return 0
	}
	lookup := d.fs.meta.lookup
	if strings.HasSuffix(string(dir), "/") {
		lookup = d.fs.userRoot
	}
	e, err := lookup(ctx, dir)
	if err != nil {
		return errno(err)
	}
	fillAttr(e, &out.Attr)
	return 0
}

// Setattr changes nothing: modes, owners and times are not kept.
func (d *dirNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return d.Getattr(ctx, fh, out)
}

func (d *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return nil, syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return nil, syscall.EROFS
	}
	full := childName(dir, name)
	e, err := bounded(ctx, d.fs.timeout, func(ctx context.Context) (*spindle.DirEntry, error) {
		return d.fs.client.MakeDirectory(ctx, full)
	})
	if err != nil {
		return nil, errno(err)
	}
	d.fs.meta.madeDir(e)
	return d.fs.newChild(ctx, &d.Inode, name, e, out), 0
}

func (d *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return syscall.EROFS
	}
	full := childName(dir, name)
	if e, err := d.fs.meta.lookup(ctx, full); err == nil && !e.Attr.IsDir() {
		return syscall.ENOTDIR
	}
	err := d.fs.delete(ctx, full)
	d.fs.meta.changed(full, true)
	return errno(err)
}

func (f *filesys) delete(ctx context.Context, name spindle.PathName) error {
	_, err := bounded(ctx, f.timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.client.Delete(ctx, name)
	})
	return err
}

func (d *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return syscall.EROFS
	}
	full := childName(dir, name)
	if e, err := d.fs.meta.lookup(ctx, full); err == nil && e.Attr.IsDir() {
		return syscall.EISDIR
	}
	local := false
	if ch := d.GetChild(name); ch != nil {
		if fn, ok := ch.Operations().(*fileNode); ok {
			local = fn.drop()
		}
	}
	if fn := d.fs.wb.owner(full); fn != nil {
		// A queued put of a file the kernel forgot.
		local = fn.drop() || local
	}
	err := d.fs.delete(ctx, full)
	d.fs.meta.changed(full, false)
	if local && errors.Is(err, spindle.NotExist) {
		// Created here and never put.
		return 0
	}
	return errno(err)
}

func (d *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return nil, nil, 0, syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return nil, nil, 0, syscall.EROFS
	}
	full := childName(dir, name)
	if err := spindle.CheckName(full); err != nil {
		return nil, nil, 0, errno(err)
	}
	n := &fileNode{fs: d.fs}
	if err := n.newStage(); err != nil {
		return nil, nil, 0, syscall.EIO
	}
	n.dirty, n.fresh = true, true
	n.opens++
	ch := d.NewInode(ctx, n, fs.StableAttr{Mode: syscall.S_IFREG})
	n.staged(&out.Attr)
	return ch, &handle{n: n}, 0, 0
}

func (d *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return nil, syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) {
		return nil, syscall.EROFS
	}
	full := childName(dir, name)
	mountDir := ""
	if m := d.fs.mountDir; m != "" {
		mountDir = m
	}
	t, err := linkTarget(mountDir, dir, target)
	if err != nil {
		return nil, errno(err)
	}
	e, err := bounded(ctx, d.fs.timeout, func(ctx context.Context) (*spindle.DirEntry, error) {
		return d.fs.client.PutLink(ctx, t, full)
	})
	if err != nil {
		return nil, errno(err)
	}
	d.fs.meta.stored(e)
	return d.fs.newChild(ctx, &d.Inode, name, e, out), 0
}

func (d *dirNode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	dir, ok := spinName(&d.Inode)
	if !ok {
		return syscall.ENOENT
	}
	np, ok := newParent.(*dirNode)
	if !ok {
		if _, ok := newParent.(*rootNode); ok {
			return syscall.EPERM
		}
		return syscall.EROFS // Into a snapshot.
	}
	ndir, ok := spinName(&np.Inode)
	if !ok {
		return syscall.ENOENT
	}
	if d.fs.isSnapshots(dir, name) || d.fs.isSnapshots(ndir, newName) {
		return syscall.EROFS
	}
	if flags&^renameNoReplace != 0 {
		return syscall.EINVAL
	}
	from, to := childName(dir, name), childName(ndir, newName)
	if userOf(from) != userOf(to) {
		return syscall.EXDEV
	}
	defer d.fs.meta.changed(from, true)
	defer d.fs.meta.changed(to, true)
	var src *fileNode
	if ch := d.GetChild(name); ch != nil {
		src, _ = ch.Operations().(*fileNode)
	}
	if src == nil {
		src = d.fs.wb.owner(from)
	}
	if src != nil && !isRules(from) && !isRules(to) {
		if moved, err := d.fs.moveStaged(ctx, src, from, to, flags); moved || err != nil {
			return errno(err)
		}
	}
	// What was written to the file, or below the directory, must be
	// there to be moved.
	if src != nil {
		if e := src.storeNow(ctx); e != 0 {
			return e
		}
	}
	for _, fn := range d.fs.wb.under(from) {
		if e := fn.storeNow(ctx); e != 0 {
			return e
		}
	}
	if isRules(from) || isRules(to) {
		return errno(d.fs.renameByPut(ctx, from, to, flags))
	}
	if fn := d.fs.wb.owner(to); fn != nil {
		// Stored first, so that its put cannot land over the file
		// renamed onto it.
		if e := fn.storeNow(ctx); e != 0 {
			return e
		}
	}
	err := d.fs.rename(ctx, from, to)
	if errors.Is(err, spindle.Exist) && flags&renameNoReplace == 0 {
		// Replace the target, as rename(2) does. The tree has no
		// replacing rename: the target is deleted first, and while it
		// is missing this mount goes on answering with it.
		old, lerr := d.fs.meta.lookup(ctx, to)
		if lerr != nil {
			return errno(lerr)
		}
		if old.Attr.IsDir() {
			return errno(spindle.E(spindle.Exist, to, "a directory cannot be replaced by a rename"))
		}
		d.fs.meta.hold(to, old)
		defer d.fs.meta.unhold(to)
		if derr := d.fs.delete(ctx, to); derr != nil {
			return errno(derr)
		}
		err = d.fs.rename(ctx, from, to)
	}
	return errno(err)
}

// moveStaged renames a file whose contents wait to be put by putting them
// at the new name instead: the target, if any, is replaced in one step,
// so that no reader sees it missing. It reports whether src was such a
// file.
func (f *filesys) moveStaged(ctx context.Context, src *fileNode, from, to spindle.PathName, flags uint32) (bool, error) {
	src.mu.Lock()
	if src.stage == nil || !src.dirty || src.failed != nil {
		src.mu.Unlock()
		return false, nil
	}
	stored := src.entry != nil
	src.mu.Unlock()
	target, err := f.meta.lookup(ctx, to)
	switch {
	case err == nil && target.Attr.IsDir():
		return true, spindle.E(spindle.IsDir, to)
	case err == nil && flags&renameNoReplace != 0:
		return true, spindle.E(spindle.Exist, to)
	case err != nil && !errors.Is(err, spindle.NotExist):
		return true, err
	}
	if err := spindle.CheckName(to); err != nil {
		return true, err
	}
	src.mu.Lock()
	if src.stage == nil || !src.dirty {
		src.mu.Unlock()
		return false, nil // Stored meanwhile.
	}
	// A stream puts the file at its old name: stop it.
	src.abandonStream()
	src.unqueue()
	src.base = 0
	if target != nil {
		src.base = target.Sequence
	}
	if err := src.writeJournal(to); err != nil {
		src.mu.Unlock()
		return true, spindle.E(spindle.IO, to, err)
	}
	old := f.wb.claim(to, src)
	src.qname = to
	queue := src.opens == 0
	if queue {
		src.queued = true
	}
	src.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	if queue {
		f.wb.add(src)
	}
	if stored {
		// The old name was stored before: it goes.
		if err := f.delete(ctx, from); err != nil && !errors.Is(err, spindle.NotExist) {
			return true, err
		}
	}
	return true, nil
}

func (f *filesys) rename(ctx context.Context, from, to spindle.PathName) error {
	_, err := bounded(ctx, f.timeout, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, f.client.Rename(ctx, from, to)
	})
	return err
}

// renameByPut moves a file onto or from an Access or Group file, whose
// text travels in its entry and whose storing re-shares the files it
// governs: it puts the text at the new name and deletes the old.
func (f *filesys) renameByPut(ctx context.Context, from, to spindle.PathName, flags uint32) error {
	src, err := f.meta.lookup(ctx, from)
	if err != nil {
		return err
	}
	if src.Attr.IsDir() || src.Attr.IsLink() {
		return spindle.E(spindle.Invalid, to, "only a file can become an Access or Group file")
	}
	if flags&renameNoReplace != 0 {
		if _, err := f.meta.lookup(ctx, to); err == nil {
			return spindle.E(spindle.Exist, to)
		}
	}
	data, err := f.readAll(ctx, src)
	if err != nil {
		return err
	}
	e, err := f.put(ctx, to, strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	f.meta.stored(e)
	return f.delete(ctx, from)
}

// linkNode is a Spindle link, shown as a symbolic link.
type linkNode struct {
	fs.Inode
	fs *filesys
}

var (
	_ fs.NodeReadlinker = (*linkNode)(nil)
	_ fs.NodeGetattrer  = (*linkNode)(nil)
)

func (l *linkNode) entry(ctx context.Context) (*spindle.DirEntry, syscall.Errno) {
	name, ok := spinName(&l.Inode)
	if !ok {
		return nil, syscall.ENOENT
	}
	e, err := l.fs.meta.lookup(ctx, name)
	if err != nil {
		return nil, errno(err)
	}
	return e, 0
}

func (l *linkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	e, errno := l.entry(ctx)
	if errno != 0 {
		return nil, errno
	}
	return []byte(relTarget(e.Name, e.Link)), 0
}

func (l *linkNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e, errno := l.entry(ctx)
	if errno != 0 {
		return errno
	}
	fillAttr(e, &out.Attr)
	return 0
}
