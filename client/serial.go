package client

import (
	"context"
	"errors"
	"sync"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// serialDir is a dirlog.Client whose changes go out one batch at a time.
// Each change is signed for the next sequence number of a log, so changes
// sent at once by one client would only conflict and be signed again; the
// slow part of a Put, packing and storing blocks, runs outside the lock.
//
// Puts that arrive while another change is on its way wait in a queue, and
// the next caller to hold the lock sends every waiting put of one tree in
// one batch: many files copied at once cost one round trip to the node and
// one sync of its log per batch, not per file.
type serialDir struct {
	*dirlog.Client
	mu sync.Mutex // Held while a change is on its way.

	qmu   sync.Mutex
	queue []*queuedPut // Puts waiting to be sent, oldest first.
}

// A queuedPut is a Put waiting in serialDir's queue. Its results are set,
// and done, by the caller holding serialDir.mu that sent it.
type queuedPut struct {
	entry *spindle.DirEntry
	at    int64            // Where its readers were worked out (dirlog.Client.PutAt), -1 if not.
	name  spindle.UserName // Owner of the entry's tree.
	done  bool
	out   *spindle.DirEntry
	err   error
}

// Limits of one batch of puts: entries of large files list many blocks, and
// a batch must fit in one client protocol message.
const (
	maxBatchPuts  = 64
	maxBatchBytes = wire.MaxMessage / 4
)

func (d *serialDir) Put(ctx context.Context, e *spindle.DirEntry) (*spindle.DirEntry, error) {
	return d.PutAt(ctx, e, -1)
}

// PutAt is Put for a file whose readers were worked out at the head at
// sequence readersAt (see dirlog.Client.PutAt); -1 if none were.
func (d *serialDir) PutAt(ctx context.Context, e *spindle.DirEntry, readersAt int64) (*spindle.DirEntry, error) {
	p, err := spindle.Parse(e.Name)
	if err != nil {
		// Let the client report it as it reports every bad name.
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.Client.Put(ctx, e)
	}
	for {
		q := &queuedPut{entry: e, at: readersAt, name: p.User()}
		d.qmu.Lock()
		d.queue = append(d.queue, q)
		d.qmu.Unlock()
		d.mu.Lock()
		for !q.done {
			d.flush(ctx)
		}
		d.mu.Unlock()
		// The batch went out under the context of the caller that sent it;
		// if that one was cancelled and this one was not, try again.
		if q.err != nil && ctx.Err() == nil && (errors.Is(q.err, context.Canceled) || errors.Is(q.err, context.DeadlineExceeded)) {
			continue
		}
		return q.out, q.err
	}
}

// flush sends the oldest waiting put and every other waiting put of the
// same tree, up to the limits of a batch. d.mu is held.
func (d *serialDir) flush(ctx context.Context) {
	d.qmu.Lock()
	var batch []*queuedPut
	size := 0
	rest := d.queue[:0]
	for _, q := range d.queue {
		n := entrySize(q.entry)
		if len(batch) > 0 && (q.name != batch[0].name || len(batch) == maxBatchPuts || size+n > maxBatchBytes) {
			rest = append(rest, q)
			continue
		}
		batch = append(batch, q)
		size += n
	}
	clear(d.queue[len(rest):])
	d.queue = rest
	d.qmu.Unlock()
	if len(batch) == 0 {
		return
	}
	entries := make([]*spindle.DirEntry, len(batch))
	at := make([]int64, len(batch))
	for i, q := range batch {
		entries[i], at[i] = q.entry, q.at
	}
	outs, errs := d.Client.PutBatchAt(ctx, entries, at)
	for i, q := range batch {
		q.out, q.err, q.done = outs[i], errs[i], true
	}
}

// entrySize estimates the encoded size of an entry, generously.
func entrySize(e *spindle.DirEntry) int {
	return 1024 + len(e.Name) + len(e.SignedName) + len(e.Link) + len(e.Packdata) + len(e.Inline) + 128*len(e.Blocks)
}

func (d *serialDir) Delete(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Client.Delete(ctx, name)
}

func (d *serialDir) MakeDirectory(ctx context.Context, name spindle.PathName) (*spindle.DirEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Client.MakeDirectory(ctx, name)
}

func (d *serialDir) PutLink(ctx context.Context, target, name spindle.PathName) (*spindle.DirEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Client.PutLink(ctx, target, name)
}

func (d *serialDir) Rename(ctx context.Context, oldName, newName spindle.PathName) (*spindle.DirEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Client.Rename(ctx, oldName, newName)
}
