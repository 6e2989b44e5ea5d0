package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkSmallRequest times what a user waits for when a script runs
// spin once per file: a whole new spin process, built from this source
// tree, that starts, signs in to a real "spin node" through the node's
// Unix socket, does one small request and exits. Each sub-benchmark runs
// the command b.N times and reports the median and the 90th percentile of
// the wall time of one run (median-ms/op, p90-ms/op), and the median CPU
// time the process used (cpu-ms/op; on a shared machine the wall time
// also counts waiting for the CPU). "help" starts the program and prints
// a text: the floor under every command.
//
//	go test ./cmd/spin -run '^$' -bench SmallRequest -benchtime 50x
func BenchmarkSmallRequest(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a node and runs the spin binary (-short)")
	}
	bin := buildSpin(b)
	home := startBenchNode(b, bin)
	user := b.TempDir()
	spin := func(tb testing.TB, args ...string) (*os.ProcessState, []byte) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "HOME="+user, "SPIN_CONFIG=")
		var out, errs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errs
		if err := cmd.Run(); err != nil {
			tb.Fatalf("spin %s: %v\n%s", strings.Join(args, " "), err, errs.Bytes())
		}
		return cmd.ProcessState, out.Bytes()
	}
	addr := firstLine(b, filepath.Join(home, "addr"))
	if !strings.HasPrefix(addr, "/unix/") {
		b.Fatalf("the node's first address is %s, not its socket", addr)
	}
	spin(b, "init", "-node", addr, "ann@example.com")
	spin(b, "signup")
	small := filepath.Join(user, "small.txt")
	content := []byte("a small file of a few bytes\n")
	if err := os.WriteFile(small, content, 0o644); err != nil {
		b.Fatal(err)
	}
	spin(b, "put", small, "@/small.txt")

	b.Run("help", func(b *testing.B) {
		timeRuns(b, func(int) *os.ProcessState {
			ps, out := spin(b, "help")
			if !bytes.Contains(out, []byte("Commands:")) {
				b.Fatalf("spin help printed %q", out)
			}
			return ps
		})
	})
	rounds := 0 // The framework may call a sub-benchmark more than once.
	b.Run("put", func(b *testing.B) {
		rounds++
		dir := fmt.Sprintf("@/put%d", rounds)
		spin(b, "mkdir", dir)
		timeRuns(b, func(i int) *os.ProcessState {
			ps, _ := spin(b, "put", small, fmt.Sprintf("%s/f%d", dir, i))
			return ps
		})
		// Every file the runs stored is there.
		_, out := spin(b, "ls", dir)
		if n := bytes.Count(out, []byte("\n")); n != b.N {
			b.Fatalf("spin ls lists %d files after %d puts:\n%s", n, b.N, out)
		}
	})
	b.Run("get", func(b *testing.B) {
		timeRuns(b, func(int) *os.ProcessState {
			ps, out := spin(b, "get", "@/small.txt")
			if !bytes.Equal(out, content) {
				b.Fatalf("spin get printed %q, want %q", out, content)
			}
			return ps
		})
	})
}

// timeRuns runs run b.N times and reports the median and 90th percentile
// of their wall times and the median of the CPU times of the processes
// they return.
func timeRuns(b *testing.B, run func(i int) *os.ProcessState) {
	b.Helper()
	wall := make([]time.Duration, 0, b.N)
	cpu := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		ps := run(i)
		wall = append(wall, time.Since(start))
		cpu = append(cpu, ps.UserTime()+ps.SystemTime())
	}
	b.StopTimer()
	slices.Sort(wall)
	slices.Sort(cpu)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(0, "ns/op") // The mean, which a few slow runs skew.
	b.ReportMetric(ms(wall[len(wall)/2]), "median-ms/op")
	b.ReportMetric(ms(wall[len(wall)*9/10]), "p90-ms/op")
	b.ReportMetric(ms(cpu[len(cpu)/2]), "cpu-ms/op")
}

// buildSpin builds the spin command of this source tree into a temporary
// directory and returns its path: the benchmark times the program a user
// installs, not this test binary.
func buildSpin(b *testing.B) string {
	b.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		b.Skip("no go command to build spin with")
	}
	bin := filepath.Join(b.TempDir(), "spin")
	out, err := exec.Command(goTool, "build", "-o", bin, "spindle.dev/cmd/spin").CombinedOutput()
	if err != nil {
		b.Fatalf("building spin: %v\n%s", err, out)
	}
	return bin
}

// startBenchNode starts "spin node" in a new home and returns the home
// once the node has written its addresses there. The home is made in the
// system's temporary directory, not in b.TempDir, so that the path of
// the node's socket stays short enough for a Unix socket.
func startBenchNode(b *testing.B, bin string) string {
	b.Helper()
	home, err := os.MkdirTemp("", "spinbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(home) })
	cmd := exec.Command(bin, "node", "-home", home, "-listen", "/ip4/127.0.0.1/tcp/0", "-writers", "ann@example.com")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	b.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if fi, err := os.Stat(filepath.Join(home, "addr")); err == nil && fi.Size() > 0 {
			return home
		}
		select {
		case err := <-done:
			b.Fatalf("spin node exited before it was ready: %v\n%s", err, log.Bytes())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("spin node did not write its addresses within a minute\n%s", log.Bytes())
		}
	}
}

// firstLine returns the first line of a file.
func firstLine(tb testing.TB, name string) string {
	tb.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		tb.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(line)
}
