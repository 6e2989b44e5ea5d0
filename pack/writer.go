package pack

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"spindle.dev"
)

// A PutFunc stores one packed block. ref is the block's address, already
// computed from data. data is valid only during the call: a PutFunc that
// keeps the bytes must copy them. A Writer calls its PutFunc from one
// goroutine at a time, in block order.
type PutFunc func(ctx context.Context, ref spindle.Ref, data []byte) error

// StorePut returns a PutFunc that stores blocks in s and checks that s
// files each block under the expected ref.
func StorePut(s spindle.BlockStore) PutFunc {
	return func(ctx context.Context, ref spindle.Ref, data []byte) error {
		got, err := s.Put(ctx, data)
		if err != nil {
			return err
		}
		if got != ref {
			return spindle.E(spindle.Integrity, fmt.Sprintf("block store filed block %s as %s", ref, got))
		}
		return nil
	}
}

// A Config says how a [Writer] packs a file.
type Config struct {
	// Packing is the packing to use; UnknownPack means EEPack.
	Packing spindle.Packing
	// Signer signs the entry and becomes its writer. Required.
	Signer spindle.Signer
	// Readers are the public keys for which an ee file key is wrapped,
	// besides the signer's own key, which is always included. Repeated
	// keys are wrapped once. Ignored by the other packings.
	Readers []spindle.PublicKey
	// Put receives each packed block. Required, unless Stripe is set.
	Put PutFunc
	// Erasure, if not zero, stores each packed block as a stripe of K+M
	// shards through Stripe instead of Put; the entry records the shards'
	// refs in its packdata (version 2), under the writer's signature, so
	// that readers need no setting of their own. A striped file holds at
	// most MaxStripedBlocks(K+M) blocks.
	Erasure Erasure
	Stripe  StripeFunc
}

// An Erasure is an erasure code: K data shards and M parity shards per
// block (package blocks/shard makes them). The zero Erasure means whole
// blocks, stored through a [PutFunc].
type Erasure struct{ K, M int }

// IsZero reports whether e is the zero Erasure.
func (e Erasure) IsZero() bool { return e == Erasure{} }

func (e Erasure) check() error {
	if e.K < 1 || e.K > maxStripeData || e.M < 1 || e.M > maxStripeParity {
		return fmt.Errorf("bad erasure code %d+%d: want 1 to %d data shards and 1 to %d parity shards", e.K, e.M, maxStripeData, maxStripeParity)
	}
	return nil
}

// MaxStripedBlocks returns the most blocks a file erasure-coded into n
// shards a block may have: the shard refs of its blocks travel in its
// packdata, whose size is bounded.
func MaxStripedBlocks(n int) int { return maxStripeBytes / (32 * n) }

// A StripeFunc stores one packed block, whose ref is ref, as a stripe of
// K+M shards under the Writer's [Erasure], and returns the refs of its
// shards in order. It is called as a [PutFunc] is.
type StripeFunc func(ctx context.Context, ref spindle.Ref, data []byte) ([]spindle.Ref, error)

// slots is the number of block buffers a Writer cycles through: one being
// filled and sealed, one queued, one being hashed and stored.
const slots = 3

// A Writer packs a file as it is written: it cuts the stream into blocks
// of [spindle.MaxBlockSize] bytes, packs each (sealing it for ee), and
// hands it to the configured PutFunc, hashing and storing one block while
// the next is being filled and sealed. It holds at most a few blocks in
// memory whatever the file's size. [Writer.Close] completes and signs the
// entry. A Writer is not safe for concurrent use.
type Writer struct {
	ctx     context.Context
	entry   *spindle.DirEntry
	packing spindle.Packing
	signer  spindle.Signer
	put     PutFunc
	erasure Erasure
	stripe  StripeFunc

	fileKey    []byte      // ee only.
	commitment [32]byte    // ee only.
	aead       cipher.AEAD // ee only.
	wraps      []wrap      // ee only.

	cur   *slot
	index uint64 // Index of the block in cur.
	size  int64
	free  chan *slot
	work  chan *slot
	done  chan struct{}

	mu      sync.Mutex
	err     error // First error; sticky.
	blocks  []spindle.DirBlock
	digests [][32]byte
	shards  [][32]byte // Of each block's stripe, if the blocks are striped.
	closed  bool
}

var (
	_ io.WriteCloser = (*Writer)(nil)
	_ io.ReaderFrom  = (*Writer)(nil)
)

// A slot is one block buffer travelling between the writer and the
// goroutine that hashes and stores blocks.
type slot struct {
	buf   []byte // Capacity MaxBlockSize + gcmOverhead.
	n     int    // Plaintext bytes in buf.
	index uint64
	off   int64
	nonce [12]byte
	aad   [40]byte
}

// gcmOverhead is the tag that AES-GCM adds to each ee block.
const gcmOverhead = 16

// NewWriter returns a Writer that packs a file into entry. The caller sets
// entry.Name (a clean path name), and may set Attr, Time (zero means the
// time of Close), Link and Inline, all of which are signed. Close sets
// Packing, Writer, Size, Blocks and Packdata. The caller must call Close,
// which also releases the Writer's goroutine and buffers.
func NewWriter(ctx context.Context, entry *spindle.DirEntry, c Config) (*Writer, error) {
	const op spindle.Op = "pack.NewWriter"
	if c.Signer == nil || c.Put == nil && c.Erasure.IsZero() {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "config needs a Signer and a Put function")
	}
	if !c.Erasure.IsZero() {
		if err := c.Erasure.check(); err != nil {
			return nil, spindle.E(op, entry.Name, spindle.Invalid, err)
		}
		if c.Stripe == nil {
			return nil, spindle.E(op, entry.Name, spindle.Invalid, "config with an erasure code needs a Stripe function")
		}
	}
	if clean, err := spindle.Clean(entry.Name); err != nil || clean != entry.Name {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "entry name is not a clean path name")
	}
	if entry.Attr.IsDir() {
		return nil, spindle.E(op, entry.Name, spindle.Invalid, "cannot pack a directory")
	}
	w := &Writer{
		ctx:     ctx,
		entry:   entry,
		packing: c.Packing,
		signer:  c.Signer,
		put:     c.Put,
		erasure: c.Erasure,
		stripe:  c.Stripe,
	}
	if w.packing == spindle.UnknownPack {
		w.packing = spindle.EEPack
	}
	switch w.packing {
	case spindle.PlainPack, spindle.EEIntegrityPack:
	case spindle.EEPack:
		key := make([]byte, fileKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, spindle.E(op, entry.Name, spindle.Internal, err)
		}
		readers := append([]spindle.PublicKey{c.Signer.PublicKey()}, c.Readers...)
		if err := w.setFileKey(key, readers); err != nil {
			return nil, spindle.E(op, entry.Name, err)
		}
	default:
		return nil, spindle.E(op, entry.Name, spindle.Invalid, fmt.Sprintf("unknown packing %d", w.packing))
	}
	w.free = make(chan *slot, slots)
	w.work = make(chan *slot, slots)
	w.done = make(chan struct{})
	for range slots {
		w.free <- &slot{buf: (*blockBufs.Get().(*[]byte))[:0]}
	}
	w.cur = <-w.free
	go w.store()
	return w, nil
}

// setFileKey sets the ee file key and wraps it for readers.
func (w *Writer) setFileKey(key []byte, readers []spindle.PublicKey) error {
	w.fileKey = key
	w.commitment = commit(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return spindle.E(spindle.Internal, err)
	}
	if w.aead, err = cipher.NewGCM(block); err != nil {
		return spindle.E(spindle.Internal, err)
	}
	w.wraps, err = wrapFor(key, w.commitment, readers, nil)
	return err
}

// wrapFor wraps key for every distinct key in readers, reusing the wraps in
// old whose key hash matches. The result is sorted by key hash.
func wrapFor(key []byte, commitment [32]byte, readers []spindle.PublicKey, old []wrap) ([]wrap, error) {
	if len(readers) == 0 {
		return nil, spindle.E(spindle.Invalid, "no readers to wrap the file key for")
	}
	var wraps []wrap
	seen := make(map[[32]byte]bool)
	for _, k := range readers {
		r, err := parseReaderKey(k)
		if err != nil {
			return nil, spindle.E(spindle.Invalid, err)
		}
		if seen[r.hash] {
			continue
		}
		seen[r.hash] = true
		if i := slices.IndexFunc(old, func(w wrap) bool { return w.keyHash == r.hash }); i >= 0 {
			wraps = append(wraps, old[i])
			continue
		}
		wr, err := newWrap(key, commitment, r)
		if err != nil {
			return nil, spindle.E(spindle.Internal, err)
		}
		wraps = append(wraps, wr)
	}
	if len(wraps) > maxWraps {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("%d readers, at most %d allowed", len(wraps), maxWraps))
	}
	slices.SortFunc(wraps, func(a, b wrap) int { return compareHash(a.keyHash, b.keyHash) })
	return wraps, nil
}

func compareHash(a, b [32]byte) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

// blockNonce and blockAAD give the GCM nonce and associated data of ee
// block i: the nonce is 4 zero bytes then i as 8 big-endian bytes, so no
// nonce repeats under one file key; the associated data is the file's key
// commitment followed by i, binding each block to its file and place.
func blockNonce(dst *[12]byte, i uint64) {
	*dst = [12]byte{}
	binary.BigEndian.PutUint64(dst[4:], i)
}

func blockAAD(dst *[40]byte, commitment *[32]byte, i uint64) {
	copy(dst[:32], commitment[:])
	binary.BigEndian.PutUint64(dst[32:], i)
}

func (w *Writer) setErr(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
}

func (w *Writer) firstErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// store hashes and stores the blocks sent on w.work until it is closed.
func (w *Writer) store() {
	defer close(w.done)
	for s := range w.work {
		if w.firstErr() == nil {
			if err := w.ctx.Err(); err != nil {
				w.setErr(spindle.E(spindle.Transient, err))
			} else {
				sum := sha256.Sum256(s.buf)
				ref := refOf(sum)
				if err := w.storeBlock(ref, s); err != nil {
					w.setErr(spindle.E(spindle.KindOf(err), fmt.Errorf("storing block %d: %w", s.index, err)))
				} else {
					// Only this goroutine touches blocks until done is closed.
					w.blocks = append(w.blocks, spindle.DirBlock{Ref: ref, Offset: s.off, Size: int64(s.n)})
					w.digests = append(w.digests, sum)
				}
			}
		}
		w.free <- s
	}
}

// storeBlock stores the packed block in s, whose ref is ref, through
// the PutFunc or, for a striped file, the StripeFunc, whose shard refs it
// keeps.
func (w *Writer) storeBlock(ref spindle.Ref, s *slot) error {
	if w.erasure.IsZero() {
		return w.put(w.ctx, ref, s.buf)
	}
	n := w.erasure.K + w.erasure.M
	if len(w.blocks) >= MaxStripedBlocks(n) {
		return spindle.E(spindle.Invalid, fmt.Sprintf("a file erasure-coded %d+%d holds at most %d blocks", w.erasure.K, w.erasure.M, MaxStripedBlocks(n)))
	}
	refs, err := w.stripe(w.ctx, ref, s.buf)
	if err != nil {
		return err
	}
	if len(refs) != n {
		return spindle.E(spindle.Internal, fmt.Sprintf("stripe of %d shards, want %d", len(refs), n))
	}
	for _, r := range refs {
		d, err := refDigest(r)
		if err != nil {
			return spindle.E(spindle.Internal, err)
		}
		w.shards = append(w.shards, d)
	}
	return nil
}

// flush packs the block in w.cur and queues it for storing.
func (w *Writer) flush() error {
	s := w.cur
	s.n = len(s.buf)
	s.index = w.index
	s.off = w.size - int64(s.n)
	if w.packing == spindle.EEPack {
		blockNonce(&s.nonce, s.index)
		blockAAD(&s.aad, &w.commitment, s.index)
		s.buf = w.aead.Seal(s.buf[:0], s.nonce[:], s.buf, s.aad[:])
	}
	w.work <- s
	w.index++
	w.cur = <-w.free
	w.cur.buf = w.cur.buf[:0]
	return w.firstErr()
}

// Write implements io.Writer.
func (w *Writer) Write(p []byte) (int, error) {
	const op spindle.Op = "pack.Write"
	if w.closed {
		return 0, spindle.E(op, w.entry.Name, spindle.Invalid, "write after close")
	}
	if err := w.firstErr(); err != nil {
		return 0, spindle.E(op, w.entry.Name, err)
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), spindle.MaxBlockSize-len(w.cur.buf))
		w.cur.buf = append(w.cur.buf, p[:k]...)
		w.size += int64(k)
		n += k
		p = p[k:]
		if len(w.cur.buf) == spindle.MaxBlockSize {
			if err := w.flush(); err != nil {
				return n, spindle.E(op, w.entry.Name, err)
			}
		}
	}
	return n, nil
}

// ReadFrom implements io.ReaderFrom, reading r to its end straight into
// the block buffers.
func (w *Writer) ReadFrom(r io.Reader) (int64, error) {
	const op spindle.Op = "pack.Write"
	if w.closed {
		return 0, spindle.E(op, w.entry.Name, spindle.Invalid, "write after close")
	}
	var total int64
	for {
		if err := w.firstErr(); err != nil {
			return total, spindle.E(op, w.entry.Name, err)
		}
		b := w.cur.buf
		n, err := r.Read(b[len(b):spindle.MaxBlockSize])
		if n < 0 || n > spindle.MaxBlockSize-len(b) {
			return total, spindle.E(op, w.entry.Name, spindle.Internal, "reader returned an invalid count")
		}
		w.cur.buf = b[:len(b)+n]
		w.size += int64(n)
		total += int64(n)
		if len(w.cur.buf) == spindle.MaxBlockSize {
			if ferr := w.flush(); ferr != nil {
				return total, spindle.E(op, w.entry.Name, ferr)
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, spindle.E(op, w.entry.Name, spindle.IO, err)
		}
	}
}

// Close packs the last block, waits until every block is stored, and
// completes and signs the entry. After an error the entry is left
// incomplete and must not be used.
func (w *Writer) Close() error {
	const op spindle.Op = "pack.Close"
	if w.closed {
		return spindle.E(op, w.entry.Name, spindle.Invalid, "close after close")
	}
	w.closed = true
	if len(w.cur.buf) > 0 && w.firstErr() == nil {
		w.flush() // An error is recorded in w.err.
	}
	close(w.work)
	<-w.done
	w.releaseBuffers()
	if err := w.firstErr(); err != nil {
		return spindle.E(op, w.entry.Name, err)
	}
	e := w.entry
	e.Packing = w.packing
	e.Size = w.size
	e.Blocks = w.blocks
	if e.Time == 0 {
		e.Time = spindle.Now()
	}
	p := &packdata{packing: w.packing, wraps: w.wraps, commitment: w.commitment}
	p.blockSum = blockSum(e.Blocks, w.digests)
	if !w.erasure.IsZero() && len(e.Blocks) > 0 {
		p.stripes = &stripes{k: w.erasure.K, m: w.erasure.M, shards: w.shards}
	}
	if err := sign(e, p, w.signer); err != nil {
		return spindle.E(op, e.Name, err)
	}
	return nil
}

// sign makes signer the writer of e, signs e with the block sum and
// commitment in p, and stores the packdata in e.
func sign(e *spindle.DirEntry, p *packdata, signer spindle.Signer) error {
	hash, err := spindle.KeyHash(signer.PublicKey())
	if err != nil {
		return spindle.E(spindle.Invalid, err)
	}
	e.Writer = signer.UserName()
	sig, err := signer.Sign(signedDigest(e, p.blockSum, p.commitment, p.stripes))
	if err != nil {
		return err
	}
	if len(sig) < minSigLen || len(sig) > maxSigLen {
		return spindle.E(spindle.Internal, errors.New("signer returned a signature of impossible length"))
	}
	p.signer = hash
	p.sig = sig
	e.Packdata = p.marshal()
	return nil
}

// Pack packs the contents of r into entry, as a [Writer] configured by c
// does, and closes the Writer.
func Pack(ctx context.Context, entry *spindle.DirEntry, r io.Reader, c Config) error {
	w, err := NewWriter(ctx, entry, c)
	if err != nil {
		return err
	}
	if _, err := w.ReadFrom(r); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// blockBufs holds block buffers between files, so that storing many small
// files does not allocate (and clear) megabytes for each.
var blockBufs = sync.Pool{New: func() any {
	b := make([]byte, 0, spindle.MaxBlockSize+gcmOverhead)
	return &b
}}

// releaseBuffers returns the block buffers to blockBufs once the storing
// goroutine has finished with them.
func (w *Writer) releaseBuffers() {
	put := func(s *slot) {
		if s != nil && cap(s.buf) >= spindle.MaxBlockSize+gcmOverhead {
			b := s.buf[:0]
			blockBufs.Put(&b)
			s.buf = nil
		}
	}
	put(w.cur)
	w.cur = nil
	for {
		select {
		case s := <-w.free:
			put(s)
		default:
			return
		}
	}
}
