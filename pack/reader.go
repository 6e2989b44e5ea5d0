package pack

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"fmt"
	"io"
	"sort"
	"sync"

	"spindle.dev"
)

// A GetFunc fetches the stored bytes of a block. The Reader treats the
// returned slice as read-only and keeps it no longer than the block stays
// its current block. A Reader calls its GetFunc from several goroutines
// at once when it reads ahead.
type GetFunc func(ctx context.Context, ref spindle.Ref) ([]byte, error)

// A GetStripeFunc fetches the stored bytes of a block that is stored as
// a stripe: ref is the block's ref and shards the refs of its K+M shards,
// in order. The Reader checks what it returns against ref, and owns the
// returned slice.
type GetStripeFunc func(ctx context.Context, ref spindle.Ref, shards []spindle.Ref) ([]byte, error)

// A ReadConfig says how a [Reader] opens a file.
type ReadConfig struct {
	// Keys unwrap the file key of an ee file; unused by other packings.
	Keys *Keys
	// WriterKeys are the public keys accepted for the entry's writer: the
	// writer's current key and, during a rotation window, previous ones.
	WriterKeys []spindle.PublicKey
	// Get fetches blocks. Required, unless the entry's blocks are
	// erasure-coded and GetStripe is set.
	Get GetFunc
	// GetStripe fetches the blocks of an entry whose blocks are
	// erasure-coded (see [Stripes]). Required for such an entry.
	GetStripe GetStripeFunc
	// Release, if set, hands the Reader ownership of the slices Get
	// returns: the Reader may overwrite them (it decrypts in place, so a
	// block needs one buffer, not two) and passes each to Release once it
	// no longer needs it, for the fetcher to reuse. If Release is nil the
	// Reader treats them as read-only and decrypts into buffers of its own.
	Release func([]byte)
	// ReadAhead is the number of blocks fetched, verified and decrypted in
	// the background while the file is read sequentially
	// (DefaultReadAhead if zero, none if negative). The Reader holds up to
	// ReadAhead+1 blocks in memory.
	ReadAhead int
	// Refetch, if set, fetches a block again, once, after the bytes Get
	// returned for it did not match its hash (or its size), before the
	// read fails with Integrity. A node in the middle passes on a holder's
	// bytes to its client without checking them, and checks them when
	// the client says it asks again (p2p.RemoteStore.Refetch), so that a
	// lying holder is bypassed. Its slices are Get's: Release applies.
	Refetch GetFunc
}

// DefaultReadAhead is the read-ahead of a Reader whose config sets none.
const DefaultReadAhead = 4

// A Reader unpacks a file block by block, verifying as it goes. While the
// file is read sequentially it fetches, verifies and decrypts the next
// blocks in the background (see [ReadConfig.ReadAhead]), so the memory it
// holds is bounded whatever the file's size. It supports random access
// through ReadAt and Seek. ReadAt is safe for concurrent use; Read and
// Seek, which share an offset, are not.
type Reader struct {
	ctx        context.Context
	entry      *spindle.DirEntry
	get        GetFunc
	getStripe  GetStripeFunc
	shards     [][]spindle.Ref // Of each block, if the blocks are erasure-coded.
	giveBack   func([]byte)    // ReadConfig.Release.
	readAhead  int
	refetch    GetFunc     // ReadConfig.Refetch.
	aead       cipher.AEAD // ee only.
	commitment [32]byte
	digests    [][32]byte

	off int64 // For Read and Seek.

	mu     sync.Mutex
	cached int      // Index of the block in plain, or -1.
	plain  []byte   // Plaintext of block cached.
	cur    *fetch   // The fetch that loaded plain, holding its buffers.
	free   [][]byte // Decryption buffers not in use.
	ahead  []*fetch // Blocks being read ahead, in order.
	closed bool
}

var (
	_ spindle.File = (*Reader)(nil)
	_ io.WriterTo  = (*Reader)(nil)
)

// NewReader verifies entry (see [Verify]) and, for ee, unwraps its file
// key with c.Keys, current or archived. It fails with Integrity if the
// entry does not verify and with CannotDecrypt if no wrap opens with
// c.Keys. Blocks are fetched and verified only as they are read; ctx
// applies to every fetch.
func NewReader(ctx context.Context, entry *spindle.DirEntry, c ReadConfig) (*Reader, error) {
	const op spindle.Op = "pack.NewReader"
	p, digests, err := verify(entry, c.WriterKeys)
	if err != nil {
		return nil, spindle.E(op, entry.Name, err)
	}
	switch {
	case p.stripes == nil && c.Get == nil:
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "config needs a Get function")
	case p.stripes != nil && c.GetStripe == nil:
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "the file's blocks are erasure-coded and the config has no GetStripe function")
	}
	r := &Reader{
		ctx:        ctx,
		entry:      cloneEntry(entry),
		get:        c.Get,
		getStripe:  c.GetStripe,
		commitment: p.commitment,
		digests:    digests,
		giveBack:   c.Release,
		readAhead:  c.ReadAhead,
		refetch:    c.Refetch,
		cached:     -1,
	}
	if p.stripes != nil {
		_, r.shards = p.stripes.refs()
	}
	switch {
	case r.readAhead == 0:
		r.readAhead = DefaultReadAhead
	case r.readAhead < 0:
		r.readAhead = 0
	}
	if p.packing == spindle.EEPack {
		key, err := unwrapFileKey(p, c.Keys)
		if err != nil {
			return nil, spindle.E(op, entry.Name, err)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, spindle.E(op, entry.Name, spindle.Internal, err)
		}
		if r.aead, err = cipher.NewGCM(block); err != nil {
			return nil, spindle.E(op, entry.Name, spindle.Internal, err)
		}
	}
	return r, nil
}

func cloneEntry(e *spindle.DirEntry) *spindle.DirEntry {
	c := *e
	c.Blocks = append([]spindle.DirBlock(nil), e.Blocks...)
	c.Packdata = append([]byte(nil), e.Packdata...)
	c.Inline = append([]byte(nil), e.Inline...)
	return &c
}

// Entry implements [spindle.File]. The caller must not modify the entry.
func (r *Reader) Entry() *spindle.DirEntry { return r.entry }

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.off)
	r.off += int64(n)
	if err == io.EOF && n > 0 {
		err = nil
	}
	return n, err
}

// WriteTo implements io.WriterTo: it writes the file from the offset of
// Read to its end, handing w each block's plaintext straight from the
// Reader's buffers, without copying it. Concurrent ReadAt calls wait
// while w writes.
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	const op spindle.Op = "pack.WriteTo"
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, spindle.E(op, r.entry.Name, spindle.Invalid, "read after close")
	}
	var n int64
	for r.off < r.entry.Size {
		plain, err := r.loadAt(r.off)
		if err != nil {
			return n, spindle.E(op, r.entry.Name, err)
		}
		k, err := w.Write(plain)
		n += int64(k)
		r.off += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Seek implements io.Seeker.
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	const op spindle.Op = "pack.Seek"
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = r.off
	case io.SeekEnd:
		base = r.entry.Size
	default:
		return r.off, spindle.E(op, r.entry.Name, spindle.Invalid, fmt.Sprintf("bad whence %d", whence))
	}
	if offset > 0 && base > (1<<63-1)-offset || base+offset < 0 {
		return r.off, spindle.E(op, r.entry.Name, spindle.Invalid, "seek to a negative offset")
	}
	r.off = base + offset
	return r.off, nil
}

// Close implements io.Closer. It waits for any read-ahead to finish and
// releases the block buffers.
func (r *Reader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropAhead()
	r.release(r.cur)
	r.plain, r.cur, r.free, r.cached = nil, nil, nil, -1
	r.closed = true
	return nil
}

// ReadAt implements io.ReaderAt. Errors are Integrity (naming the path and
// block index) when a block fails verification; errors from the GetFunc
// keep their kind.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	const op spindle.Op = "pack.ReadAt"
	if off < 0 {
		return 0, spindle.E(op, r.entry.Name, spindle.Invalid, "negative offset")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, spindle.E(op, r.entry.Name, spindle.Invalid, "read after close")
	}
	n := 0
	for n < len(p) && off < r.entry.Size {
		plain, err := r.loadAt(off)
		if err != nil {
			return n, spindle.E(op, r.entry.Name, err)
		}
		k := copy(p[n:], plain)
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// loadAt loads the block holding offset off, which must lie in the file,
// and returns its plaintext from off to the block's end, never empty.
// r.mu is held.
func (r *Reader) loadAt(off int64) ([]byte, error) {
	blocks := r.entry.Blocks
	i := sort.Search(len(blocks), func(i int) bool { return blocks[i].Offset+blocks[i].Size > off })
	if err := r.load(i); err != nil {
		return nil, err
	}
	plain := r.plain[min(off-blocks[i].Offset, int64(len(r.plain))):]
	if len(plain) == 0 {
		// Only a block shorter than its entry says can get here, and
		// fetch refuses those; a reader must never spin on it.
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("block %d holds no bytes at offset %d", i, off))
	}
	return plain, nil
}

// A fetch is the loading of one block, in the background or not.
type fetch struct {
	index int
	owned []byte // The slice Get returned, if the Reader owns it.
	buf   []byte // Decryption buffer taken from the Reader's free list.
	plain []byte
	err   error
	done  chan struct{}
	nonce [12]byte
	aad   [40]byte
}

// load makes block i the cached block, taking it from the read-ahead
// queue if it is there, and, if reading is sequential, starts fetching the
// blocks after it.
func (r *Reader) load(i int) error {
	if r.cached == i {
		return nil
	}
	sequential := i == r.cached+1
	var f *fetch
	for len(r.ahead) > 0 && f == nil {
		g := r.ahead[0]
		r.ahead = r.ahead[1:]
		if g.index == i {
			f = g
			break
		}
		<-g.done
		r.release(g)
	}
	if f == nil {
		f = r.newFetch(i)
		r.fetch(f)
	}
	<-f.done
	r.release(r.cur)
	r.cur = f
	if f.err != nil {
		r.release(f)
		r.plain, r.cur, r.cached = nil, nil, -1
		r.dropAhead()
		return f.err
	}
	r.plain, r.cached = f.plain, i
	if sequential {
		for next := i + 1 + len(r.ahead); len(r.ahead) < r.readAhead && next < len(r.entry.Blocks); next++ {
			g := r.newFetch(next)
			r.ahead = append(r.ahead, g)
			go r.fetch(g)
		}
	}
	return nil
}

func (r *Reader) newFetch(i int) *fetch {
	f := &fetch{index: i, done: make(chan struct{})}
	if r.aead != nil && r.giveBack == nil {
		if n := len(r.free); n > 0 {
			f.buf, r.free = r.free[n-1], r.free[:n-1]
		} else {
			f.buf = make([]byte, 0, spindle.MaxBlockSize)
		}
	}
	return f
}

// release returns the buffers of a finished fetch: its decryption buffer
// to the free list, the slice Get returned to ReadConfig.Release.
func (r *Reader) release(f *fetch) {
	if f == nil {
		return
	}
	if f.buf != nil {
		r.free = append(r.free, f.buf)
		f.buf = nil
	}
	if f.owned != nil {
		r.giveBack(f.owned)
		f.owned = nil
	}
	f.plain = nil
}

// dropAhead waits for the read-ahead queue and empties it.
func (r *Reader) dropAhead() {
	for _, g := range r.ahead {
		<-g.done
		r.release(g)
	}
	r.ahead = r.ahead[:0]
}

// fetch fetches, verifies and unpacks block f.index. It touches only f and
// the Reader's immutable fields, so it may run on its own goroutine.
func (r *Reader) fetch(f *fetch) {
	defer close(f.done)
	i := f.index
	b := r.entry.Blocks[i]
	var (
		data    []byte
		err     error
		striped = r.shards != nil
	)
	want := b.Size
	if r.aead != nil {
		want += gcmOverhead
	}
	for try := 0; ; try++ {
		switch {
		case striped:
			data, err = r.getStripe(r.ctx, b.Ref, r.shards[i])
		case try > 0:
			data, err = r.refetch(r.ctx, b.Ref)
		default:
			data, err = r.get(r.ctx, b.Ref)
		}
		if err != nil {
			f.err = spindle.E(spindle.KindOf(err), fmt.Errorf("block %d: %w", i, err))
			return
		}
		if r.giveBack != nil && !striped {
			f.owned = data
		}
		switch {
		case int64(len(data)) != want:
			f.err = spindle.E(spindle.Integrity, fmt.Sprintf("block %d: stored size is %d bytes, want %d", i, len(data), want))
		case sha256.Sum256(data) != r.digests[i]:
			f.err = spindle.E(spindle.Integrity, fmt.Sprintf("block %d: content does not match its hash", i))
		default:
			f.err = nil
		}
		if f.err == nil || try > 0 || r.refetch == nil || striped {
			break
		}
		// Wrong bytes: ask again, and the node, which passed them on
		// unchecked, checks what it fetches this time.
		if f.owned != nil {
			r.giveBack(f.owned)
			f.owned = nil
		}
	}
	if f.err != nil {
		return
	}
	if r.aead == nil {
		f.plain = data
		return
	}
	dst := f.buf[:0]
	if f.owned != nil || striped {
		dst = data[:0] // In place: Open allows exact overlap.
	}
	blockNonce(&f.nonce, uint64(i))
	blockAAD(&f.aad, &r.commitment, uint64(i))
	plain, err := r.aead.Open(dst, f.nonce[:], data, f.aad[:])
	if err != nil {
		f.err = spindle.E(spindle.Integrity, fmt.Sprintf("block %d: does not decrypt: %v", i, err))
		return
	}
	// GCM's output is as long as its input less the tag, so this holds
	// unless the cipher is broken; checking it keeps every read making
	// progress (loadAt never returns an empty slice) whatever happens.
	if int64(len(plain)) != b.Size {
		f.err = spindle.E(spindle.Integrity, fmt.Sprintf("block %d: decrypts to %d bytes, want %d", i, len(plain), b.Size))
		return
	}
	f.plain = plain
}
