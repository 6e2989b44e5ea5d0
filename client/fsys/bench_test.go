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
func benchEnv(b *testing.B, cacheSize int64) (*nodetest.Env, *fsys.FS, spindle.Client, string) {
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
	return env, m, c, filepath.Join(dir, string(ann))
}

// BenchmarkSequential writes and reads a file of -fsys.size bytes (1 GiB)
// through the mount, with dd in a process of its own (bs=1M, the write
// with conv=fsync, so that it ends when the file is stored), and through
// the client in this process, as spin put and spin get do, the two
// alternated in each run. It reports each rate and the mount's as a share
// of the client's. The mount's block cache is smaller than a block, so
// every read goes to the node. The data is zeros (ee encrypts them all the
// same).
func BenchmarkSequential(b *testing.B) {
	_, m, c, root := benchEnv(b, 1)
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
	report := func(b *testing.B, mount, direct time.Duration, what string) {
		mb := float64(size) * float64(b.N) / 1e6
		b.ReportMetric(mb/mount.Seconds(), "mount-MB/s")
		b.ReportMetric(mb/direct.Seconds(), what+"-MB/s")
		b.ReportMetric(direct.Seconds()/mount.Seconds(), "mount/"+what)
		b.ReportMetric(0, "ns/op")
	}
	b.Run("write", func(b *testing.B) {
		var mount, direct time.Duration
		for i := 0; i < b.N; i++ {
			start := time.Now()
			dd(b, "if=/dev/zero", "of="+filepath.Join(root, "w"), "count="+count, "conv=fsync")
			mount += time.Since(start)
			start = time.Now()
			if _, err := c.Put(ctx, "ann@example.com/q", zeros(size), 0, nil); err != nil {
				b.Fatal(err)
			}
			direct += time.Since(start)
		}
		b.StopTimer()
		if e, err := c.Lookup(ctx, "ann@example.com/w", false); err != nil || e.Size != size {
			b.Fatalf("stored %v, %v; want %d bytes", e, err, size)
		}
		report(b, mount, direct, "put")
	})
	b.Run("read", func(b *testing.B) {
		var mount, direct time.Duration
		before := m.Ops()
		for i := 0; i < b.N; i++ {
			start := time.Now()
			dd(b, "if="+filepath.Join(root, "p"), "of=/dev/null")
			mount += time.Since(start)
			start = time.Now()
			f, err := c.Open(ctx, "ann@example.com/p")
			check(b, err)
			n, err := io.Copy(io.Discard, f)
			check(b, err)
			f.Close()
			direct += time.Since(start)
			if n != size {
				b.Fatalf("read %d bytes, want %d", n, size)
			}
		}
		after := m.Ops()
		if reads := after["read"] - before["read"]; reads > 0 {
			// The size of the kernel's read requests.
			b.ReportMetric(float64(after["read-bytes"]-before["read-bytes"])/float64(reads)/1024, "KiB/read")
		}
		report(b, mount, direct, "open")
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
	env, _, c, _ := benchEnv(b, 1<<20)
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
// into the mount with cp -r, and through the client with 16 files in
// flight, as spin cp -R does, the two alternated in each run. It reports
// files per second until cp returns (files/s), until every file is stored
// (stored-files/s, after FS.Drain), and through the client, and the
// stored rate as a share of the client's.
func BenchmarkCopyIn(b *testing.B) {
	_, m, c, root := benchEnv(b, 1<<20)
	ctx := context.Background()
	src := filepath.Join(b.TempDir(), "src")
	rng := rand.New(rand.NewSource(1))
	type file struct {
		name string
		data []byte
	}
	var files []file
	for i := range 2000 {
		rel := fmt.Sprintf("d%02d/f%04d", i%20, i)
		check(b, os.MkdirAll(filepath.Join(src, filepath.Dir(rel)), 0o755))
		data := make([]byte, 1024+rng.Intn(3072))
		rng.Read(data)
		check(b, os.WriteFile(filepath.Join(src, rel), data, 0o644))
		files = append(files, file{rel, data})
	}
	b.ResetTimer()
	before := m.Ops()
	var copied, stored, direct time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if out, err := exec.Command("cp", "-r", src, filepath.Join(root, fmt.Sprintf("copy%d", i))).CombinedOutput(); err != nil {
			b.Fatalf("cp -r: %v\n%s", err, out)
		}
		copied += time.Since(start)
		if left := m.Drain(); left > 0 {
			b.Fatalf("%d files not stored", left)
		}
		stored += time.Since(start)

		start = time.Now()
		dir := spindle.PathName(fmt.Sprintf("ann@example.com/direct%d", i))
		_, err := c.MakeDirectory(ctx, dir)
		check(b, err)
		for d := range 20 {
			_, err := c.MakeDirectory(ctx, dir+spindle.PathName(fmt.Sprintf("/d%02d", d)))
			check(b, err)
		}
		work := make(chan file)
		errs := make(chan error, 16)
		for range 16 {
			go func() {
				var err error
				for f := range work {
					if err == nil {
						_, err = c.Put(ctx, dir+"/"+spindle.PathName(f.name), bytes.NewReader(f.data), 0, nil)
					}
				}
				errs <- err
			}()
		}
		for _, f := range files {
			work <- f
		}
		close(work)
		for range 16 {
			check(b, <-errs)
		}
		direct += time.Since(start)
	}
	b.StopTimer()
	n := float64(len(files) * b.N)
	after := m.Ops()
	var ops int64
	for k, v := range after {
		if k != "read-bytes" {
			ops += v - before[k]
		}
	}
	// The FUSE requests cp makes for each file.
	b.ReportMetric(float64(ops)/n, "ops/file")
	b.ReportMetric(n/copied.Seconds(), "files/s")
	b.ReportMetric(n/stored.Seconds(), "stored-files/s")
	b.ReportMetric(n/direct.Seconds(), "client-files/s")
	b.ReportMetric(direct.Seconds()/stored.Seconds(), "stored/client")
	b.ReportMetric(0, "ns/op")
	// Every file arrived, whole.
	for _, f := range files[:20] {
		check(b, sameStored(c, "ann@example.com/copy0/"+spindle.PathName(f.name), f.data))
	}
}
