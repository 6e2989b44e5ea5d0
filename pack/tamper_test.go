package pack

import (
	"bytes"
	"crypto/ecdh"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"spindle.dev"
)

// mustFail checks that a read of a tampered file failed with one of the
// given kinds and produced no plaintext.
func mustFail(t *testing.T, what string, got []byte, err error, kinds ...spindle.Kind) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: read succeeded (%d bytes), want %v", what, len(got), kinds)
		return
	}
	for _, k := range kinds {
		if errors.Is(err, k) {
			return
		}
	}
	t.Errorf("%s: %v, want kind %v", what, err, kinds)
}

// mustFailOrMatch accepts a failure of one of the kinds or exactly the
// original plaintext, never anything else.
func mustFailOrMatch(t *testing.T, what string, got, want []byte, err error, kinds ...spindle.Kind) {
	t.Helper()
	if err == nil {
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read WRONG plaintext", what)
		}
		return
	}
	mustFail(t, what, got, err, kinds...)
}

func cloneE(e *spindle.DirEntry) *spindle.DirEntry { return cloneEntry(e) }

// TestTamperBlocks flips bytes of stored blocks: every byte of a small
// file, and the first, last and random bytes of each block of a large one.
func TestTamperBlocks(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	for _, packing := range packings {
		for _, size := range []int{300, 2*spindle.MaxBlockSize + 100} {
			t.Run(fmt.Sprintf("%v/%d", packing, size), func(t *testing.T) {
				s := newMemBlocks()
				data := testData(size, 7)
				e := packFile(t, s, "alice@example.com/f", data, packing, ak, bk.PublicKey())
				for bi, b := range e.Blocks {
					orig := s.m[b.Ref]
					var positions []int
					if size < 1000 {
						for i := range orig {
							positions = append(positions, i)
						}
					} else {
						positions = []int{0, len(orig) - 1, len(orig) / 2}
						for range 10 {
							positions = append(positions, rand.IntN(len(orig)))
						}
					}
					for _, pos := range positions {
						bad := bytes.Clone(orig)
						bad[pos] ^= 1 << rand.IntN(8)
						s.m[b.Ref] = bad
						got, err := readAll(e, s, bk, ak.PublicKey())
						mustFail(t, fmt.Sprintf("block %d byte %d flipped", bi, pos), got, err, spindle.Integrity)
						if err != nil && !spindle.Match(spindle.E(spindle.Integrity, e.Name), err) {
							t.Fatalf("error does not name the path: %v", err)
						}
						if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("block %d", bi)) {
							t.Fatalf("error does not name block %d: %v", bi, err)
						}
					}
					// A truncated and an extended block.
					s.m[b.Ref] = orig[:len(orig)-1]
					got, err := readAll(e, s, bk, ak.PublicKey())
					mustFail(t, "truncated block", got, err, spindle.Integrity)
					s.m[b.Ref] = append(bytes.Clone(orig), 0)
					got, err = readAll(e, s, bk, ak.PublicKey())
					mustFail(t, "extended block", got, err, spindle.Integrity)
					s.m[b.Ref] = orig
				}
				if got, err := readAll(e, s, bk, ak.PublicKey()); err != nil || !bytes.Equal(got, data) {
					t.Fatalf("restored file does not read back: %v", err)
				}
			})
		}
	}
}

// TestTamperEntry changes the block list and every signed field.
func TestTamperEntry(t *testing.T) {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	for _, packing := range packings {
		t.Run(packing.String(), func(t *testing.T) {
			s := newMemBlocks()
			data := testData(3*spindle.MaxBlockSize+100, 7)
			e := packFile(t, s, "alice@example.com/f", data, packing, ak, bk.PublicKey())
			other := packFile(t, s, "alice@example.com/g", testData(len(data), 8), packing, ak, bk.PublicKey())
			e.Link = "" // Keep the zero values explicit for the mutations below.
			changes := map[string]func(e *spindle.DirEntry){
				"drop block":      func(e *spindle.DirEntry) { e.Blocks = slices.Delete(e.Blocks, 1, 2) },
				"drop last block": func(e *spindle.DirEntry) { e.Blocks = e.Blocks[:3]; e.Size = 3 * spindle.MaxBlockSize },
				"duplicate block": func(e *spindle.DirEntry) { e.Blocks = slices.Insert(e.Blocks, 1, e.Blocks[1]) },
				"duplicate block, fixed offsets": func(e *spindle.DirEntry) {
					e.Blocks = slices.Insert(e.Blocks, 1, e.Blocks[0])
					fixOffsets(e)
				},
				"reorder blocks": func(e *spindle.DirEntry) { e.Blocks[0].Ref, e.Blocks[1].Ref = e.Blocks[1].Ref, e.Blocks[0].Ref },
				"reorder blocks with offsets": func(e *spindle.DirEntry) {
					e.Blocks[0], e.Blocks[3] = e.Blocks[3], e.Blocks[0]
					fixOffsets(e)
				},
				"block from another file": func(e *spindle.DirEntry) { e.Blocks[1].Ref = other.Blocks[1].Ref },
				"block offset":            func(e *spindle.DirEntry) { e.Blocks[2].Offset++ },
				"block size":              func(e *spindle.DirEntry) { e.Blocks[3].Size-- },
				"block ref not a cid":     func(e *spindle.DirEntry) { e.Blocks[3].Ref = "nonsense" },
				"name":                    func(e *spindle.DirEntry) { e.Name = "alice@example.com/g" },
				"writer":                  func(e *spindle.DirEntry) { e.Writer = bob },
				"attr":                    func(e *spindle.DirEntry) { e.Attr = spindle.AttrLink },
				"time":                    func(e *spindle.DirEntry) { e.Time++ },
				"time high bits":          func(e *spindle.DirEntry) { e.Time ^= 1 << 62 },
				"size":                    func(e *spindle.DirEntry) { e.Size-- },
				"link":                    func(e *spindle.DirEntry) { e.Link = "bob@example.com/x" },
				"inline":                  func(e *spindle.DirEntry) { e.Inline = []byte("x") },
				"packing":                 func(e *spindle.DirEntry) { e.Packing = packings[(slices.Index(packings, e.Packing)+1)%3] },
				"packdata from other":     func(e *spindle.DirEntry) { e.Packdata = other.Packdata },
				"packdata truncated":      func(e *spindle.DirEntry) { e.Packdata = e.Packdata[:len(e.Packdata)-1] },
				"packdata extended":       func(e *spindle.DirEntry) { e.Packdata = append(e.Packdata, 0) },
				"no packdata":             func(e *spindle.DirEntry) { e.Packdata = nil },
			}
			for what, change := range changes {
				bad := cloneE(e)
				change(bad)
				got, err := readAll(bad, s, bk, ak.PublicKey())
				mustFail(t, what, got, err, spindle.Integrity)
				if err := Verify(bad, []spindle.PublicKey{ak.PublicKey()}); !errors.Is(err, spindle.Integrity) {
					t.Errorf("Verify after %s: %v, want Integrity", what, err)
				}
			}
			// Flip each bit position of every packdata byte in turn.
			for i := range e.Packdata {
				bad := cloneE(e)
				bad.Packdata[i] ^= 1 << (i % 8)
				got, err := readAll(bad, s, bk, ak.PublicKey())
				what := fmt.Sprintf("packdata byte %d of %d", i, len(e.Packdata))
				if i < 2+32+1+int(e.Packdata[34])+64 {
					// Header, signature, block sum and commitment.
					mustFail(t, what, got, err, spindle.Integrity)
				} else {
					// Wraps: bob's must fail, alice's may still open.
					mustFailOrMatch(t, what, got, data, err, spindle.Integrity, spindle.CannotDecrypt)
				}
			}
			if err := Verify(e, nil); !errors.Is(err, spindle.Invalid) {
				t.Errorf("Verify without writer keys: %v, want Invalid", err)
			}
			if err := Verify(e, []spindle.PublicKey{bk.PublicKey()}); !errors.Is(err, spindle.Integrity) {
				t.Errorf("Verify with another user's key: %v, want Integrity", err)
			}
			if got, err := readAll(e, s, bk, ak.PublicKey()); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("untouched entry does not read back: %v", err)
			}
		})
	}
}

func fixOffsets(e *spindle.DirEntry) {
	var off int64
	for i := range e.Blocks {
		e.Blocks[i].Offset = off
		off += e.Blocks[i].Size
	}
	e.Size = off
}

// TestTamperSignedByWriter checks the layer under the signature: even a
// block list signed by the writer cannot reorder ee blocks or splice in
// blocks of another file, because each block's index and file are bound
// into its GCM associated data and key.
func TestTamperSignedByWriter(t *testing.T) {
	ak := testKeys(t, alice, 1)
	s := newMemBlocks()
	data := testData(3*spindle.MaxBlockSize, 7)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)
	other := packFile(t, s, "alice@example.com/g", testData(len(data), 8), spindle.EEPack, ak)
	for what, change := range map[string]func(e *spindle.DirEntry){
		"reorder": func(e *spindle.DirEntry) { e.Blocks[0].Ref, e.Blocks[1].Ref = e.Blocks[1].Ref, e.Blocks[0].Ref },
		"splice":  func(e *spindle.DirEntry) { e.Blocks[1].Ref = other.Blocks[1].Ref },
	} {
		bad := cloneE(e)
		change(bad)
		p, _ := unmarshalPackdata(bad.Packdata)
		digests, err := checkBlocks(bad)
		if err != nil {
			t.Fatal(err)
		}
		p.blockSum = blockSum(bad.Blocks, digests)
		if err := sign(bad, p, ak); err != nil {
			t.Fatal(err)
		}
		if err := Verify(bad, []spindle.PublicKey{ak.PublicKey()}); err != nil {
			t.Fatalf("%s: re-signed entry does not verify: %v", what, err)
		}
		got, err := readAll(bad, s, ak, ak.PublicKey())
		mustFail(t, what, got, err, spindle.Integrity)
	}
}

// TestTamperWraps presents readers with wraps that are not theirs.
func TestTamperWraps(t *testing.T) {
	ak, bk, ck := testKeys(t, alice, 1), testKeys(t, bob, 2), testKeys(t, carol, 3)
	s := newMemBlocks()
	data := testData(1000, 7)
	e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak, bk.PublicKey())
	other := packFile(t, s, "alice@example.com/g", data, spindle.EEPack, ak, bk.PublicKey())

	got, err := readAll(e, s, ck, ak.PublicKey())
	mustFail(t, "reader without a wrap", got, err, spindle.CannotDecrypt)
	got, err = readAll(e, s, nil, ak.PublicKey())
	mustFail(t, "reader without keys", got, err, spindle.CannotDecrypt)

	p, err := unmarshalPackdata(e.Packdata)
	if err != nil {
		t.Fatal(err)
	}
	po, _ := unmarshalPackdata(other.Packdata)
	wrapIndex := func(p *packdata, k *Keys) int {
		return slices.IndexFunc(p.wraps, func(w wrap) bool { return w.keyHash == k.current.hash })
	}
	ai, bi := wrapIndex(p, ak), wrapIndex(p, bk)

	withWrap := func(w wrap) *spindle.DirEntry {
		q := *p
		q.wraps = slices.Clone(p.wraps)
		q.wraps[bi] = w
		bad := cloneE(e)
		bad.Packdata = q.marshal()
		return bad
	}
	// Alice's wrap relabelled as bob's.
	w := p.wraps[ai]
	w.keyHash = bk.current.hash
	got, err = readAll(withWrap(w), s, bk, ak.PublicKey())
	mustFail(t, "another user's wrap", got, err, spindle.CannotDecrypt)
	// Bob's wrap from another file.
	got, err = readAll(withWrap(po.wraps[wrapIndex(po, bk)]), s, bk, ak.PublicKey())
	mustFail(t, "wrap from another file", got, err, spindle.CannotDecrypt)
	// A well-formed wrap for bob holding another key, sealed with this
	// file's commitment as associated data: caught by the commitment.
	r, _ := parseReaderKey(bk.PublicKey())
	eph, _ := ecdh.P256().GenerateKey(nil)
	wrong, err := sealWrap(bytes.Repeat([]byte{7}, fileKeySize), p.commitment, r, eph, [12]byte{})
	if err != nil {
		t.Fatal(err)
	}
	got, err = readAll(withWrap(wrong), s, bk, ak.PublicKey())
	mustFail(t, "wrap of a wrong key", got, err, spindle.Integrity)
	if _, err := Share(withWrap(wrong), bk, []spindle.PublicKey{ck.PublicKey()}); !errors.Is(err, spindle.Integrity) {
		t.Errorf("Share with a wrap of a wrong key: %v, want Integrity", err)
	}
	// An invalid ephemeral key.
	w = p.wraps[bi]
	w.eph[10] ^= 1
	got, err = readAll(withWrap(w), s, bk, ak.PublicKey())
	mustFail(t, "invalid ephemeral key", got, err, spindle.CannotDecrypt)
}
