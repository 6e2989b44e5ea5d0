// Package nodetest builds Spindle networks for end-to-end tests and runs
// scenarios on them, in the spirit of Upspin's testenv.
//
// An environment has one node and some users. Its Kind says where the node
// runs: "inproc" runs node.Node in the test process; "procs" runs a real
// `spin node` process on 127.0.0.1, built once per test binary. Either way
// the users' clients are client.Clients in the test process, talking to the
// node over real libp2p connections on loopback, so one list of scenarios
// runs in both worlds.
package nodetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node"
	"spindle.dev/pack"
)

// Kinds of environment.
const (
	InProc = "inproc"
	Procs  = "procs"
	// Network runs two nodes in the test process: the users' dir host,
	// which runs the key cluster and where they signed up, and the node
	// their clients talk to, which uses that key cluster (-keyserver) and
	// carries their requests to the dir host (see network.go).
	Network = "network"
)

// Setup describes an environment.
type Setup struct {
	Kind    string             // InProc or Procs.
	Users   []spindle.UserName // Users to create and sign up; the first is the default.
	Packing spindle.Packing    // Default packing of the clients; zero means ee.
}

// Env is a running environment.
type Env struct {
	t       testing.TB
	Kind    string
	Users   []spindle.UserName
	Home    string // The node's home directory.
	packing spindle.Packing
	keyLogs string // Where the clients keep their key logs.

	mu      sync.Mutex
	node    *node.Node // InProc and Network: the dir host.
	fwd     *node.Node // Network: the node clients talk to.
	fwdHome string     // Network: its home.
	cmd     *exec.Cmd  // Procs.
	done    chan error // Procs: the process's exit.
	addr    spindle.PeerAddr
	listen  string
	keys    map[spindle.UserName]*pack.Keys
	clients map[spindle.UserName]*client.Client
}

// New starts an environment and signs up its users. It stops everything
// when the test ends.
func New(t testing.TB, s Setup) *Env {
	t.Helper()
	if s.Kind == Procs && testing.Short() {
		t.Skip("procs environments are skipped with -short")
	}
	e := &Env{
		t:       t,
		Kind:    s.Kind,
		Users:   s.Users,
		Home:    t.TempDir(),
		packing: s.Packing,
		keyLogs: t.TempDir(),
		listen:  "/ip4/127.0.0.1/tcp/0",
		keys:    map[spindle.UserName]*pack.Keys{},
		clients: map[spindle.UserName]*client.Client{},
	}
	t.Cleanup(e.stop)
	if err := e.start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, u := range s.Users {
		keys, _, err := pack.Generate(u)
		if err != nil {
			t.Fatal(err)
		}
		e.keys[u] = keys
		if err := e.signup(ctx, u); err != nil {
			t.Fatalf("signup %s: %v", u, err)
		}
	}
	return e
}

// Client returns the client of user u, dialing the node if needed.
func (e *Env) Client(u spindle.UserName) (spindle.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.clients[u]; c != nil {
		return c, nil
	}
	keys := e.keys[u]
	if keys == nil {
		return nil, fmt.Errorf("nodetest: no user %s in this environment", u)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: e.addr, Packing: e.packing, Logger: e.logger("client"), KeyLog: filepath.Join(e.keyLogs, string(u)), DirHeads: filepath.Join(e.keyLogs, string(u)+".dirheads")})
	if err != nil {
		return nil, err
	}
	e.clients[u] = c
	return c, nil
}

// Keys returns user u's keys.
func (e *Env) Keys(u spindle.UserName) *pack.Keys { return e.keys[u] }

// Addr returns the node's address.
func (e *Env) Addr() spindle.PeerAddr { return e.addr }

func (e *Env) logger(name string) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(prefixWriter(e.t, name), nil))
}

func (e *Env) start() error {
	switch e.Kind {
	case InProc:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := node.New(ctx, node.Config{Home: e.Home, Listen: []string{e.listen}, Writers: []string{"all"}, Logger: e.logger("node")})
		if err != nil {
			return err
		}
		e.node = n
		e.addr = n.Addrs()[0]
	case Network:
		if err := e.startNetwork(); err != nil {
			return err
		}
	case Procs:
		bin, err := spinBinary()
		if err != nil {
			return err
		}
		os.Remove(filepath.Join(e.Home, "addr"))
		cmd := exec.Command(bin, "-log", "info", "node", "-home", e.Home, "-listen", e.listen, "-writers", "all")
		cmd.Stdout = io.Discard
		cmd.Stderr = prefixWriter(e.t, "node")
		if err := cmd.Start(); err != nil {
			return err
		}
		e.cmd = cmd
		e.done = make(chan error, 1)
		go func() { e.done <- cmd.Wait() }()
		addr, err := waitAddr(filepath.Join(e.Home, "addr"), e.done)
		if err != nil {
			return err
		}
		e.addr = addr
	default:
		return fmt.Errorf("nodetest: unknown kind %q", e.Kind)
	}
	// Restart on the same port, so that addresses stay valid.
	if i := strings.Index(string(e.addr), "/tcp/"); i >= 0 && strings.HasSuffix(e.listen, "/tcp/0") && e.Kind != Network {
		rest := string(e.addr)[i+len("/tcp/"):]
		port := rest[:strings.IndexByte(rest, '/')]
		e.listen = "/ip4/127.0.0.1/tcp/" + port
	}
	return nil
}

// waitAddr waits until a node process has written its address file.
func waitAddr(name string, done chan error) (spindle.PeerAddr, error) {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			return "", fmt.Errorf("nodetest: spin node exited before it was ready: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		data, err := os.ReadFile(name)
		if err == nil && len(data) > 0 {
			line, _, _ := strings.Cut(string(data), "\n")
			return spindle.PeerAddr(line), nil
		}
	}
	return "", fmt.Errorf("nodetest: spin node did not write %s in time", name)
}

// closeClients drops every client, which re-dial on next use.
func (e *Env) closeClients() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for u, c := range e.clients {
		c.Close()
		delete(e.clients, u)
	}
}

// shutdown stops the node cleanly (SIGTERM for a process).
func (e *Env) shutdown() error {
	e.closeClients()
	if e.fwd != nil {
		e.fwd.Close()
		e.fwd = nil
	}
	switch {
	case e.node != nil:
		err := e.node.Close()
		e.node = nil
		return err
	case e.cmd != nil:
		e.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-e.done:
			e.cmd = nil
			return err
		case <-time.After(30 * time.Second):
			e.cmd.Process.Kill()
			<-e.done
			e.cmd = nil
			return fmt.Errorf("nodetest: spin node did not stop within 30s of SIGTERM")
		}
	}
	return nil
}

// Restart stops the node cleanly and starts it again on the same home.
func (e *Env) Restart() error {
	if err := e.shutdown(); err != nil {
		return err
	}
	return e.start()
}

// Kill kills the node process with SIGKILL and starts it again on the same
// home. Only Procs environments can do this.
func (e *Env) Kill() error {
	if e.Kind != Procs {
		return fmt.Errorf("nodetest: only procs environments can kill their node")
	}
	e.closeClients()
	e.cmd.Process.Kill()
	<-e.done
	e.cmd = nil
	return e.start()
}

// KillNow kills the node process with SIGKILL without restarting it.
func (e *Env) KillNow() {
	if e.cmd != nil {
		e.cmd.Process.Kill()
	}
}

// StartAgain starts the node again, on the same home and address, after
// KillNow. The clients are kept: they reconnect by themselves.
func (e *Env) StartAgain() error {
	if e.cmd != nil {
		<-e.done
		e.cmd = nil
	}
	return e.start()
}

func (e *Env) stop() {
	if err := e.shutdown(); err != nil {
		e.t.Logf("nodetest: stopping the node: %v", err)
	}
}

// binDir is the directory spinBinary builds into, once it has.
var binDir struct {
	sync.Mutex
	name string
}

// RemoveBinary removes the spin binary that environments of kind Procs
// built, if one was. A test binary calls it from TestMain once its tests
// have run, so that no build is left in the temporary directory.
func RemoveBinary() {
	binDir.Lock()
	defer binDir.Unlock()
	if binDir.name != "" {
		os.RemoveAll(binDir.name)
		binDir.name = ""
	}
}

// spinBinary builds cmd/spin once per test binary.
var spinBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "spindle-nodetest-")
	if err != nil {
		return "", err
	}
	binDir.Lock()
	binDir.name = dir
	binDir.Unlock()
	bin := filepath.Join(dir, "spin")
	cmd := exec.Command("go", "build", "-o", bin, "spindle.dev/cmd/spin")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nodetest: building spin: %v\n%s", err, out.Bytes())
	}
	return bin, nil
})

// prefixWriter returns a writer that prints each line to stderr with a
// prefix when the tests run verbosely, and discards it otherwise.
func prefixWriter(t testing.TB, name string) io.Writer {
	if !testing.Verbose() {
		return io.Discard
	}
	return &linePrefixer{prefix: name + ": "}
}

// linePrefixer writes whole lines to stderr, each after a prefix.
type linePrefixer struct {
	mu     sync.Mutex
	prefix string
	buf    []byte
}

func (w *linePrefixer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		fmt.Fprintf(os.Stderr, "%s%s\n", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
}
