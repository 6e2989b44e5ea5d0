package host

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/dirlog/dirlogtest"
)

// The tests' signer (a user and a dir host) and entries, shared with the
// dirlog's own tests through dirlogtest.
type testSigner = dirlogtest.Signer

var (
	newSigner = dirlogtest.NewSigner
	file      = dirlogtest.File
	control   = dirlogtest.Control
	wantKind  = dirlogtest.WantKind
)

const (
	ann = spindle.UserName("ann@example.com")
	bob = spindle.UserName("bob@example.com")
	cat = spindle.UserName("cat@example.com")
	dan = spindle.UserName("dan@other.org")
)

// env is a server with registered users.
type env struct {
	t       testing.TB
	ctx     context.Context
	store   Store
	host    *testSigner
	mu      sync.Mutex
	signers map[spindle.UserName]*testSigner
	s       *Server
	history dirlog.KeyHistoryFunc // Passed to New as Config.KeyHistory.
	repair  []spindle.UserName
	keyErr  map[spindle.UserName]error // Key lookups of these users fail so.
}

func newEnv(t testing.TB, store Store) *env {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), store: store, host: newSigner(t, "host@example.com"), signers: make(map[spindle.UserName]*testSigner)}
	for _, u := range []spindle.UserName{ann, bob, cat, dan} {
		e.signers[u] = newSigner(t, u)
	}
	e.open()
	return e
}

func (e *env) keys(ctx context.Context, u spindle.UserName) (spindle.PublicKey, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.keyErr[u]; err != nil {
		return "", err
	}
	s, ok := e.signers[u]
	if !ok {
		return "", spindle.E(spindle.NotExist, u, "no such user")
	}
	return s.PublicKey(), nil
}

func (e *env) open() {
	e.t.Helper()
	s, err := New(e.ctx, e.store, Config{Keys: e.keys, KeyHistory: e.history, Host: e.host, Logger: slog.New(slog.DiscardHandler), Repair: e.repair})
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	e.s = s
	if c, ok := e.t.(interface{ Cleanup(func()) }); ok {
		c.Cleanup(func() { s.Close() })
	}
}

// reopen closes the server and opens a new one on the same store.
func (e *env) reopen() {
	e.t.Helper()
	if err := e.s.Close(); err != nil {
		e.t.Fatal(err)
	}
	e.open()
}

func (e *env) as(u spindle.UserName) *dirlog.Client { return e.s.For(e.signers[u]) }

// do fails the test if err is not nil, and returns d.
func (e *env) do(d *spindle.DirEntry, err error) *spindle.DirEntry {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// setup gives ann a tree with a few files.
func (e *env) setup() {
	e.t.Helper()
	c := e.as(ann)
	ctx := e.ctx
	e.do(c.MakeDirectory(ctx, "ann@example.com/"))
	e.do(c.MakeDirectory(ctx, "ann@example.com/docs"))
	e.do(c.Put(ctx, file("ann@example.com/docs/a.txt", 10)))
	e.do(c.MakeDirectory(ctx, "ann@example.com/docs/sub"))
	e.do(c.Put(ctx, file("ann@example.com/docs/sub/b.txt", 3<<20)))
}

// dump returns every entry of user's tree, one line each, as the owner's
// tree holds it.
func (e *env) dump(user spindle.UserName) string {
	v := e.s.view()
	defer v.release()
	l := v.served(user)
	if l == nil || l.t.Root == nil {
		return "(no tree)"
	}
	var lines []string
	dirlog.Walk(l.t.Root, func(n *dirlog.Node) bool {
		d := n.Entry
		lines = append(lines, fmt.Sprintf("%s attr=%d seq=%d size=%d blocks=%d writer=%s link=%s inline=%q", d.Name, d.Attr, d.Sequence, d.Size, len(d.Blocks), d.Writer, d.Link, d.Inline))
		return true
	})
	sort.Strings(lines)
	return fmt.Sprintf("seq=%d head=%s\n%s", l.t.Seq, l.t.Head, strings.Join(lines, "\n"))
}
