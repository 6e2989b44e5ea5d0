package keyraft

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// testSigner is a spindle.Signer over an in-memory P-256 key.
type testSigner struct {
	name spindle.UserName
	key  *ecdsa.PrivateKey
	pub  spindle.PublicKey
}

var _ spindle.Signer = (*testSigner)(nil)

func newSigner(t testing.TB, name spindle.UserName) *testSigner {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := spindle.FormatPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &testSigner{name: name, key: key, pub: pub}
}

func (s *testSigner) UserName() spindle.UserName   { return s.name }
func (s *testSigner) PublicKey() spindle.PublicKey { return s.pub }
func (s *testSigner) Sign(digest []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.key, digest)
}

// register returns a new version-1 record of s's user, signed by s.
func register(t testing.TB, s *testSigner, hosts ...spindle.PeerAddr) *spindle.User {
	t.Helper()
	u := &spindle.User{Name: s.name, PublicKey: s.pub, DirHosts: hosts, Version: 1}
	if err := keylog.Sign(u, s); err != nil {
		t.Fatal(err)
	}
	return u
}

// update returns the next version of cur with the given key and hosts,
// signed by s.
func update(t testing.TB, cur *spindle.User, key spindle.PublicKey, s *testSigner, hosts ...spindle.PeerAddr) *spindle.User {
	t.Helper()
	u := keylog.Next(cur)
	u.PublicKey = key
	u.DirHosts = hosts
	if err := keylog.Sign(u, s); err != nil {
		t.Fatal(err)
	}
	return u
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// fast shortens Raft's timeouts for tests. The leader lease is as long as
// the heartbeat timeout: at 50 ms, a leader on a loaded two-core machine
// sometimes heard from no quorum in time, stepped down, and failed the
// Put in progress ("leadership lost while committing log").
func fast(c *raft.Config) {
	c.HeartbeatTimeout = 100 * time.Millisecond
	c.ElectionTimeout = 100 * time.Millisecond
	c.LeaderLeaseTimeout = 100 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// memCluster opens a one-member in-memory cluster on raft's in-memory
// transport.
func memCluster(t testing.TB) *Cluster {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress("m0"))
	c, err := Open(ctxT(t), Config{ID: "m0", Bootstrap: true, Logger: testLogger(t), transport: trans, tune: fast})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); trans.Close() })
	return c
}

// tcpNet hands out loopback TCP listeners and dials members by ID: the
// test form of the libp2p streams node provides.
type tcpNet struct {
	mu    sync.Mutex
	addrs map[string]string
}

func newTCPNet() *tcpNet { return &tcpNet{addrs: make(map[string]string)} }

func (n *tcpNet) listen(t testing.TB, id string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	n.addrs[id] = ln.Addr().String()
	n.mu.Unlock()
	return ln
}

func (n *tcpNet) dial(ctx context.Context, id string) (net.Conn, error) {
	n.mu.Lock()
	addr, ok := n.addrs[id]
	n.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("unknown member %q", id)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// diskCluster opens a one-member cluster in dir over loopback TCP.
func diskCluster(t testing.TB, dir string, bootstrap bool) *Cluster {
	t.Helper()
	n := newTCPNet()
	id := "12D3KooWTestMember"
	c, err := Open(ctxT(t), Config{
		Dir: dir, ID: id, Listener: n.listen(t, id), Dial: n.dial,
		Bootstrap: bootstrap, Logger: testLogger(t), tune: fast,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func snapshotBytes(t testing.TB, f *fsm) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	snap := s.(*snapshot)
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(encodeSnapshot(pw, snap.entries, snap.tree)) }()
	b, err := io.ReadAll(pr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
