package fsys_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client/fsys"
	"spindle.dev/node/nodetest"
)

var benchSize = flag.Int64("fsys.size", 1<<30, "bytes of the file the sequential read and write benchmarks move")

// benchEnv starts a real spin node process, as the spin command would
// talk to, and mounts it with a block cache of cacheSize bytes.
func benchEnv(b *testing.B, cacheSize int64) (*nodetest.Env, spindle.Client, string) {
	canMount(b)
	if testing.Short() {
		b.Skip("starts a node process")
	}
	env := nodetest.New(b, nodetest.Setup{Kind: nodetest.Procs, Users: []spindle.UserName{ann}})
	c, err := env.Client(ann)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	m, err := fsys.Mount(dir, fsys.Config{Client: c, CacheDir: b.TempDir(), CacheSize: cacheSize, Timeout: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		b.Skipf("cannot mount: %v", err)
	}
	b.Cleanup(func() { m.Unmount() })
	return env, c, filepath.Join(dir, string(ann))
}

// BenchmarkSequential writes and reads a file of -fsys.size bytes (1 GiB)
// through the mount, with dd in a process of its own (bs=1M), and through
// the client in this process, as spin put and spin get do. The mount's
// block cache is smaller than a block, so every read goes to the node.
// The data is zeros (ee encrypts them all the same).
func BenchmarkSequential(b *testing.B) {
	_, c, root := benchEnv(b, 1)
	ctx := context.Background()
	size := *benchSize
	count := fmt.Sprint(size >> 20)
	// The file the reads read, whichever run.
	if _, err := c.Put(ctx, "ann@example.com/p", zeros(size), 0, nil); err != nil {
		b.Fatal(err)
	}
	dd := func(b *testing.B, args ...string) {
		if out, err := exec.Command("dd", append(args, "bs=1M", "status=none")...).CombinedOutput(); err != nil {
			b.Fatalf("dd: %v\n%s", err, out)
		}
	}
	b.Run("write/mount", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			dd(b, "if=/dev/zero", "of="+filepath.Join(root, "w"), "count="+count)
		}
		b.StopTimer()
		if e, err := c.Lookup(ctx, "ann@example.com/w", false); err != nil || e.Size != size {
			b.Fatalf("stored %v, %v; want %d bytes", e, err, size)
		}
	})
	b.Run("write/put", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			if _, err := c.Put(ctx, "ann@example.com/p", zeros(size), 0, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read/mount", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			dd(b, "if="+filepath.Join(root, "p"), "of=/dev/null")
		}
	})
	b.Run("read/get", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; i < b.N; i++ {
			f, err := c.Open(ctx, "ann@example.com/p")
			check(b, err)
			n, err := io.Copy(io.Discard, f)
			check(b, err)
			f.Close()
			if n != size {
				b.Fatalf("read %d bytes, want %d", n, size)
			}
		}
	})
}

// zeros returns a reader of n zero bytes.
func zeros(n int64) io.Reader { return io.LimitReader(zeroReader{}, n) }

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// BenchmarkListDir runs ls -l on a directory of 2,000 files: cold, in a
// fresh mount each time, and warm, in a mount that listed it before.
func BenchmarkListDir(b *testing.B) {
	env, c, _ := benchEnv(b, 1<<20)
	ctx := context.Background()
	if _, err := c.MakeDirectory(ctx, "ann@example.com/many"); err != nil {
		b.Fatal(err)
	}
	for i := range 2000 {
		if _, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("ann@example.com/many/f%04d", i)), bytes.NewReader([]byte("x")), 0, nil); err != nil {
			b.Fatal(err)
		}
	}
	ls := func(b *testing.B, dir string) {
		out, err := exec.Command("ls", "-l", dir).Output()
		if err != nil {
			b.Fatal(err)
		}
		if n := bytes.Count(out, []byte("\n")); n != 2001 {
			b.Fatalf("ls -l printed %d lines, want 2001", n)
		}
	}
	b.Run("cold", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			dir := b.TempDir()
			m, err := fsys.Mount(dir, fsys.Config{Client: c, CacheDir: b.TempDir(), Timeout: 30 * time.Second})
			check(b, err)
			b.StartTimer()
			ls(b, filepath.Join(dir, string(ann), "many"))
			b.StopTimer()
			m.Unmount()
			b.StartTimer()
		}
	})
	b.Run("warm", func(b *testing.B) {
		dir := b.TempDir()
		m, err := fsys.Mount(dir, fsys.Config{Client: c, CacheDir: b.TempDir(), Timeout: 30 * time.Second})
		check(b, err)
		defer m.Unmount()
		ls(b, filepath.Join(dir, string(ann), "many"))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ls(b, filepath.Join(dir, string(ann), "many"))
		}
	})
	_ = env
}

// BenchmarkCopyIn copies 2,000 small files (1-4 KiB, in 20 directories)
// into the mount with cp -r, and reports files per second.
func BenchmarkCopyIn(b *testing.B) {
	_, _, root := benchEnv(b, 1<<20)
	src := filepath.Join(b.TempDir(), "src")
	rng := rand.New(rand.NewSource(1))
	for i := range 2000 {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i%20))
		check(b, os.MkdirAll(d, 0o755))
		data := make([]byte, 1024+rng.Intn(3072))
		rng.Read(data)
		check(b, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), data, 0o644))
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if out, err := exec.Command("cp", "-r", src, filepath.Join(root, fmt.Sprintf("copy%d", i))).CombinedOutput(); err != nil {
			b.Fatalf("cp -r: %v\n%s", err, out)
		}
	}
	b.ReportMetric(float64(2000*b.N)/time.Since(start).Seconds(), "files/s")
}
