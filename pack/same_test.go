package pack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"spindle.dev"
)

// Same accepts exactly the contents an entry was packed from, in every
// packing and at block boundaries, for the writer and for a reader; it
// refuses contents that differ in one byte, are a byte shorter or longer,
// and an ee file for a user holding no wrap. It fetches no block: the
// test gives it none.
func TestSame(t *testing.T) {
	ak := testKeys(t, alice, 1)
	bk := testKeys(t, bob, 2)
	ck := testKeys(t, carol, 3)
	const mb = spindle.MaxBlockSize
	for _, packing := range packings {
		for _, size := range []int{0, 1, mb - 1, mb, mb + 1, 3*mb + 5} {
			t.Run(fmt.Sprintf("%v/%d", packing, size), func(t *testing.T) {
				data := testData(size, uint64(size)+7)
				e := packFile(t, newMemBlocks(), "alice@example.com/f", data, packing, ak, bk.PublicKey())
				for _, k := range []*Keys{ak, bk} {
					if same, err := Same(e, bytes.NewReader(data), k); !same || err != nil {
						t.Fatalf("%s: the packed contents: %v, %v; want true", k.UserName(), same, err)
					}
				}
				differ := map[string][]byte{"longer": append(bytes.Clone(data), 0)}
				if size > 0 {
					differ["shorter"] = data[:size-1]
					for _, at := range []int{0, size / 2, size - 1} {
						d := bytes.Clone(data)
						d[at] ^= 1
						differ[fmt.Sprintf("byte %d changed", at)] = d
					}
				}
				for what, d := range differ {
					if same, err := Same(e, bytes.NewReader(d), ak); same || err != nil {
						t.Errorf("%s: %v, %v; want false", what, same, err)
					}
				}
				same, err := Same(e, bytes.NewReader(data), ck)
				if packing == spindle.EEPack {
					if same || !errors.Is(err, spindle.CannotDecrypt) {
						t.Errorf("carol, no wrap: %v, %v; want CannotDecrypt", same, err)
					}
				} else if !same || err != nil {
					t.Errorf("carol, %v: %v, %v; want true", packing, same, err)
				}
			})
		}
	}
}

// Same reads no further than one byte past the entry's size, and reports
// a read error as IO, not as different contents.
func TestSameReads(t *testing.T) {
	ak := testKeys(t, alice, 1)
	data := testData(2*spindle.MaxBlockSize+3, 9)
	e := packFile(t, newMemBlocks(), "alice@example.com/f", data, spindle.EEPack, ak)
	r := bytes.NewReader(append(bytes.Clone(data), make([]byte, 1000)...))
	if same, err := Same(e, r, ak); same || err != nil {
		t.Fatalf("longer: %v, %v", same, err)
	}
	if read := r.Size() - int64(r.Len()); read != int64(len(data))+1 {
		t.Errorf("read %d bytes of a longer file, want %d", read, len(data)+1)
	}
	boom := errors.New("disk gone")
	failing := io.MultiReader(bytes.NewReader(data[:spindle.MaxBlockSize+5]), &failReader{boom})
	if same, err := Same(e, failing, ak); same || !errors.Is(err, spindle.IO) || !errors.Is(err, boom) {
		t.Errorf("failing reader: %v, %v; want an IO error", same, err)
	}
	bad := *e
	bad.Blocks = bad.Blocks[1:]
	if _, err := Same(&bad, bytes.NewReader(data), ak); !errors.Is(err, spindle.Integrity) {
		t.Errorf("entry with a block missing: %v, want Integrity", err)
	}
}

type failReader struct{ err error }

func (r *failReader) Read([]byte) (int, error) { return 0, r.err }
