package nodetest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These benchmarks drive real processes: a `spin node` and the `spin`
// command, as a user would. They report throughput and the peak resident
// memory of the command (from its rusage) and of the node (VmHWM).
//
//	go test ./node/nodetest -run '^$' -bench CLI -benchtime 1x

// cliUser is a user with a home of its own, running the spin binary.
type cliUser struct {
	bin, home string
}

func (u *cliUser) run(tb testing.TB, args ...string) (*os.ProcessState, string) {
	tb.Helper()
	cmd := exec.Command(u.bin, args...)
	cmd.Env = append(os.Environ(), "HOME="+u.home)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		tb.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	return cmd.ProcessState, out.String()
}

func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss << 10 // Linux reports KiB.
	}
	return 0
}

// peakRSS reads the peak resident set of a running process.
func peakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseInt(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// resetPeakRSS starts a new peak of a running process's resident set
// (Linux: writing 5 to clear_refs resets VmHWM), so that a benchmark's
// figure leaves out what the process did before the timed runs.
func resetPeakRSS(tb testing.TB, pid int) {
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		tb.Logf("cannot reset the node's peak RSS (%v); its figure includes the set-up", err)
	}
}

// fileDigest returns the SHA-256 of a file's contents.
func fileDigest(tb testing.TB, name string) [sha256.Size]byte {
	f, err := os.Open(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		tb.Fatal(err)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// newCLIEnv starts a node process and a signed-up CLI user.
func newCLIEnv(b *testing.B) (*Env, *cliUser) {
	env := New(b, Setup{Kind: Procs})
	bin, err := spinBinary()
	if err != nil {
		b.Fatal(err)
	}
	u := &cliUser{bin: bin, home: b.TempDir()}
	u.run(b, "init", "-node", string(env.Addr()), "ann@example.com")
	u.run(b, "signup")
	return env, u
}

// settle flushes the file system's dirty pages before a timed run, so
// that the run does not pay for writing back the input file created just
// before it. (Removing a large file is also left for after the run: on
// file systems mounted with discard, it keeps the disk busy for a while.)
func settle() {
	syscall.Sync()
	time.Sleep(200 * time.Millisecond)
}

// writeRandomFile writes n pseudo-random bytes to a new file.
func writeRandomFile(tb testing.TB, name string, n int64) {
	f, err := os.Create(name)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	rng := rand.NewChaCha8([32]byte{1, 2, 3})
	buf := make([]byte, 1<<20)
	for left := n; left > 0; {
		k := min(int64(len(buf)), left)
		rng.Read(buf[:k])
		if _, err := f.Write(buf[:k]); err != nil {
			tb.Fatal(err)
		}
		left -= k
	}
}

const benchFileSize = 1 << 30

func BenchmarkCLIPut1GiB(b *testing.B) {
	env, u := newCLIEnv(b)
	src := filepath.Join(b.TempDir(), "big")
	writeRandomFile(b, src, benchFileSize)
	settle()
	resetPeakRSS(b, env.cmd.Process.Pid)
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	var rss int64
	for i := range b.N {
		ps, _ := u.run(b, "put", src, fmt.Sprintf("@/big%d", i))
		rss = max(rss, maxRSS(ps))
	}
	b.StopTimer()
	b.ReportMetric(float64(rss)/(1<<20), "cli-peak-MiB")
	b.ReportMetric(float64(peakRSS(env.cmd.Process.Pid))/(1<<20), "node-peak-MiB")
}

func BenchmarkCLIGet1GiB(b *testing.B) {
	env, u := newCLIEnv(b)
	dir := b.TempDir()
	src := filepath.Join(dir, "big")
	writeRandomFile(b, src, benchFileSize)
	u.run(b, "put", src, "@/big")
	dst := filepath.Join(dir, "out")
	settle()
	resetPeakRSS(b, env.cmd.Process.Pid) // Not the put above.
	b.SetBytes(benchFileSize)
	b.ResetTimer()
	var rss int64
	for range b.N {
		ps, _ := u.run(b, "get", "@/big", dst)
		rss = max(rss, maxRSS(ps))
	}
	b.StopTimer()
	if fileDigest(b, dst) != fileDigest(b, src) {
		b.Fatal("spin get wrote other contents than were put")
	}
	b.ReportMetric(float64(rss)/(1<<20), "cli-peak-MiB")
	b.ReportMetric(float64(peakRSS(env.cmd.Process.Pid))/(1<<20), "node-peak-MiB")
}

func BenchmarkCLICopyTree(b *testing.B) {
	const files = 2000
	env, u := newCLIEnv(b)
	src := filepath.Join(b.TempDir(), "tree")
	rng := rand.NewChaCha8([32]byte{4})
	buf := make([]byte, 4096)
	for i := range files {
		d := filepath.Join(src, fmt.Sprintf("d%02d", i%20))
		os.MkdirAll(d, 0o755)
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%04d", i)), buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	node := env.cmd.Process.Pid
	nodeCPU := cpuTime(node)
	b.ResetTimer()
	start := time.Now()
	var rss int64
	var cliCPU time.Duration
	for i := range b.N {
		ps, _ := u.run(b, "cp", "-R", src, fmt.Sprintf("@/copy%d", i))
		rss = max(rss, maxRSS(ps))
		cliCPU += ps.UserTime() + ps.SystemTime()
	}
	b.StopTimer()
	nodeCPU = cpuTime(node) - nodeCPU
	b.ReportMetric(float64(files*b.N)/time.Since(start).Seconds(), "files/s")
	b.ReportMetric(float64(rss)/(1<<20), "cli-peak-MiB")
	b.ReportMetric(float64(cliCPU.Microseconds())/float64(files*b.N), "cli-cpu-µs/file")
	b.ReportMetric(float64(nodeCPU.Microseconds())/float64(files*b.N), "node-cpu-µs/file")
}

// cpuTime returns the user and system time a running process has used,
// from /proc (Linux), or 0.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: count from after it.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	const ticks = 100 // USER_HZ, fixed at 100 on Linux.
	return time.Duration(utime+stime) * time.Second / ticks
}

// BenchmarkDiskCeiling measures what this machine's disk allows, for
// judging the CLI figures: 1 MiB files written, synced and renamed into
// place by 8 workers (the node's block store), and one new file written
// in 1 MiB pieces without sync (spin get's destination).
func BenchmarkDiskCeiling(b *testing.B) {
	buf := make([]byte, 1<<20)
	rand.NewChaCha8([32]byte{9}).Read(buf)
	b.Run("blocks-fsync-8", func(b *testing.B) {
		dir := b.TempDir()
		b.SetBytes(1 << 20)
		var next atomicCounter
		b.SetParallelism(4) // 4 × GOMAXPROCS(2) = 8 workers.
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f, err := os.CreateTemp(dir, "t-*")
				if err != nil {
					b.Error(err)
					return
				}
				_, err = f.Write(buf)
				if err == nil {
					err = f.Sync()
				}
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err == nil {
					err = os.Rename(f.Name(), filepath.Join(dir, fmt.Sprint(next.add())))
				}
				if err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("new-file", func(b *testing.B) {
		f, err := os.Create(filepath.Join(b.TempDir(), "out"))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		b.SetBytes(1 << 20)
		for range b.N {
			if _, err := f.Write(buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type atomicCounter struct {
	mu sync.Mutex
	n  int
}

func (c *atomicCounter) add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}
