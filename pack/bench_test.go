package pack

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
// the primitives they are built from: a SHA-256 loop and an AES-256-GCM
// loop over 1 MiB blocks on one core, and the ceiling, both of them over
// every block with the blocks spread over all cores as pack spreads them:
// what pack and unpack would cost if they did nothing else. Its last part,
// vs-ceiling, reports each direction as a share of that ceiling measured in
// the same run, and fails below 40%.
func BenchmarkEE(b *testing.B) {
	block := testData(spindle.MaxBlockSize, 1)
	ak := testKeys(b, alice, 1)

	sha := func() {
		for range streamSize / spindle.MaxBlockSize {
			sha256.Sum256(block)
		}
	}
	c, _ := aes.NewCipher(make([]byte, 32))
	aead, _ := cipher.NewGCM(c)
	sealBuf := make([]byte, spindle.MaxBlockSize, spindle.MaxBlockSize+gcmOverhead)
	copy(sealBuf, block)
	gcm := func() {
		var nonce [12]byte
		for i := range streamSize / spindle.MaxBlockSize {
			binary.BigEndian.PutUint64(nonce[4:], uint64(i))
			aead.Seal(sealBuf[:0], nonce[:], sealBuf[:spindle.MaxBlockSize], nil)
		}
	}
	// The ceiling: each block hashed and sealed, on every core at once.
	procs := runtime.GOMAXPROCS(0)
	ceilBufs := make([][]byte, procs)
	for i := range ceilBufs {
		ceilBufs[i] = make([]byte, 0, spindle.MaxBlockSize+gcmOverhead)
	}
	ceiling := func() {
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := range procs {
			buf := ceilBufs[w]
			wg.Go(func() {
				var nonce [12]byte
				for {
					i := next.Add(1) - 1
					if i >= streamSize/spindle.MaxBlockSize {
						return
					}
					sha256.Sum256(block)
					binary.BigEndian.PutUint64(nonce[4:], uint64(i))
					aead.Seal(buf[:0], nonce[:], block, nil)
				}
			})
		}
		wg.Wait()
	}
	discard := func(context.Context, spindle.Ref, []byte) error { return nil }
	pack := func() {
		e := &spindle.DirEntry{Name: "alice@example.com/big"}
		if err := Pack(context.Background(), e, &patternReader{pattern: block, n: streamSize}, Config{Signer: ak, Put: discard}); err != nil {
			b.Fatal(err)
		}
	}
	s := newMemBlocks()
	e := &spindle.DirEntry{Name: "alice@example.com/big"}
	if err := Pack(context.Background(), e, &patternReader{pattern: block, n: streamSize}, Config{Signer: ak, Put: s.put}); err != nil {
		b.Fatal(err)
	}
	readBuf := make([]byte, 256<<10)
	unpack := func() {
		r, err := NewReader(context.Background(), e, ReadConfig{Keys: ak, WriterKeys: []spindle.PublicKey{ak.PublicKey()}, Get: s.get})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			k, err := r.Read(readBuf)
			n += k
			if err == io.EOF {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if n != streamSize {
			b.Fatalf("read %d bytes, want %d", n, streamSize)
		}
	}

	steps := []struct {
		name string
		f    func()
	}{{"sha256-1core", sha}, {"aesgcm-1core", gcm}, {"ceiling", ceiling}, {"pack", pack}, {"unpack", unpack}}
	for _, step := range steps {
		b.Run(step.name, func(b *testing.B) {
			b.SetBytes(streamSize)
			b.ReportAllocs()
			m := startAllocs()
			for b.Loop() {
				step.f()
			}
			m.report(b)
		})
	}

	// The verdict. The box is shared, so the four steps are timed in turn,
	// five rounds over, and each keeps its best time: load that comes
	// and goes then hits the ceilings and ee alike.
	b.Run("vs-ceiling", func(b *testing.B) {
		best := make([]time.Duration, len(steps))
		for b.Loop() {
			for range 5 {
				for i, step := range steps {
					start := time.Now()
					step.f()
					if d := time.Since(start); best[i] == 0 || d < best[i] {
						best[i] = d
					}
				}
			}
		}
		mbps := func(i int) float64 { return streamSize / best[i].Seconds() / 1e6 }
		ceiling := mbps(2)
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(mbps(0), "sha256-1core-MB/s")
		b.ReportMetric(mbps(1), "aesgcm-1core-MB/s")
		b.ReportMetric(ceiling, "ceiling-MB/s")
		for i, name := range []string{"pack", "unpack"} {
			ratio := mbps(3+i) / ceiling
			b.ReportMetric(mbps(3+i), name+"-MB/s")
			b.ReportMetric(100*ratio, "%"+name)
			if ratio < 0.4 {
				b.Errorf("ee %s: %.0f MB/s is %.0f%% of the ceiling %.0f MB/s, want at least 40%%", name, mbps(3+i), 100*ratio, ceiling)
			}
		}
	})
}

// onlyReader hides the Reader's other methods from io.Copy.
type onlyReader struct{ io.Reader }
