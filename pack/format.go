package pack

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"

	"spindle.dev"
)

// Packdata, version 1. Every field has a fixed size or an explicit,
// bounded length, and there is exactly one encoding of each value, so
// packdata is canonical:
//
//	version     1 byte   = 1
//	packing     1 byte   = the entry's packing
//	signer      32 bytes = spindle.KeyHash of the key that made sig
//	sigLen      1 byte   (8..72)
//	sig         sigLen bytes: ECDSA P-256 ASN.1 over sha256(signedMessage)
//	-- eeintegrity and ee only:
//	blockSum    32 bytes (see blockSum)
//	-- ee only:
//	commitment  32 bytes = sha256(commitPrefix || file key)
//	nWraps      2 bytes big-endian (1..maxWraps)
//	wraps       nWraps × wrapSize bytes, strictly increasing by reader key hash
//
// The wraps are deliberately outside the signed message, so that readers
// can be added and removed without the writer; a wrap that carries a
// different file key is caught by the commitment.
//
// Version 2 is version 1 followed by a stripes section, and is written
// only for a file whose blocks are erasure-coded (see [Erasure]):
//
//	-- version 2 only:
//	k           1 byte   data shards per block (1..maxStripeData)
//	m           1 byte   parity shards per block (1..maxStripeParity)
//	nBlocks     4 bytes  big-endian, = the entry's number of blocks (≥ 1)
//	shards      nBlocks × (k+m) × 32 bytes: for each block in order, the
//	            SHA-256 of each of its shards' stored bytes, in shard order
//
// The section is signed (see signedDigest); an entry of version 1 signs
// and verifies exactly as before.
//
// A wrap for all users is a wrap like any other, for the well-known key
// [AllKey] (derived from the constant allInfo): a reader finds it by its
// key hash when none of its own keys holds a wrap. It needed no new
// version: a client that does not know AllKey finds no wrap of its own and
// reports CannotDecrypt, as for any file not shared with it.
const (
	packdataVersion        = 1
	packdataVersionStripes = 2
)

const (
	maxSigLen = 72 // Longest DER encoding of a P-256 ECDSA signature.
	minSigLen = 8
	// maxWraps bounds the readers of one file.
	maxWraps = 4096
	// wrapSize is the encoded size of one wrap: reader key hash,
	// ephemeral public key, nonce, sealed file key (32 + 16 tag).
	wrapSize = 32 + 65 + 12 + fileKeySize + 16
	// fileKeySize is the size of an ee file key.
	fileKeySize = 32
	// Bounds on a stripe, as package blocks/shard has them.
	maxStripeData   = 32
	maxStripeParity = 16
	// maxStripeBytes bounds the shard digests of a striped file, so that
	// its packdata, with as many wraps as maxWraps allows, stays under
	// dirlog.MaxPackdata (1 MiB): 2048 blocks (2 GiB) under 4+2.
	maxStripeBytes = 384 << 10
)

// Domain-separation strings. They are part of the format.
const (
	signaturePrefix = "spindle.dev pack signature v1\x00"
	blockSumPrefix  = "spindle.dev pack block list v1\x00"
	commitPrefix    = "spindle.dev ee key commitment v1\x00"
	wrapInfoPrefix  = "spindle.dev ee wrap v1\x00"
	stripesPrefix   = "spindle.dev pack stripes v1\x00"
)

// A packdata is the decoded form of DirEntry.Packdata.
type packdata struct {
	packing    spindle.Packing
	signer     [32]byte
	sig        []byte
	blockSum   [32]byte // eeintegrity and ee.
	commitment [32]byte // ee.
	wraps      []wrap   // ee; sorted by keyHash.
	stripes    *stripes // Version 2: the blocks are erasure-coded.
}

// stripes records how a file's blocks are erasure-coded: the digests of
// the K+M shards of each block.
type stripes struct {
	k, m   int
	shards [][32]byte // nBlocks × (k+m), block by block.
}

// blocks returns the number of blocks the stripes describe.
func (st *stripes) blocks() int { return len(st.shards) / (st.k + st.m) }

// sum returns the hash of the stripes section that the writer signs:
//
//	sha256(stripesPrefix || k (1) || m (1) || nBlocks (8) || every shard digest)
func (st *stripes) sum() [32]byte {
	h := sha256.New()
	h.Write([]byte(stripesPrefix))
	h.Write([]byte{byte(st.k), byte(st.m)})
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(st.blocks()))
	h.Write(buf[:])
	for i := range st.shards {
		h.Write(st.shards[i][:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// A wrap is a file key sealed for one reader.
type wrap struct {
	keyHash [32]byte // spindle.KeyHash of the reader's public key.
	eph     [65]byte // Ephemeral P-256 public key, uncompressed.
	nonce   [12]byte
	sealed  [fileKeySize + 16]byte
}

func (p *packdata) marshal() []byte {
	b := make([]byte, 0, 2+32+1+len(p.sig)+64+2+len(p.wraps)*wrapSize)
	version := byte(packdataVersion)
	if p.stripes != nil {
		version = packdataVersionStripes
	}
	b = append(b, version, byte(p.packing))
	b = append(b, p.signer[:]...)
	b = append(b, byte(len(p.sig)))
	b = append(b, p.sig...)
	if p.packing != spindle.PlainPack {
		b = append(b, p.blockSum[:]...)
	}
	if p.packing == spindle.EEPack {
		b = append(b, p.commitment[:]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.wraps)))
		for i := range p.wraps {
			b = p.wraps[i].append(b)
		}
	}
	if st := p.stripes; st != nil {
		b = append(b, byte(st.k), byte(st.m))
		b = binary.BigEndian.AppendUint32(b, uint32(st.blocks()))
		for i := range st.shards {
			b = append(b, st.shards[i][:]...)
		}
	}
	return b
}

func (w *wrap) append(b []byte) []byte {
	b = append(b, w.keyHash[:]...)
	b = append(b, w.eph[:]...)
	b = append(b, w.nonce[:]...)
	return append(b, w.sealed[:]...)
}

// decodeWrap decodes one wrap from exactly wrapSize bytes. It checks only
// the length: the ephemeral key is checked when it is used.
func decodeWrap(b []byte) (wrap, error) {
	var w wrap
	if len(b) != wrapSize {
		return w, fmt.Errorf("wrap is %d bytes, want %d", len(b), wrapSize)
	}
	n := copy(w.keyHash[:], b)
	n += copy(w.eph[:], b[n:])
	n += copy(w.nonce[:], b[n:])
	copy(w.sealed[:], b[n:])
	return w, nil
}

// unmarshalPackdata decodes packdata. It never allocates more than a small
// multiple of len(b) and rejects any encoding that marshal would not produce.
func unmarshalPackdata(b []byte) (*packdata, error) {
	if len(b) < 2 {
		return nil, errors.New("packdata too short")
	}
	if b[0] != packdataVersion && b[0] != packdataVersionStripes {
		return nil, fmt.Errorf("packdata version %d, want %d or %d", b[0], packdataVersion, packdataVersionStripes)
	}
	striped := b[0] == packdataVersionStripes
	p := &packdata{packing: spindle.Packing(b[1])}
	switch p.packing {
	case spindle.PlainPack, spindle.EEIntegrityPack, spindle.EEPack:
	default:
		return nil, fmt.Errorf("packdata names unknown packing %d", b[1])
	}
	b = b[2:]
	if len(b) < 33 {
		return nil, errors.New("packdata too short for signer and signature")
	}
	copy(p.signer[:], b)
	n := int(b[32])
	b = b[33:]
	if n < minSigLen || n > maxSigLen || n > len(b) {
		return nil, fmt.Errorf("bad signature length %d", n)
	}
	p.sig = append([]byte(nil), b[:n]...)
	b = b[n:]
	if p.packing != spindle.PlainPack {
		if len(b) < 32 {
			return nil, errors.New("packdata too short for block sum")
		}
		copy(p.blockSum[:], b)
		b = b[32:]
	}
	if p.packing == spindle.EEPack {
		if len(b) < 34 {
			return nil, errors.New("packdata too short for commitment")
		}
		copy(p.commitment[:], b)
		nw := int(binary.BigEndian.Uint16(b[32:]))
		b = b[34:]
		if nw == 0 || nw > maxWraps {
			return nil, fmt.Errorf("bad number of wraps %d", nw)
		}
		if len(b) < nw*wrapSize || !striped && len(b) != nw*wrapSize {
			return nil, fmt.Errorf("%d wraps need %d bytes, have %d", nw, nw*wrapSize, len(b))
		}
		p.wraps = make([]wrap, nw)
		for i := range p.wraps {
			w, err := decodeWrap(b[:wrapSize])
			if err != nil {
				return nil, err
			}
			if i > 0 && string(w.keyHash[:]) <= string(p.wraps[i-1].keyHash[:]) {
				return nil, errors.New("wraps are not sorted by key hash")
			}
			p.wraps[i] = w
			b = b[wrapSize:]
		}
	}
	if striped {
		st, err := decodeStripes(b)
		if err != nil {
			return nil, err
		}
		p.stripes = st
		b = nil
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d trailing bytes in packdata", len(b))
	}
	return p, nil
}

// refs returns the erasure code and the shard refs of each block.
func (st *stripes) refs() (Erasure, [][]spindle.Ref) {
	n := st.k + st.m
	out := make([][]spindle.Ref, st.blocks())
	for i := range out {
		out[i] = make([]spindle.Ref, n)
		for j := range n {
			out[i][j] = refOf(st.shards[i*n+j])
		}
	}
	return Erasure{st.k, st.m}, out
}

// decodeStripes decodes a stripes section, which must fill b.
func decodeStripes(b []byte) (*stripes, error) {
	if len(b) < 6 {
		return nil, errors.New("packdata too short for stripes")
	}
	st := &stripes{k: int(b[0]), m: int(b[1])}
	if st.k < 1 || st.k > maxStripeData || st.m < 1 || st.m > maxStripeParity {
		return nil, fmt.Errorf("bad erasure code %d+%d", st.k, st.m)
	}
	n := int(binary.BigEndian.Uint32(b[2:]))
	b = b[6:]
	if n < 1 || n*(st.k+st.m)*32 > maxStripeBytes {
		return nil, fmt.Errorf("bad number of striped blocks %d", n)
	}
	if len(b) != n*(st.k+st.m)*32 {
		return nil, fmt.Errorf("%d stripes of %d shards need %d bytes, have %d", n, st.k+st.m, n*(st.k+st.m)*32, len(b))
	}
	st.shards = make([][32]byte, n*(st.k+st.m))
	for i := range st.shards {
		copy(st.shards[i][:], b[i*32:])
	}
	return st, nil
}

// rawCIDPrefix starts the binary form of a CIDv1 with codec raw and a
// sha2-256 multihash: version 1, codec 0x55, hash 0x12, length 32.
var rawCIDPrefix = [4]byte{0x01, 0x55, 0x12, 0x20}

// The canonical string form of such a CID is multibase "b" (lower-case
// base32 without padding) of its 36 bytes: 59 characters.
var cidBase32 = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

const refLen = 1 + 58

// refOf returns the Ref of a block whose stored bytes have the given
// SHA-256: the string form of its CIDv1, as go-cid prints it.
func refOf(sum [32]byte) spindle.Ref {
	var bin [36]byte
	copy(bin[:], rawCIDPrefix[:])
	copy(bin[4:], sum[:])
	var text [refLen]byte
	text[0] = 'b'
	cidBase32.Encode(text[1:], bin[:])
	return spindle.Ref(text[:])
}

// RefOf returns the Ref of a block with the given stored bytes: its CIDv1
// (codec raw, sha2-256) in canonical string form.
func RefOf(data []byte) spindle.Ref { return refOf(sha256.Sum256(data)) }

// refDigest returns the SHA-256 in ref, which must be a CIDv1, codec raw,
// sha2-256, in its canonical string form.
func refDigest(ref spindle.Ref) ([32]byte, error) {
	var sum [32]byte
	if len(ref) != refLen || ref[0] != 'b' {
		return sum, fmt.Errorf("ref %.80q is not the string form of a CIDv1 of a raw sha2-256 block", ref)
	}
	var in [refLen - 1]byte
	copy(in[:], ref[1:])
	var bin [37]byte
	n, err := cidBase32.Decode(bin[:], in[:])
	if err != nil || n != 36 || [4]byte(bin[:4]) != rawCIDPrefix {
		return sum, fmt.Errorf("ref %q is not the string form of a CIDv1 of a raw sha2-256 block", ref)
	}
	copy(sum[:], bin[4:36])
	var text [refLen - 1]byte
	cidBase32.Encode(text[:], bin[:36])
	if string(text[:]) != string(ref[1:]) {
		return sum, fmt.Errorf("ref %q is not in canonical form", ref)
	}
	return sum, nil
}

// checkBlocks checks that the blocks of e tile [0, e.Size) in order, each
// holding 1 to MaxBlockSize bytes, and returns their digests.
func checkBlocks(e *spindle.DirEntry) ([][32]byte, error) {
	if e.Size < 0 {
		return nil, fmt.Errorf("negative size %d", e.Size)
	}
	digests := make([][32]byte, len(e.Blocks))
	var off int64
	for i, b := range e.Blocks {
		if b.Offset != off {
			return nil, fmt.Errorf("block %d starts at offset %d, want %d", i, b.Offset, off)
		}
		if b.Size <= 0 || b.Size > spindle.MaxBlockSize {
			return nil, fmt.Errorf("block %d has size %d, want 1 to %d", i, b.Size, spindle.MaxBlockSize)
		}
		d, err := refDigest(b.Ref)
		if err != nil {
			return nil, fmt.Errorf("block %d: %v", i, err)
		}
		digests[i] = d
		off += b.Size
	}
	if off != e.Size {
		return nil, fmt.Errorf("blocks hold %d bytes, entry size is %d", off, e.Size)
	}
	return digests, nil
}

// blockSum hashes the ordered block list:
//
//	sha256(blockSumPrefix || for each block: offset(8) || size(8) || sha256 of stored bytes(32))
func blockSum(blocks []spindle.DirBlock, digests [][32]byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(blockSumPrefix))
	var buf [48]byte
	for i, b := range blocks {
		binary.BigEndian.PutUint64(buf[0:], uint64(b.Offset))
		binary.BigEndian.PutUint64(buf[8:], uint64(b.Size))
		copy(buf[16:], digests[i][:])
		h.Write(buf[:])
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// commit returns the commitment to an ee file key.
func commit(fileKey []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(commitPrefix))
	h.Write(fileKey)
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// signedDigest returns the SHA-256 of the message the writer signs:
//
//	signaturePrefix
//	len(name) (4) name       len(writer) (4) writer
//	(name is the signed name: SignedName if set, else Name)
//	attr (1)  packing (1)    time (8)  size (8)
//	len(link) (4) link       sha256(inline) (32)
//	number of blocks (8)     blockSum (32)
//	commitment (32; zero unless ee)
//	stripes sum (32; only if the blocks are erasure-coded, see stripes.sum)
//
// with integers big-endian. The wraps are not signed.
func signedDigest(e *spindle.DirEntry, sum, commitment [32]byte, st *stripes) []byte {
	h := sha256.New()
	var buf [8]byte
	str := func(s string) {
		binary.BigEndian.PutUint32(buf[:4], uint32(len(s)))
		h.Write(buf[:4])
		h.Write([]byte(s))
	}
	h.Write([]byte(signaturePrefix))
	str(string(e.SignedPath()))
	str(string(e.Writer))
	h.Write([]byte{byte(e.Attr), byte(e.Packing)})
	binary.BigEndian.PutUint64(buf[:], uint64(e.Time))
	h.Write(buf[:])
	binary.BigEndian.PutUint64(buf[:], uint64(e.Size))
	h.Write(buf[:])
	str(string(e.Link))
	inline := sha256.Sum256(e.Inline)
	h.Write(inline[:])
	binary.BigEndian.PutUint64(buf[:], uint64(len(e.Blocks)))
	h.Write(buf[:])
	h.Write(sum[:])
	h.Write(commitment[:])
	if st != nil {
		ss := st.sum()
		h.Write(ss[:])
	}
	return h.Sum(nil)
}
