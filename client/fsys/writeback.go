package fsys

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"spindle.dev"
)

// Bounds of the write-back queue.
const (
	// queueFiles is how many closed files may wait for their put; a
	// close waits while that many are waiting.
	queueFiles = 64
	// putWorkers is how many files are put at once.
	putWorkers = 16
)

// journalSuffix names, beside a staging file, the journal entry that says
// which file it is to be put as: one written when the file is queued at
// close and removed when its put lands. A mount that starts finds those
// a mount before it left (it was killed, or unmounted before it could
// put them) and puts them.
const journalSuffix = ".queued"

// A writeBack puts files closed for writing in the background, so that
// close(2) does not wait for the network.
type writeBack struct {
	f     *filesys
	queue chan *fileNode // Bounded: a close waits while it is full.

	mu      sync.Mutex // Guards the fields below. Taken after fileNode.mu, never before.
	names   map[spindle.PathName]*fileNode
	pending int           // Files queued, being put, or waiting to be queued again.
	stored  int64         // Files stored from the queue so far.
	changed chan struct{} // Closed and replaced when pending falls.
}

func newWriteBack(f *filesys) *writeBack {
	return &writeBack{f: f, queue: make(chan *fileNode, queueFiles), names: map[spindle.PathName]*fileNode{}, changed: make(chan struct{})}
}

// start starts the workers; they end with the mount's context.
func (w *writeBack) start() {
	for range putWorkers {
		go w.work()
	}
}

// owner returns the node whose contents are waiting to be put as name,
// or nil.
func (w *writeBack) owner(name spindle.PathName) *fileNode {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.names[name]
}

// claim notes n as the node to be put as name, and returns the node it
// replaces, if any. n.mu is held.
func (w *writeBack) claim(name spindle.PathName, n *fileNode) *fileNode {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := w.names[name]
	w.names[name] = n
	if old == n {
		return nil
	}
	return old
}

// unclaim forgets that name waits for n's contents. n.mu is held.
func (w *writeBack) unclaim(name spindle.PathName, n *fileNode) {
	w.mu.Lock()
	if w.names[name] == n {
		delete(w.names, name)
	}
	w.mu.Unlock()
}

// under returns the nodes waiting to be put as name or below it.
func (w *writeBack) under(name spindle.PathName) []*fileNode {
	prefix := strings.TrimSuffix(string(name), "/") + "/"
	w.mu.Lock()
	defer w.mu.Unlock()
	var ns []*fileNode
	for p, n := range w.names {
		if p == name || strings.HasPrefix(string(p), prefix) {
			ns = append(ns, n)
		}
	}
	return ns
}

// in returns the names of the files waiting to be put in directory dir.
func (w *writeBack) in(dir spindle.PathName) []spindle.PathName {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ps []spindle.PathName
	for p := range w.names {
		if parentOf(p) == dir {
			ps = append(ps, p)
		}
	}
	return ps
}

// add queues n for a put, waiting while the queue is full. It gives up
// when the mount ends: the journal then keeps the file for the next.
func (w *writeBack) add(n *fileNode) {
	w.hold()
	select {
	case w.queue <- n:
	case <-w.f.ctx.Done():
		w.done()
	}
}

// hold counts a file as pending: queued, or waiting to be queued again.
func (w *writeBack) hold() {
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
}

// storedOne counts a file stored from the queue: progress for drain.
func (w *writeBack) storedOne() {
	w.mu.Lock()
	w.stored++
	w.mu.Unlock()
}

func (w *writeBack) done() {
	w.mu.Lock()
	w.pending--
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
}

func (w *writeBack) work() {
	for {
		select {
		case <-w.f.ctx.Done():
			return
		case n := <-w.queue:
			n.storeQueued()
			w.done()
		}
	}
}

// drain waits until no file waits for its put, or until none has been put
// for the timeout, and reports how many are left.
func (w *writeBack) drain(timeout time.Duration) int {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		w.mu.Lock()
		left, changed, stored := w.pending, w.changed, w.stored
		w.mu.Unlock()
		if left == 0 {
			return 0
		}
		select {
		case <-changed:
			// Only a file stored is progress: a put that failed and
			// waits to be tried again is not.
			w.mu.Lock()
			progress := w.stored > stored
			w.mu.Unlock()
			if progress {
				timer.Reset(timeout)
			}
		case <-timer.C:
			return left
		case <-w.f.ctx.Done():
			return left
		}
	}
}

// storeQueued puts the file queued by a close, and lets go of its staging
// file once it is stored and closed. A failure is logged, kept for the
// next operation on the file to report, and the put is tried again later.
func (n *fileNode) storeQueued() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.queued {
		return // Stored meanwhile by an fsync, or dropped.
	}
	err := n.store(n.fs.ctx)
	if err == nil {
		n.fs.wb.storedOne()
		if n.opens == 0 && !n.dirty {
			n.dropStage()
		}
		return
	}
	n.queued = false
	n.failed = err
	if !unreachable(err) {
		// Refused: trying again would be refused again. The file
		// stays, with its journal entry, for the next mount.
		n.fs.log.Error("cannot put file; its contents are kept", "name", n.qname, "file", n.stageName(), "err", err)
		return
	}
	n.fs.log.Error("cannot put file; its contents are kept and the put is tried again", "name", n.qname, "file", n.stageName(), "err", err)
	if n.fs.ctx.Err() != nil {
		return
	}
	// The file counts as waiting until it is queued again, so that a
	// drain does not take it for stored.
	n.fs.wb.hold()
	time.AfterFunc(n.fs.timeout, func() {
		defer n.fs.wb.done()
		n.mu.Lock()
		again := n.dirty && n.stage != nil && !n.queued && n.qname != "" && n.fs.wb.owner(n.qname) == n
		if again {
			n.queued = true
		}
		n.mu.Unlock()
		if again {
			n.fs.wb.add(n)
		}
	})
}

// A journal entry says which file a staging file is to be put as, and
// which version of that file it was written over (the sequence of its
// entry, or 0 for a new file).
type journal struct {
	Name spindle.PathName
	Base int64
}

func (j journal) marshal() []byte {
	return fmt.Appendf(nil, "%s\n%d\n", j.Name, j.Base)
}

// maxLink is the longest journal entry kept as a symbolic link's target.
const maxLink = 4000

// writeJournal writes j at path, replacing what is there in one step. An
// entry is the target of a symbolic link, made in one system call, or if
// too long for one, a file.
func writeJournal(path string, j journal) error {
	data := j.marshal()
	if len(data) <= maxLink {
		err := os.Symlink(string(data), path)
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		tmp := path + ".tmp"
		os.Remove(tmp)
		if err := os.Symlink(string(data), tmp); err != nil {
			return err
		}
		return os.Rename(tmp, path)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readJournal reads the journal entry at path.
func readJournal(path string) (journal, error) {
	var data []byte
	target, err := os.Readlink(path)
	if err == nil {
		data = []byte(target)
	} else if data, err = os.ReadFile(path); err != nil {
		return journal{}, err
	}
	return parseJournal(data)
}

// parseJournal decodes a journal entry, which a mount killed while
// writing it may have left cut short.
func parseJournal(data []byte) (journal, error) {
	lines := bytes.Split(data, []byte("\n"))
	if len(lines) != 3 || len(lines[2]) != 0 {
		return journal{}, errors.New("journal entry is not two lines")
	}
	name, err := spindle.Clean(spindle.PathName(lines[0]))
	if err != nil || name != spindle.PathName(lines[0]) {
		return journal{}, fmt.Errorf("journal entry names no clean path: %q", lines[0])
	}
	base, err := strconv.ParseInt(string(lines[1]), 10, 64)
	if err != nil || base < 0 || strconv.FormatInt(base, 10) != string(lines[1]) {
		return journal{}, fmt.Errorf("journal entry has no version: %q", lines[1])
	}
	return journal{Name: name, Base: base}, nil
}

// recoverQueued puts the files a mount before this one queued and did not put.
// A file whose stored version changed since it was staged is put beside
// it, as NAME.conflict-N, so that neither is lost.
// js are the journal entries found before this mount served anything,
// so that none of its own is taken for one.
func (f *filesys) recoverQueued(js []string) {
	for _, jpath := range js {
		if f.ctx.Err() != nil {
			return
		}
		stage := strings.TrimSuffix(jpath, journalSuffix)
		if err := f.recoverOne(stage, jpath); err != nil {
			f.log.Error("cannot put a file a mount before left; it is kept", "file", stage, "err", err)
		}
	}
}

func (f *filesys) recoverOne(stage, jpath string) error {
	j, err := readJournal(jpath)
	if err != nil {
		return err
	}
	file, err := os.Open(stage)
	if err != nil {
		return err
	}
	defer file.Close()
	info, err := file.Stat()
	if err != nil {
		return err
	}
	name := j.Name
	e, err := bounded(f.ctx, f.timeout, func(ctx context.Context) (*spindle.DirEntry, error) {
		return f.client.Lookup(ctx, name, false)
	})
	switch {
	case err == nil && e.Sequence == j.Base:
	case errors.Is(err, spindle.NotExist) && j.Base == 0:
	case err == nil || errors.Is(err, spindle.NotExist):
		// Changed since: keep both.
		for i := 1; ; i++ {
			c := spindle.PathName(fmt.Sprintf("%s.conflict-%d", j.Name, i))
			_, err := bounded(f.ctx, f.timeout, func(ctx context.Context) (*spindle.DirEntry, error) {
				return f.client.Lookup(ctx, c, false)
			})
			if errors.Is(err, spindle.NotExist) {
				name = c
				break
			}
			if err != nil {
				return err
			}
		}
		f.log.Warn("a file a mount before left changed since; put beside it", "name", j.Name, "as", name)
	default:
		return err
	}
	stored, err := f.put(f.ctx, name, io.NewSectionReader(file, 0, info.Size()))
	if err != nil {
		return err
	}
	f.meta.stored(stored)
	f.log.Info("put a file a mount before left", "name", name)
	os.Remove(jpath)
	os.Remove(stage)
	return nil
}
