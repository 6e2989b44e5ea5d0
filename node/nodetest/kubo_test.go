package nodetest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kuboEnv is the variable that names a kubo (ipfs) binary for
// BenchmarkCLIGetVsKubo. Kubo is not a dependency of Spindle: the
// benchmark skips without it.
const kuboEnv = "SPINDLE_KUBO"

// kubo is a kubo repository in a temporary directory with an offline
// daemon running on it.
type kubo struct {
	bin, repo string
}

func (k *kubo) command(args ...string) *exec.Cmd {
	cmd := exec.Command(k.bin, args...)
	cmd.Env = append(os.Environ(), "IPFS_PATH="+k.repo)
	return cmd
}

func (k *kubo) run(tb testing.TB, args ...string) string {
	tb.Helper()
	out, err := k.command(args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ipfs %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// startKubo makes a repository with kubo's test profile (loopback
// addresses, no bootstrap peers) and starts an offline daemon on it,
// stopped at the end of the benchmark.
func startKubo(tb testing.TB, bin string) *kubo {
	tb.Helper()
	k := &kubo{bin: bin, repo: tb.TempDir()}
	k.run(tb, "init", "--profile", "test")
	cmd := k.command("daemon", "--offline")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	tb.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	ready := make(chan bool, 1)
	go func() {
		defer close(exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "Daemon is ready") {
				ready <- true
			}
		}
		cmd.Wait()
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			tb.Fatalf("ipfs daemon exited before it was ready\n%s", stderr.Bytes())
		}
	case <-time.After(time.Minute):
		tb.Fatalf("ipfs daemon not ready after a minute\n%s", stderr.Bytes())
	}
	return k
}

// toPipe runs cmd with its stdout the write end of a pipe, which this
// process reads in 1 MiB reads, counting and discarding, as a program at
// the other end of a shell's pipe would. It returns the bytes read and
// the time from start to the end of both.
func toPipe(tb testing.TB, cmd *exec.Cmd) (int64, time.Duration) {
	tb.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		tb.Fatal(err)
	}
	defer r.Close()
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = w, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		w.Close()
		tb.Fatal(err)
	}
	w.Close()
	n, rerr := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, make([]byte, 1<<20))
	err = cmd.Wait()
	d := time.Since(start)
	if err != nil || rerr != nil {
		tb.Fatalf("%s: %v, reading its output: %v\n%s", strings.Join(cmd.Args, " "), err, rerr, stderr.Bytes())
	}
	return n, d
}

// BenchmarkCLIGetVsKubo reads 1 GiB of random bytes to a pipe with
// `spin get` (ee, from a `spin node` process, through its socket) and
// with `ipfs cat` (kubo, from an offline daemon, as added by `ipfs add`
// with its defaults), taking turns, and reports both rates and
// kubo-time/spin-time: how many times faster spin is, and the CPU time
// the spin command and the node took for a get. The kubo binary is
// named by SPINDLE_KUBO; without it the benchmark is skipped.
//
//	SPINDLE_KUBO=/usr/local/bin/ipfs go test ./node/nodetest -run '^$' -bench CLIGetVsKubo -benchtime 4x
func BenchmarkCLIGetVsKubo(b *testing.B) {
	bin := os.Getenv(kuboEnv)
	if bin == "" {
		b.Skipf("set %s to a kubo (ipfs) binary to compare with it", kuboEnv)
	}
	ver, err := exec.Command(bin, "version").Output()
	if err != nil {
		b.Fatalf("%s version: %v", bin, err)
	}
	b.Logf("against %s", strings.TrimSpace(string(ver)))
	env, u := newCLIEnv(b)
	node := env.cmd.Process.Pid
	dir := b.TempDir()
	src := filepath.Join(dir, "big")
	writeRandomFile(b, src, benchFileSize)
	u.run(b, "put", src, "@/big")
	k := startKubo(b, bin)
	cid := strings.TrimSpace(k.run(b, "add", "-Q", src))
	settle()
	var cliCPU, nodeCPU time.Duration
	spinGet := func() time.Duration {
		cmd := exec.Command(u.bin, "get", "@/big")
		cmd.Env = append(os.Environ(), "HOME="+u.home)
		before := cpuTime(node)
		n, d := toPipe(b, cmd)
		nodeCPU += cpuTime(node) - before
		cliCPU += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		if n != benchFileSize {
			b.Fatalf("spin get wrote %d bytes, want %d", n, benchFileSize)
		}
		return d
	}
	kuboCat := func() time.Duration {
		n, d := toPipe(b, k.command("cat", cid))
		if n != benchFileSize {
			b.Fatalf("ipfs cat wrote %d bytes, want %d", n, benchFileSize)
		}
		return d
	}
	spinGet() // Warm both: the page cache holds both stores alike.
	kuboCat()
	var spin, ipfs time.Duration
	cliCPU, nodeCPU = 0, 0
	b.SetBytes(2 * benchFileSize)
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 {
			spin += spinGet()
			ipfs += kuboCat()
		} else {
			ipfs += kuboCat()
			spin += spinGet()
		}
	}
	b.StopTimer()
	b.ReportMetric(spin.Seconds()/float64(b.N), "spin-s")
	b.ReportMetric(ipfs.Seconds()/float64(b.N), "kubo-s")
	b.ReportMetric(ipfs.Seconds()/spin.Seconds(), "kubo/spin")
	b.ReportMetric(cliCPU.Seconds()/float64(b.N), "spin-cli-cpu-s")
	b.ReportMetric(nodeCPU.Seconds()/float64(b.N), "spin-node-cpu-s")
}
