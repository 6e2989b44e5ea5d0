package disk

import (
	"context"
	"encoding/hex"
	"path/filepath"

	"spindle.dev"
	"spindle.dev/blocks"
)

// Usage returns the number of blocks the store holds and their total
// size in bytes. It counts from the small blocks' index and one stat of
// each larger block's file (a file less its trailer; a block written
// before trailers existed counts 8 bytes short), so it costs a walk of
// the store's directories, not a read of its blocks.
func (s *Store) Usage(ctx context.Context) (n, size int64, err error) {
	const op spindle.Op = "disk.Usage"
	small := make(map[blocks.Digest]bool)
	s.small.mu.Lock()
	for d, l := range s.small.index {
		small[d] = true
		n++
		size += int64(l.n)
	}
	s.small.mu.Unlock()
	subs, err := s.fs.ReadDir(s.dir)
	if err != nil {
		return 0, 0, spindle.E(op, spindle.IO, err)
	}
	for _, sub := range subs {
		if !sub.IsDir() || !isHex(sub.Name(), 2) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return 0, 0, spindle.E(op, spindle.Transient, err)
		}
		ents, err := s.fs.ReadDir(filepath.Join(s.dir, sub.Name()))
		if err != nil {
			return 0, 0, spindle.E(op, spindle.IO, err)
		}
		for _, e := range ents {
			name := e.Name()
			if !e.Type().IsRegular() || !isHex(name, 2*len(blocks.Digest{})) || name[:2] != sub.Name() {
				continue
			}
			var d blocks.Digest
			hex.Decode(d[:], []byte(name))
			if small[d] {
				continue // Counted already, as List does.
			}
			fi, err := e.Info()
			if err != nil {
				continue // Removed since the directory was read.
			}
			n++
			size += max(fi.Size()-trailerLen, 0)
		}
	}
	return n, size, nil
}
