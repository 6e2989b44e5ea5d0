package replica

import (
	"container/list"
	"sync"

	"spindle.dev"
)

// A cache holds blocks fetched from other nodes, up to a number of bytes,
// dropping the least recently used first. Every block in it was checked
// against its hash on arrival. It keeps its own copies: callers may modify
// what they add and what they get.
type cache struct {
	max int64

	mu    sync.Mutex
	size  int64
	order *list.List // Of *entry, most recently used first.
	items map[spindle.Ref]*list.Element
}

type entry struct {
	ref  spindle.Ref
	data []byte
}

func newCache(max int64) *cache {
	return &cache{max: max, order: list.New(), items: make(map[spindle.Ref]*list.Element)}
}

func (c *cache) get(ref spindle.Ref) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[ref]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return append([]byte(nil), e.Value.(*entry).data...), true
}

func (c *cache) add(ref spindle.Ref, data []byte) {
	n := int64(len(data))
	if n > c.max {
		return // Also when there is no cache (max < 0).
	}
	c.keep(ref, append([]byte(nil), data...))
}

// keep is add for data that is the cache's own: the caller gives it up.
func (c *cache) keep(ref spindle.Ref, data []byte) {
	n := int64(len(data))
	if n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[ref]; ok {
		return
	}
	c.items[ref] = c.order.PushFront(&entry{ref, data})
	c.size += n
	for c.size > c.max {
		e := c.order.Back()
		old := e.Value.(*entry)
		c.order.Remove(e)
		delete(c.items, old.ref)
		c.size -= int64(len(old.data))
	}
}

// stats returns the blocks and bytes held.
func (c *cache) stats() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.size
}
