// Package mem is an in-memory block store, for tests and in-process
// networks. Its zero value is an empty store ready for use.
package mem

import (
	"context"
	"slices"
	"sync"

	"spindle.dev"
	"spindle.dev/blocks"
)

// Store is an in-memory [spindle.BlockStore] and [spindle.BlockLister].
// The zero value is an empty store. It is safe for concurrent use.
type Store struct {
	mu sync.RWMutex
	m  map[blocks.Digest][]byte
}

var (
	_ spindle.BlockStore  = (*Store)(nil)
	_ spindle.BlockLister = (*Store)(nil)
)

// Get implements [spindle.BlockStore]. The stored bytes are checked
// against ref before they are returned.
func (s *Store) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	const op spindle.Op = "mem.Get"
	if err := ctx.Err(); err != nil {
		return nil, spindle.E(op, spindle.Transient, err)
	}
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	s.mu.RLock()
	data, ok := s.m[d]
	s.mu.RUnlock()
	if !ok {
		return nil, spindle.E(op, spindle.NotExist, "block "+string(ref))
	}
	if err := blocks.CheckDigest(d, data); err != nil {
		s.mu.Lock()
		delete(s.m, d)
		s.mu.Unlock()
		return nil, spindle.E(op, err)
	}
	return slices.Clone(data), nil
}

// Put implements [spindle.BlockStore].
func (s *Store) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	const op spindle.Op = "mem.Put"
	if err := ctx.Err(); err != nil {
		return "", spindle.E(op, spindle.Transient, err)
	}
	ref, d, err := blocks.Receive(data)
	if err != nil {
		return "", spindle.E(op, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[blocks.Digest][]byte)
	}
	if _, ok := s.m[d]; !ok {
		s.m[d] = slices.Clone(data)
	}
	return ref, nil
}

// List implements [spindle.BlockLister]. fn may call other methods of the
// store.
func (s *Store) List(ctx context.Context, fn func(spindle.Ref) error) error {
	const op spindle.Op = "mem.List"
	s.mu.RLock()
	ds := make([]blocks.Digest, 0, len(s.m))
	for d := range s.m {
		ds = append(ds, d)
	}
	s.mu.RUnlock()
	for _, d := range ds {
		if err := ctx.Err(); err != nil {
			return spindle.E(op, spindle.Transient, err)
		}
		if err := fn(d.Ref()); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements [spindle.BlockLister].
func (s *Store) Delete(ctx context.Context, ref spindle.Ref) error {
	const op spindle.Op = "mem.Delete"
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return spindle.E(op, err)
	}
	s.mu.Lock()
	delete(s.m, d)
	s.mu.Unlock()
	return nil
}

// Corrupt replaces the stored bytes of ref with data without checking
// them, so that tests can simulate a bad copy. It reports whether the
// block was present.
func (s *Store) Corrupt(ref spindle.Ref, data []byte) bool {
	d, err := blocks.ParseRef(ref)
	if err != nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[d]; !ok {
		return false
	}
	s.m[d] = slices.Clone(data)
	return true
}

// Usage returns the number of blocks the store holds and their total
// size in bytes.
func (s *Store) Usage(ctx context.Context) (n, size int64, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.m {
		size += int64(len(b))
	}
	return int64(len(s.m)), size, nil
}
