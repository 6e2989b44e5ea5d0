package node

import (
	"context"
	"sync"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// serialDir is a dirlog.Client whose changes go out one at a time. Each
// change is signed for the next sequence number of a log, so changes sent
// at once by one client would only conflict and be signed again; the slow
// part of a Put, packing and storing blocks, runs outside the lock.
type serialDir struct {
	*dirlog.Client
	mu sync.Mutex
}

func (d *serialDir) Put(ctx context.Context, e *spindle.DirEntry) (*spindle.DirEntry, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.Client.Put(ctx, e)
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
