package fsys

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"spindle.dev"
)

// A blockCache keeps the plaintext of blocks read, by reference, in files
// of a local directory, up to a total size; the least recently used go
// first. Its files are named by the SHA-256 of the reference. What is in
// it was verified when it was fetched; the directory is the user's own.
type blockCache struct {
	dir   string
	limit int64

	// queue holds the blocks putLater was given, for the goroutine
	// that writes them.
	queue chan queuedBlock

	mu    sync.Mutex // Guards the fields below.
	size  int64
	lru   *list.List // Of *cached, most recently used first.
	index map[string]*list.Element
}

type queuedBlock struct {
	ref  spindle.Ref
	data []byte
}

type cachedBlock struct {
	file string
	size int64
}

// openBlockCache opens the cache in dir, making it if needed, and takes
// in the blocks a previous mount left there (oldest first to go).
func openBlockCache(dir string, limit int64) (*blockCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &blockCache{dir: dir, limit: limit, lru: list.New(), index: map[string]*list.Element{}, queue: make(chan queuedBlock, 16)}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type old struct {
		name string
		size int64
		mod  int64
	}
	var olds []old
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp") {
			// Left by a crash while a block was written.
			os.Remove(filepath.Join(dir, e.Name()))
			continue
		}
		if len(e.Name()) != 64 || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		olds = append(olds, old{e.Name(), info.Size(), info.ModTime().UnixNano()})
	}
	sort.Slice(olds, func(i, j int) bool { return olds[i].mod > olds[j].mod })
	for _, o := range olds {
		c.index[o.name] = c.lru.PushBack(&cachedBlock{file: o.name, size: o.size})
		c.size += o.size
	}
	c.mu.Lock()
	c.evict()
	c.mu.Unlock()
	return c, nil
}

func fileOf(ref spindle.Ref) string {
	sum := sha256.Sum256([]byte(ref))
	return hex.EncodeToString(sum[:])
}

// get returns the block ref of the given size if the cache holds it.
func (c *blockCache) get(ref spindle.Ref, size int64) ([]byte, bool) {
	if c == nil {
		return nil, false
	}
	name := fileOf(ref)
	c.mu.Lock()
	el, ok := c.index[name]
	if ok {
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()
	if !ok {
		return nil, false
	}
	data, err := os.ReadFile(filepath.Join(c.dir, name))
	if err != nil || int64(len(data)) != size {
		c.drop(name)
		return nil, false
	}
	return data, true
}

// putLater has put(ref, data) called in the background, so that a reader
// does not wait for the disk; data must not change after. If the disk
// falls behind, blocks are dropped rather than waited for.
func (c *blockCache) putLater(ref spindle.Ref, data []byte) {
	if c == nil || int64(len(data)) > c.limit {
		return
	}
	select {
	case c.queue <- queuedBlock{ref, data}:
	default:
	}
}

// writer puts the queued blocks until ctx ends.
func (c *blockCache) writer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-c.queue:
			c.put(b.ref, b.data)
		}
	}
}

// put keeps data as the block ref. Failing to is not an error: the block
// is only not cached.
func (c *blockCache) put(ref spindle.Ref, data []byte) {
	if c == nil || int64(len(data)) > c.limit {
		return
	}
	name := fileOf(ref)
	c.mu.Lock()
	_, ok := c.index[name]
	c.mu.Unlock()
	if ok {
		return
	}
	// A cache need not survive a crash: no fsync.
	if err := spindle.ReplaceFile(filepath.Join(c.dir, name), data, 0o600, false); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.index[name]; ok {
		return
	}
	c.index[name] = c.lru.PushFront(&cachedBlock{file: name, size: int64(len(data))})
	c.size += int64(len(data))
	c.evict()
}

// evict removes the least recently used blocks until the cache fits its
// limit. c.mu is held.
func (c *blockCache) evict() {
	for c.size > c.limit {
		el := c.lru.Back()
		if el == nil {
			return
		}
		b := el.Value.(*cachedBlock)
		c.lru.Remove(el)
		delete(c.index, b.file)
		c.size -= b.size
		os.Remove(filepath.Join(c.dir, b.file))
	}
}

func (c *blockCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[name]; ok {
		c.size -= el.Value.(*cachedBlock).size
		c.lru.Remove(el)
		delete(c.index, name)
		os.Remove(filepath.Join(c.dir, name))
	}
}
