package host

import (
	"slices"
	"sync"

	"spindle.dev"
)

// An rwLock is a reader/writer lock that prefers readers: a reader waits
// only while a writer holds the lock, never for a writer that waits for
// it. A goroutine may so hold the read locks of several logs, taken in
// any order (a read of one tree consults the groups of others), without
// deadlock, as long as no goroutine waits for anything while it holds a
// write lock. The write lock of a log is held only to change its tree
// (see commit and install), which waits for nothing.
type rwLock struct {
	mu      sync.Mutex
	cond    sync.Cond
	readers int
	writer  bool
}

func (l *rwLock) wait() {
	if l.cond.L == nil {
		l.cond.L = &l.mu
	}
	l.cond.Wait()
}

// RLock locks l for reading.
func (l *rwLock) RLock() {
	l.mu.Lock()
	for l.writer {
		l.wait()
	}
	l.readers++
	l.mu.Unlock()
}

// RUnlock undoes one RLock.
func (l *rwLock) RUnlock() {
	l.mu.Lock()
	l.readers--
	if l.readers == 0 && l.cond.L != nil {
		l.cond.Broadcast()
	}
	l.mu.Unlock()
}

// Lock locks l for writing.
func (l *rwLock) Lock() {
	l.mu.Lock()
	for l.writer || l.readers > 0 {
		l.wait()
	}
	l.writer = true
	l.mu.Unlock()
}

// Unlock undoes Lock.
func (l *rwLock) Unlock() {
	l.mu.Lock()
	l.writer = false
	if l.cond.L != nil {
		l.cond.Broadcast()
	}
	l.mu.Unlock()
}

// A logsLocker locks the trees of its logs for reading, all at once:
// the replayer's lock on the served logs it consults.
type logsLocker []*hosted

func (ls logsLocker) Lock() {
	for _, l := range ls {
		l.mu.RLock()
	}
}

func (ls logsLocker) Unlock() {
	for _, l := range ls {
		l.mu.RUnlock()
	}
}

// A view is a read of the server: s.mu held for reading, and each log
// whose tree the read has looked at held for reading too, until release.
// Only a view's methods, and those they call, read trees of logs whose
// appendMu is not held.
type view struct {
	s    *Server
	held []*hosted
}

// view starts a read of the server.
func (s *Server) view() *view {
	s.mu.RLock()
	return &view{s: s}
}

// release ends v.
func (v *view) release() {
	for _, h := range v.held {
		h.mu.RUnlock()
	}
	v.held = nil
	v.s.mu.RUnlock()
}

// served is Server.served, with the log's tree held for reading until v
// is released.
func (v *view) served(u spindle.UserName) *hosted {
	h := v.s.served(u)
	if h != nil && !slices.Contains(v.held, h) {
		h.mu.RLock()
		v.held = append(v.held, h)
	}
	return h
}
