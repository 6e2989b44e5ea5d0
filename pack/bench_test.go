package pack

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"io"
	"runtime"
	"testing"

	"spindle.dev"
)

// streamSize is the size of the benchmark stream.
const streamSize = 256 << 20

// patternReader yields n bytes cycling through a fixed random block,
// costing a memcpy per byte as any real source would.
type patternReader struct {
	pattern []byte
	n, off  int
}

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	p = p[:min(len(p), r.n-r.off)]
	k := 0
	for k < len(p) {
		k += copy(p[k:], r.pattern[(r.off+k)%len(r.pattern):])
	}
	r.off += k
	return k, nil
}

// throughput records the MB/s of the last run of each sub-benchmark of
// BenchmarkEE, so that the parent can compare them.
var throughput = map[string]float64{}

func record(b *testing.B, name string) {
	throughput[name] = float64(b.N) * streamSize / b.Elapsed().Seconds() / 1e6
}

// allocsPerBlock reports allocations per block, measured over the
// benchmark loop.
type allocMeter struct{ before runtime.MemStats }

func startAllocs() *allocMeter {
	m := &allocMeter{}
	runtime.ReadMemStats(&m.before)
	return m
}

func (m *allocMeter) report(b *testing.B) {
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	blocks := float64(b.N) * streamSize / spindle.MaxBlockSize
	b.ReportMetric(float64(after.Mallocs-m.before.Mallocs)/blocks, "allocs/block")
	b.ReportMetric(float64(after.TotalAlloc-m.before.TotalAlloc)/blocks, "B/block")
}

// BenchmarkEE measures ee packing and unpacking of a 256 MiB stream beside
// the two primitives it is built from, a SHA-256 loop and an AES-256-GCM
// loop over 1 MiB blocks, and fails if either direction reaches less than
// 60% of the ceiling 1/(1/sha256 + 1/aesgcm) measured in the same run.
func BenchmarkEE(b *testing.B) {
	block := testData(spindle.MaxBlockSize, 1)
	b.Run("ceiling-sha256", func(b *testing.B) {
		b.SetBytes(streamSize)
		b.ReportAllocs()
		for b.Loop() {
			for range streamSize / spindle.MaxBlockSize {
				sha256.Sum256(block)
			}
		}
		record(b, "sha256")
	})
	b.Run("ceiling-aesgcm", func(b *testing.B) {
		c, _ := aes.NewCipher(make([]byte, 32))
		aead, _ := cipher.NewGCM(c)
		buf := make([]byte, spindle.MaxBlockSize, spindle.MaxBlockSize+gcmOverhead)
		copy(buf, block)
		var nonce [12]byte
		b.SetBytes(streamSize)
		b.ReportAllocs()
		for b.Loop() {
			for i := range streamSize / spindle.MaxBlockSize {
				nonce[0] = byte(i)
				aead.Seal(buf[:0], nonce[:], buf[:spindle.MaxBlockSize], nil)
			}
		}
		record(b, "aesgcm")
	})

	ak := testKeys(b, alice, 1)
	discard := func(context.Context, spindle.Ref, []byte) error { return nil }
	b.Run("pack", func(b *testing.B) {
		b.SetBytes(streamSize)
		b.ReportAllocs()
		m := startAllocs()
		for b.Loop() {
			e := &spindle.DirEntry{Name: "alice@example.com/big"}
			if err := Pack(context.Background(), e, &patternReader{pattern: block, n: streamSize}, Config{Signer: ak, Put: discard}); err != nil {
				b.Fatal(err)
			}
		}
		record(b, "pack")
		m.report(b)
	})

	s := newMemBlocks()
	e := &spindle.DirEntry{Name: "alice@example.com/big"}
	if err := Pack(context.Background(), e, &patternReader{pattern: block, n: streamSize}, Config{Signer: ak, Put: s.put}); err != nil {
		b.Fatal(err)
	}
	b.Run("unpack", func(b *testing.B) {
		b.SetBytes(streamSize)
		b.ReportAllocs()
		buf := make([]byte, 256<<10)
		m := startAllocs()
		for b.Loop() {
			r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
			if err != nil {
				b.Fatal(err)
			}
			if n, err := io.CopyBuffer(io.Discard, onlyReader{r}, buf); err != nil || n != streamSize {
				b.Fatal(n, err)
			}
		}
		record(b, "unpack")
		m.report(b)
	})

	sha, gcm := throughput["sha256"], throughput["aesgcm"]
	if sha == 0 || gcm == 0 || throughput["pack"] == 0 || throughput["unpack"] == 0 {
		return // Filtered by -bench.
	}
	ceiling := 1 / (1/sha + 1/gcm)
	b.Logf("sha256 %.0f MB/s, aes-gcm %.0f MB/s, ceiling %.0f MB/s", sha, gcm, ceiling)
	for _, name := range []string{"pack", "unpack"} {
		ratio := throughput[name] / ceiling
		b.Logf("ee %s %.0f MB/s = %.0f%% of the ceiling", name, throughput[name], 100*ratio)
		if ratio < 0.6 {
			b.Errorf("ee %s reaches %.0f%% of the ceiling, want at least 60%%", name, 100*ratio)
		}
	}
}

// onlyReader hides the Reader's other methods from io.Copy.
type onlyReader struct{ io.Reader }
