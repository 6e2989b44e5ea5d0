package pack

import (
	"bytes"
	"context"
	"io"
	"runtime"
	"testing"

	"spindle.dev"
)

// TestAllocsBounded checks that packing and unpacking allocate a bounded
// amount per block: no buffer is allocated per block and nothing grows
// with the file beyond the block list itself.
func TestAllocsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 40 MiB")
	}
	ak := testKeys(t, alice, 1)
	discard := func(context.Context, spindle.Ref, []byte) error { return nil }
	measure := func(f func()) (allocs, bytes uint64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs, after.TotalAlloc - before.TotalAlloc
	}
	// Blocks; small is past the read-ahead, whose buffers are allocated
	// once per Reader.
	const small, large = DefaultReadAhead + 4, DefaultReadAhead + 36
	type result struct{ allocs, bytes uint64 }
	results := map[string]map[int]result{"pack": {}, "unpack": {}}
	for _, n := range []int{small, large} {
		data := testData(n*spindle.MaxBlockSize, 1)
		a, b := measure(func() {
			e := &spindle.DirEntry{Name: "alice@example.com/f"}
			if err := Pack(context.Background(), e, bytes.NewReader(data), Config{Signer: ak, Put: discard}); err != nil {
				t.Fatal(err)
			}
		})
		results["pack"][n] = result{a, b}
		s := newMemBlocks()
		e := packFile(t, s, "alice@example.com/f", data, spindle.EEPack, ak)
		a, b = measure(func() {
			r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(io.Discard, onlyReader{r}); err != nil {
				t.Fatal(err)
			}
		})
		results["unpack"][n] = result{a, b}
	}
	for name, r := range results {
		perBlockAllocs := float64(r[large].allocs-r[small].allocs) / (large - small)
		perBlockBytes := float64(r[large].bytes-r[small].bytes) / (large - small)
		t.Logf("%s: %.1f allocs and %.0f bytes per extra block (%d allocs, %d bytes for %d blocks)", name, perBlockAllocs, perBlockBytes, r[large].allocs, r[large].bytes, large)
		if perBlockAllocs > 20 || perBlockBytes > 4096 {
			t.Errorf("%s allocates %.1f times and %.0f bytes per block, want at most 20 and 4096", name, perBlockAllocs, perBlockBytes)
		}
	}
}
