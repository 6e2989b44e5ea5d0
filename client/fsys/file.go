package fsys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"spindle.dev"
)

// fileNode is a file of a user's tree.
type fileNode struct {
	fs.Inode
	fs *filesys

	// mu guards the fields below. It is held through a put, so that a
	// file is put once at a time and not written meanwhile.
	mu    sync.Mutex
	entry *spindle.DirEntry // The entry last seen; nil for a file created here and not yet put.
	stage *os.File          // The local contents being written, or nil.
	dirty bool              // stage holds what was not yet put.
	opens int               // Open file handles.
	// fresh says the staging file was made empty (by create or
	// truncation) and not written since; a write at 0 then starts a
	// stream.
	fresh bool
	// stream, if not nil, is a put in progress that is fed every write
	// while they come in order: a file written from start to end is
	// stored as it is written, not all at once when it is closed.
	stream *streamPut
	// queued says the file waits in the write-back queue to be put as
	// qname; qname stays while the name waits for the node's contents
	// (see writeBack.names), through failed puts that are tried again.
	queued bool
	qname  spindle.PathName
	// base is the sequence of the stored version the staged contents
	// were written over, or 0 for a new file.
	base int64
	// failed is why the last put in the background failed, reported
	// (and cleared) by the next operation on the file.
	failed error
}

// A streamPut is a put of a file that follows its writes: it reads the
// staging file up to where the writes, coming in order, have reached, so
// that a file written from start to end is stored as it is written,
// while the writes go at the speed of the disk.
type streamPut struct {
	file *os.File
	done chan struct{}
	e    *spindle.DirEntry // Once done: what was stored, or why not.
	err  error

	mu   sync.Mutex // Guards the fields below.
	cond sync.Cond
	off  int64 // Bytes written in order.
	end  bool  // Nothing more will be written.
	stop error // Set when the stream is abandoned.
	read int64 // Bytes the put has read.
}

// errAbandoned ends a stream whose writes stopped coming in order.
var errAbandoned = errors.New("writes out of order: the file is put when closed")

// Read gives the put what has been written and it has not read, waiting
// for more until the end.
func (s *streamPut) Read(p []byte) (int, error) {
	s.mu.Lock()
	for s.read >= s.off && !s.end && s.stop == nil {
		s.cond.Wait()
	}
	if s.stop != nil {
		s.mu.Unlock()
		return 0, s.stop
	}
	if s.read >= s.off {
		s.mu.Unlock()
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.off-s.read)]
	at := s.read
	s.mu.Unlock()
	k, err := s.file.ReadAt(p, at)
	if err == io.EOF && k == len(p) {
		err = nil
	}
	s.mu.Lock()
	s.read += int64(k)
	s.mu.Unlock()
	return k, err
}

// wrote notes a write of k bytes at off, and reports whether the stream
// follows it (it came in order).
func (s *streamPut) wrote(off int64, k int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off != s.off {
		return false
	}
	s.off += int64(k)
	s.cond.Broadcast()
	return true
}

// finish ends the stream, with err (abandoned) or at the end of what was
// written, and waits for its put.
func (s *streamPut) finish(err error) {
	s.mu.Lock()
	if err != nil {
		s.stop = err
	}
	s.end = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.done
}

// startStream starts a put of the file that follows its writes. n.mu is
// held.
func (n *fileNode) startStream(name spindle.PathName) {
	s := &streamPut{file: n.stage, done: make(chan struct{})}
	s.cond.L = &s.mu
	go func() {
		defer close(s.done)
		e, err := n.fs.put(n.fs.ctx, name, s)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err == nil && (!s.end || s.stop != nil || s.read != s.off) {
			// A put that ended before the stream did stored less
			// than was written.
			err = errAbandoned
		}
		s.e, s.err = e, err
		if s.stop == nil {
			s.stop = errAbandoned
		}
	}()
	n.stream = s
}

// abandonStream stops the stream, if any; the file is then put whole when
// it is closed. n.mu is held.
func (n *fileNode) abandonStream() {
	if n.stream != nil {
		n.stream.finish(errAbandoned)
		n.stream = nil
	}
	n.fresh = false
}

// endStream ends the stream, if any, and reports whether it stored the
// whole file. n.mu is held.
func (n *fileNode) endStream() bool {
	s := n.stream
	if s == nil {
		return false
	}
	n.stream = nil
	info, err := n.stage.Stat()
	s.mu.Lock()
	whole := err == nil && info.Size() == s.off
	s.mu.Unlock()
	if !whole {
		s.finish(errAbandoned)
		return false
	}
	s.finish(nil)
	if s.err != nil {
		n.fs.log.Debug("streamed put failed; putting the whole file", "err", s.err)
		return false
	}
	n.landed(s.e)
	return true
}

// landed notes that the file's contents are stored as e. n.mu is held.
func (n *fileNode) landed(e *spindle.DirEntry) {
	n.dirty = false
	n.entry = e
	n.base = e.Sequence
	n.failed = nil
	n.fs.meta.stored(e)
	n.unqueue()
}

// unqueue forgets that the file waits for a put: its claim on its name
// and its journal entry go. n.mu is held.
func (n *fileNode) unqueue() {
	if n.qname != "" {
		n.fs.wb.unclaim(n.qname, n)
		n.qname = ""
	}
	n.queued = false
	if n.stage != nil {
		os.Remove(n.stage.Name() + journalSuffix)
	}
}

// writeJournal notes, beside the staging file, that it is to be put as
// name. It is not synced: it survives the mount's process being killed,
// which is what it is for; fsync is what survives the machine's crash.
// n.mu is held.
func (n *fileNode) writeJournal(name spindle.PathName) error {
	return writeJournal(n.stage.Name()+journalSuffix, journal{Name: name, Base: n.base})
}

// stageName returns the name of the staging file, or "". n.mu is held.
func (n *fileNode) stageName() string {
	if n.stage == nil {
		return ""
	}
	return n.stage.Name()
}

// takeFailure reports, once, that a put in the background failed. n.mu
// is held.
func (n *fileNode) takeFailure() syscall.Errno {
	if n.failed == nil {
		return 0
	}
	e := errno(n.failed)
	n.failed = nil
	return e
}

// putName returns the name the file is to be put as: the one it was
// queued as while that name waits for it (the kernel may have forgotten
// the node meanwhile), else the one it has. n.mu is held.
func (n *fileNode) putName() (spindle.PathName, bool) {
	if n.qname != "" && n.fs.wb.owner(n.qname) == n {
		return n.qname, true
	}
	return spinName(&n.Inode)
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeSetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
)

func (n *fileNode) setEntry(e *spindle.DirEntry) {
	n.mu.Lock()
	n.entry = e
	n.mu.Unlock()
}

// attr describes the file in out: the staged contents if there are any,
// else e.
func (n *fileNode) attr(e *spindle.DirEntry, out *fuse.Attr) {
	if !n.staged(out) {
		fillAttr(e, out)
	}
}

// staged reports whether the file has local contents and, if so and out
// is not nil, describes them in out.
func (n *fileNode) staged(out *fuse.Attr) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stage == nil {
		return false
	}
	if out != nil {
		info, err := n.stage.Stat()
		if err != nil {
			return false
		}
		out.Mode = syscall.S_IFREG | 0o644
		out.Size = uint64(info.Size())
		out.Blocks = (out.Size + 511) / 512
		out.Blksize = 1 << 20
		out.Nlink = 1
		t := info.ModTime()
		out.SetTimes(&t, &t, &t)
		out.Owner = fuse.Owner{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	}
	return true
}

// hasStage reports whether the file has local contents, or is busy being
// put (which a listing must not wait for).
func (n *fileNode) hasStage() bool {
	if !n.mu.TryLock() {
		return true
	}
	defer n.mu.Unlock()
	return n.stage != nil
}

func (n *fileNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if n.staged(&out.Attr) {
		return 0
	}
	name, ok := spinName(&n.Inode)
	if !ok {
		n.mu.Lock()
		e := n.entry
		n.mu.Unlock()
		if e == nil {
			return syscall.ENOENT
		}
		fillAttr(e, &out.Attr)
		return 0
	}
	e, err := n.fs.meta.lookup(ctx, name)
	if err != nil {
		return errno(err)
	}
	n.setEntry(e)
	fillAttr(e, &out.Attr)
	return 0
}

// Setattr truncates the file if asked to; modes, owners and times are not
// kept, and requests to change them succeed.
func (n *fileNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		n.mu.Lock()
		n.abandonStream()
		err := n.ensureStage(ctx, size == 0)
		if err == nil {
			err = n.stage.Truncate(int64(size))
		}
		if err == nil && size == 0 {
			n.fresh = true
		}
		if err == nil {
			n.dirty = true
		}
		opens := n.opens
		n.mu.Unlock()
		if err != nil {
			return errno(err)
		}
		if opens == 0 {
			// truncate(2) by name: no close will put it.
			n.settle()
		}
	}
	return n.Getattr(ctx, fh, out)
}

func (n *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.takeFailure(); e != 0 {
		return nil, 0, e
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if err := n.ensureStage(ctx, true); err != nil {
			return nil, 0, errno(err)
		}
		n.abandonStream()
		if err := n.stage.Truncate(0); err != nil {
			return nil, 0, syscall.EIO
		}
		n.dirty, n.fresh = true, true
	}
	h := &handle{n: n}
	if n.stage == nil {
		name, ok := spinName(&n.Inode)
		if !ok {
			return nil, 0, syscall.ENOENT
		}
		n.mu.Unlock()
		e, err := n.fs.meta.lookup(ctx, name)
		n.mu.Lock()
		if err != nil {
			return nil, 0, errno(err)
		}
		if e.Attr.IsIncomplete() && flags&syscall.O_ACCMODE != syscall.O_WRONLY {
			return nil, 0, syscall.EACCES
		}
		n.entry = e
		h.entry = e
	}
	n.opens++
	return h, 0, 0
}

// newStage gives the node an empty staging file. n.mu is held, or n is new.
func (n *fileNode) newStage() error {
	f, err := os.CreateTemp(n.fs.staging, "file-")
	if err != nil {
		n.fs.log.Error("cannot make a staging file", "err", err)
		return err
	}
	n.stage = f
	return nil
}

// ensureStage gives the node a staging file holding its current contents
// (none if empty is set). n.mu is held.
func (n *fileNode) ensureStage(ctx context.Context, empty bool) error {
	if n.stage != nil {
		return nil
	}
	var data []byte
	n.base = 0
	if n.entry != nil {
		n.base = n.entry.Sequence
	}
	if !empty && n.entry != nil {
		var err error
		data, err = n.fs.readAll(ctx, n.entry)
		if err != nil {
			return err
		}
	}
	if err := n.newStage(); err != nil {
		return spindle.E(spindle.IO, err)
	}
	if _, err := n.stage.Write(data); err != nil {
		n.dropStage()
		return spindle.E(spindle.IO, err)
	}
	return nil
}

// dropStage removes the staging file, and with it any put it waits for.
// n.mu is held.
func (n *fileNode) dropStage() {
	n.abandonStream()
	n.unqueue()
	n.failed = nil
	if n.stage != nil {
		n.stage.Close()
		os.Remove(n.stage.Name())
		n.stage, n.dirty = nil, false
	}
}

// drop forgets the file's local contents, as when it is removed, and
// reports whether it was never put.
func (n *fileNode) drop() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	local := n.entry == nil
	n.dropStage()
	return local
}

// store puts the file if it has contents not yet put, and returns when
// it is stored. n.mu is held.
func (n *fileNode) store(ctx context.Context) error {
	if n.endStream() {
		return nil
	}
	if !n.dirty {
		n.unqueue()
		return nil
	}
	name, ok := n.putName()
	if !ok {
		// Removed while open: nothing to put.
		n.dirty = false
		n.unqueue()
		return nil
	}
	info, err := n.stage.Stat()
	if err != nil {
		return spindle.E(spindle.IO, name, err)
	}
	e, err := n.fs.put(ctx, name, io.NewSectionReader(n.stage, 0, info.Size()))
	if err != nil {
		return err
	}
	n.landed(e)
	return nil
}

// storeNow puts the file at once if it has contents not yet put, queued
// or not.
func (n *fileNode) storeNow(ctx context.Context) syscall.Errno {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.store(ctx); err != nil {
		n.fs.log.Error("cannot put file", "name", n.qname, "err", err)
		return errno(err)
	}
	return 0
}

// queue queues the file to be put in the background if it has contents
// not yet put; report says to report, once, a failed put before. The
// file is noted in the journal first, so that a mount killed before the
// put lands leaves it to the next. It waits while the queue is full.
func (n *fileNode) queue(report bool) syscall.Errno {
	n.mu.Lock()
	if report {
		if e := n.takeFailure(); e != 0 {
			n.mu.Unlock()
			return e
		}
	} else if n.failed != nil {
		n.mu.Unlock()
		return 0 // Tried again by itself.
	}
	if !n.dirty || n.queued {
		n.mu.Unlock()
		return 0
	}
	name, ok := n.putName()
	if !ok {
		n.dirty = false
		n.mu.Unlock()
		return 0
	}
	if err := n.writeJournal(name); err != nil {
		// Nothing would survive a crash of the mount: put it now.
		n.fs.log.Warn("cannot note a file in the journal; putting it now", "name", name, "err", err)
		err := n.store(n.fs.ctx)
		n.mu.Unlock()
		return errno(err)
	}
	old := n.fs.wb.claim(name, n)
	n.qname, n.queued = name, true
	n.mu.Unlock()
	if old != nil {
		old.cancel()
	}
	n.fs.wb.add(n)
	return 0
}

// cancel drops the put the file waits for, if any, as when what it was to
// replace is replaced by something else.
func (n *fileNode) cancel() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.abandonStream()
	n.unqueue()
	n.dirty, n.failed = false, nil
	if n.opens == 0 {
		n.dropStage()
	}
}

// release ends one open file handle: when the last is closed, what is not
// yet put is queued, and a staging file with nothing left to put goes.
func (n *fileNode) release() {
	n.mu.Lock()
	if n.opens > 0 {
		n.opens--
	}
	last := n.opens == 0
	n.mu.Unlock()
	if last {
		n.settle()
	}
}

// settle queues what a file no longer open has not yet put, or lets go
// of its staging file.
func (n *fileNode) settle() {
	n.queue(false)
	n.mu.Lock()
	if n.opens == 0 && !n.dirty && !n.queued && n.failed == nil {
		n.dropStage()
	}
	n.mu.Unlock()
}

// put stores the contents of r as name. It fails when no block has gone
// out for the timeout, however long the whole takes.
func (f *filesys) put(ctx context.Context, name spindle.PathName, r io.Reader) (*spindle.DirEntry, error) {
	wctx, dog, stop := newWatchdog(f.ctx, f.timeout)
	defer stop()
	type result struct {
		e   *spindle.DirEntry
		err error
	}
	done := make(chan result, 1)
	go func() {
		e, err := f.client.Put(wctx, name, r, spindle.UnknownPack, func(int64) { dog.feed() })
		var w *spindle.Warning
		if errors.As(err, &w) && e != nil {
			f.log.Warn("stored with a warning", "name", name, "warning", err)
			err = nil
		}
		done <- result{e, err}
	}()
	select {
	case res := <-done:
		if res.err != nil && dog.starved() {
			return nil, timeoutError(f.timeout, res.err)
		}
		return res.e, res.err
	case <-wctx.Done():
		if dog.starved() {
			return nil, timeoutError(f.timeout, nil)
		}
		return nil, spindle.E(spindle.IO, name, wctx.Err())
	}
}

// readAll returns the whole contents of the file e.
func (f *filesys) readAll(ctx context.Context, e *spindle.DirEntry) ([]byte, error) {
	h := &handle{entry: e, fs: f}
	defer h.close()
	size := fileSize(e)
	buf := make([]byte, size)
	n, err := h.readAt(ctx, buf, 0)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// A handle is an open file.
type handle struct {
	n  *fileNode
	fs *filesys // For a handle without a node.
	// open, if not nil, opens the file instead of the client's Open: a
	// file of a snapshot opens as it was.
	open func(ctx context.Context) (spindle.File, error)

	mu     sync.Mutex // Guards the fields below.
	entry  *spindle.DirEntry
	rd     spindle.File // Reads blocks not in the cache; opened when first needed.
	cancel context.CancelFunc
	cur    int // Index of the block in data, or -1.
	data   []byte
	// ahead holds blocks read in order before the one asked for, for
	// the kernel's requests still on their way; next is the block the
	// reader is to read next in order.
	ahead map[int][]byte
	next  int
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) filesys() *filesys {
	if h.n != nil {
		return h.n.fs
	}
	return h.fs
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := h.n
	n.mu.Lock()
	if n.stage != nil {
		k, err := n.stage.ReadAt(dest, off)
		n.mu.Unlock()
		if err != nil && err != io.EOF {
			return nil, syscall.EIO
		}
		return fuse.ReadResultData(dest[:k]), 0
	}
	if h.entry == nil {
		h.entry = n.entry
	}
	n.mu.Unlock()
	if h.entry == nil {
		return nil, syscall.EIO
	}
	if data, ok, err := h.within(ctx, len(dest), off); ok || err != nil {
		if err != nil {
			n.fs.log.Warn("read failed", "name", h.entry.Name, "offset", off, "err", err)
			return nil, errno(err)
		}
		return fuse.ReadResultData(data), 0
	}
	k, err := h.readAt(ctx, dest, off)
	if err != nil {
		// Never a short read: the kernel would take it for the end of
		// the file.
		n.fs.log.Warn("read failed", "name", h.entry.Name, "offset", off, "err", err)
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// within returns, without copying them, the size bytes at off if they lie
// in one block of a file of blocks (the whole block of a sequential
// read, in the kernel's requests of up to a block); ok is false if they
// do not. The block's buffer is never written again, so the reply may
// hold it.
func (h *handle) within(ctx context.Context, size int, off int64) (data []byte, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.entry
	if e.Inline != nil || (isRules(e.Name) && len(e.Blocks) == 0) || off >= e.Size {
		return nil, false, nil
	}
	i := sort.Search(len(e.Blocks), func(i int) bool { return e.Blocks[i].Offset+e.Blocks[i].Size > off })
	if i == len(e.Blocks) {
		return nil, false, nil
	}
	b := e.Blocks[i]
	end := off + int64(size)
	if end > b.Offset+b.Size && !(i == len(e.Blocks)-1 && b.Offset+b.Size == e.Size) {
		return nil, false, nil
	}
	block, err := h.block(ctx, i)
	if err == errChanged {
		return nil, false, nil // readAt retries.
	}
	if err != nil {
		return nil, false, err
	}
	if h.entry != e {
		return nil, false, nil
	}
	end = min(end, b.Offset+int64(len(block)))
	return block[off-b.Offset : end-b.Offset], true, nil
}

// errChanged says the file changed since the handle's entry was got.
var errChanged = errors.New("file changed")

// readAt reads from the stored file at off, block by block, each from the
// cache or, bounded by the timeout, from the network.
func (h *handle) readAt(ctx context.Context, dest []byte, off int64) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for retries := 0; n < len(dest); {
		e := h.entry
		if e.Inline != nil || (isRules(e.Name) && len(e.Blocks) == 0) {
			if off >= int64(len(e.Inline)) {
				return n, nil
			}
			return n + copy(dest[n:], e.Inline[off:]), nil
		}
		if off >= e.Size {
			return n, nil
		}
		i := sort.Search(len(e.Blocks), func(i int) bool { return e.Blocks[i].Offset+e.Blocks[i].Size > off })
		if i == len(e.Blocks) {
			return n, nil
		}
		data, err := h.block(ctx, i)
		if err == errChanged && retries < 2 {
			retries++
			continue
		}
		if err != nil {
			return n, err
		}
		k := copy(dest[n:], data[off-e.Blocks[i].Offset:])
		n += k
		off += int64(k)
	}
	return n, nil
}

// block returns the plaintext of block i of h.entry. h.mu is held.
//
// The kernel reads ahead with several requests at once, which reach the
// handle in any order; the reader fetches ahead only while it is asked
// for blocks in order, and a request that skips ahead would stop it. So
// a block a little ahead of the next one in order is read after the
// blocks before it, which are kept (in h.ahead) for the requests on
// their way.
func (h *handle) block(ctx context.Context, i int) ([]byte, error) {
	if h.data != nil && h.cur == i {
		return h.data, nil
	}
	if data, ok := h.ahead[i]; ok {
		delete(h.ahead, i)
		h.cur, h.data = i, data
		return data, nil
	}
	f := h.filesys()
	b := h.entry.Blocks[i]
	if data, ok := f.blocks.get(b.Ref, b.Size); ok {
		h.cur, h.data = i, data
		return data, nil
	}
	if h.rd == nil {
		h.ahead, h.next = nil, 0
		rctx, cancel := context.WithCancel(f.ctx)
		rd, err := bounded(ctx, f.timeout, func(context.Context) (spindle.File, error) {
			// The reader lives as long as the handle, so its
			// context is not the bounded one.
			if h.open != nil {
				return h.open(rctx)
			}
			return f.client.Open(rctx, h.entry.Name)
		})
		if err != nil {
			cancel()
			return nil, err
		}
		h.rd, h.cancel = rd, cancel
		if !sameBlocks(rd.Entry(), h.entry) {
			h.entry = rd.Entry()
			h.data = nil
			return nil, errChanged
		}
	}
	from := i
	if i > h.next && i-h.next <= maxAhead {
		from = h.next
	}
	for j := from; j <= i; j++ {
		if _, ok := h.ahead[j]; ok && j < i {
			continue
		}
		buf, err := h.fetch(ctx, j)
		if err != nil {
			return nil, err
		}
		h.next = j + 1
		if j == i {
			h.cur, h.data = i, buf
			return buf, nil
		}
		if h.ahead == nil {
			h.ahead = make(map[int][]byte)
		}
		h.ahead[j] = buf
	}
	panic("unreachable")
}

// maxAhead is how far ahead of the next block in order a read may ask
// and still be taken as part of a sequential read: the kernel's
// read-ahead, in blocks, twice (it may have the next window on its way
// before the current one is answered). h.ahead holds at most twice as
// many blocks.
const maxAhead = 2 * readAheadKB >> 10

// fetch reads block i through the handle's reader, bounded by the
// timeout. h.mu is held.
func (h *handle) fetch(ctx context.Context, i int) ([]byte, error) {
	f := h.filesys()
	b := h.entry.Blocks[i]
	buf := make([]byte, b.Size)
	rd := h.rd
	start := time.Now()
	_, err := bounded(ctx, f.timeout, func(context.Context) (int, error) {
		k, err := rd.ReadAt(buf, b.Offset)
		if err == io.EOF && int64(k) == b.Size {
			err = nil
		}
		return k, err
	})
	if err != nil {
		// The reader may be stuck; a new one is opened next time.
		h.dropReader()
		return nil, fmt.Errorf("block %d of %s (after %v): %w", i, h.entry.Name, time.Since(start).Round(time.Millisecond), err)
	}
	f.blocks.putLater(b.Ref, buf)
	// Blocks kept for requests that never came go, the oldest first.
	for len(h.ahead) >= 2*maxAhead {
		low := i
		for j := range h.ahead {
			low = min(low, j)
		}
		delete(h.ahead, low)
	}
	return buf, nil
}

func sameBlocks(a, b *spindle.DirEntry) bool {
	if a.Size != b.Size || len(a.Blocks) != len(b.Blocks) || !bytes.Equal(a.Inline, b.Inline) {
		return false
	}
	for i := range a.Blocks {
		if a.Blocks[i] != b.Blocks[i] {
			return false
		}
	}
	return true
}

// dropReader cancels and closes the handle's reader. h.mu is held.
func (h *handle) dropReader() {
	if h.rd != nil {
		h.cancel()
		go h.rd.Close() // Waits for a read in progress.
		h.rd, h.cancel = nil, nil
	}
	h.ahead = nil
}

func (h *handle) close() {
	h.mu.Lock()
	h.dropReader()
	h.data = nil
	h.mu.Unlock()
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.takeFailure(); e != 0 {
		return 0, e
	}
	if err := n.ensureStage(ctx, false); err != nil {
		return 0, errno(err)
	}
	k, err := n.stage.WriteAt(data, off)
	if k > 0 {
		n.dirty = true
	}
	if err != nil {
		n.abandonStream()
		return uint32(k), syscall.EIO
	}
	if n.stream == nil && n.fresh && off == 0 {
		if name, ok := spinName(&n.Inode); ok {
			n.startStream(name)
		}
	}
	n.fresh = false
	if s := n.stream; s != nil && !s.wrote(off, k) {
		n.abandonStream()
	}
	return uint32(k), 0
}

// Flush queues the file to be put in the background if it was written:
// close(2) does not wait for the network. It reports a put of the file
// that failed before.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.n.queue(true) }

// Fsync puts the file if it was written, and returns when it is stored.
// It reports a put of the file that failed before.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	n := h.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if e := n.takeFailure(); e != 0 {
		return e
	}
	if err := n.store(ctx); err != nil {
		n.fs.log.Error("cannot put file", "name", n.Path(nil), "err", err)
		return errno(err)
	}
	return 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.close()
	h.n.release()
	return 0
}
