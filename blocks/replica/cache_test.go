package replica

import (
	"testing"

	"spindle.dev/blocks"
)

// The cache holds at most its size in bytes, dropping the least recently
// used block first, and keeps copies of its own.
func TestCacheLRU(t *testing.T) {
	c := newCache(300)
	a, b, d := make([]byte, 100), make([]byte, 100), make([]byte, 150)
	a[0], b[0], d[0] = 'a', 'b', 'd'
	ra, rb, rd := blocks.RefOf(a), blocks.RefOf(b), blocks.RefOf(d)
	c.add(ra, a)
	c.add(rb, b)
	a[0] = 'x' // The cache kept its own copy.
	got, ok := c.get(ra)
	if !ok || got[0] != 'a' {
		t.Fatalf("get(a) = %q, %v", got[:1], ok)
	}
	got[0] = 'y' // Nor does it share what it returns.
	c.add(rd, d) // 350 bytes: b, least recently used, goes.
	if _, ok := c.get(rb); ok {
		t.Error("b is still cached after a, b and d (350 bytes) went into a cache of 300")
	}
	if got, ok := c.get(ra); !ok || got[0] != 'a' {
		t.Errorf("a was dropped or changed: %v", ok)
	}
	if _, ok := c.get(rd); !ok {
		t.Error("d was not cached")
	}
	if n, size := c.stats(); n != 2 || size != 250 {
		t.Errorf("stats = %d blocks, %d bytes; want 2, 250", n, size)
	}
	c.add(blocks.RefOf(make([]byte, 400)), make([]byte, 400))
	if n, _ := c.stats(); n != 2 {
		t.Error("a block larger than the cache displaced others")
	}
	off := newCache(-1)
	off.add(ra, a)
	if _, ok := off.get(ra); ok {
		t.Error("a cache of size -1 holds a block")
	}
}
