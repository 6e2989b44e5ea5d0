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
// returned slice as read-only and does not keep it after the next call.
type GetFunc func(ctx context.Context, ref spindle.Ref) ([]byte, error)

// A ReadConfig says how a [Reader] opens a file.
type ReadConfig struct {
	// Keys unwrap the file key of an ee file; unused by other packings.
	Keys *Keys
	// WriterKeys are the public keys accepted for the entry's writer: the
	// writer's current key and, during a rotation window, previous ones.
	WriterKeys []spindle.PublicKey
	// Get fetches blocks. Required.
	Get GetFunc
}

// A Reader unpacks a file block by block, verifying as it goes. It holds
// one block in memory whatever the file's size, and supports random access
// through ReadAt and Seek. ReadAt is safe for concurrent use; Read and
// Seek, which share an offset, are not.
type Reader struct {
	ctx        context.Context
	entry      *spindle.DirEntry
	get        GetFunc
	aead       cipher.AEAD // ee only.
	commitment [32]byte
	digests    [][32]byte

	off int64 // For Read and Seek.

	mu     sync.Mutex
	cached int    // Index of the block in plain, or -1.
	plain  []byte // Plaintext of block cached.
	buf    []byte // Decryption buffer, reused.
}

var _ spindle.File = (*Reader)(nil)

// NewReader verifies entry (see [Verify]) and, for ee, unwraps its file
// key with c.Keys, current or archived. It fails with Integrity if the
// entry does not verify and with CannotDecrypt if no wrap opens with
// c.Keys. Blocks are fetched and verified only as they are read; ctx
// applies to every fetch.
func NewReader(ctx context.Context, entry *spindle.DirEntry, c ReadConfig) (*Reader, error) {
	const op spindle.Op = "pack.NewReader"
	if c.Get == nil {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "config needs a Get function")
	}
	p, digests, err := verify(entry, c.WriterKeys)
	if err != nil {
		return nil, spindle.E(op, entry.Name, err)
	}
	r := &Reader{
		ctx:        ctx,
		entry:      cloneEntry(entry),
		get:        c.Get,
		commitment: p.commitment,
		digests:    digests,
		cached:     -1,
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

// Close implements io.Closer. It releases the block buffers.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.plain, r.buf, r.cached = nil, nil, -1
	r.mu.Unlock()
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
	n := 0
	blocks := r.entry.Blocks
	for n < len(p) && off < r.entry.Size {
		i := sort.Search(len(blocks), func(i int) bool { return blocks[i].Offset+blocks[i].Size > off })
		if err := r.load(i); err != nil {
			return n, spindle.E(op, r.entry.Name, err)
		}
		k := copy(p[n:], r.plain[off-blocks[i].Offset:])
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// load fetches, verifies and unpacks block i into r.plain.
func (r *Reader) load(i int) error {
	if r.cached == i {
		return nil
	}
	r.cached = -1
	b := r.entry.Blocks[i]
	data, err := r.get(r.ctx, b.Ref)
	if err != nil {
		return spindle.E(spindle.KindOf(err), fmt.Errorf("block %d: %w", i, err))
	}
	want := b.Size
	if r.aead != nil {
		want += gcmOverhead
	}
	if int64(len(data)) != want {
		return spindle.E(spindle.Integrity, fmt.Sprintf("block %d: stored size is %d bytes, want %d", i, len(data), want))
	}
	if sha256.Sum256(data) != r.digests[i] {
		return spindle.E(spindle.Integrity, fmt.Sprintf("block %d: content does not match its hash", i))
	}
	if r.aead == nil {
		r.plain = data
		r.cached = i
		return nil
	}
	if cap(r.buf) < int(b.Size) {
		r.buf = make([]byte, 0, spindle.MaxBlockSize)
	}
	var nonce [12]byte
	var aad [40]byte
	blockNonce(&nonce, uint64(i))
	blockAAD(&aad, &r.commitment, uint64(i))
	plain, err := r.aead.Open(r.buf[:0], nonce[:], data, aad[:])
	if err != nil {
		return spindle.E(spindle.Integrity, fmt.Sprintf("block %d: does not decrypt: %v", i, err))
	}
	r.plain = plain
	r.cached = i
	return nil
}
