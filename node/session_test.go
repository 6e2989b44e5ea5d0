package node

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// dialAnon connects a rawClient to n without signing in.
func dialAnon(t testing.TB, n *Node) *rawClient {
	t.Helper()
	ctx := context.Background()
	h, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	pid, err := p2p.Connect(ctx, h, n.DialAddr())
	if err != nil {
		t.Fatal(err)
	}
	return &rawClient{t: t, h: h, peer: pid}
}

// proof returns credentials for r's connection, as user, signed by s.
func (r *rawClient) proof(user spindle.UserName, s spindle.Signer) *wire.AuthMsg {
	r.t.Helper()
	a := &wire.AuthMsg{User: user, ClientPeer: r.h.ID().String(), NodePeer: r.peer.String(), Time: spindle.Now()}
	var err error
	if a.Sig, err = s.Sign(a.Digest()); err != nil {
		r.t.Fatal(err)
	}
	return a
}

// signedIn reports whether r's session still acts for its user.
func (r *rawClient) signedIn(owner spindle.UserName) bool {
	r.t.Helper()
	_, err := r.call(&wire.Request{Method: wire.DirHead, User: owner})
	var e *spindle.Error
	if errors.As(err, &e) && e.Op == wire.SessionOp {
		return false
	}
	if err != nil {
		r.t.Fatalf("dir.head: %v", err)
	}
	return true
}

// A rotation of a user's key ends every session signed in with the
// replaced key, and the new key signs in.
func TestSessionEndsOnKeyChange(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	_, old := dialWithKeys(t, n, "ann@example.com")
	thief := dialRaw(t, n, old) // Signed in with the key before the rotation.
	owner := dialRaw(t, n, old)
	if !thief.signedIn("ann@example.com") {
		t.Fatal("not signed in before the rotation")
	}

	cur, err := n.kst().keys.Lookup(context.Background(), "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	h, err := n.dir.Head(context.Background(), "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	next := keylog.Next(cur)
	next.PublicKey, next.DirSeq = fresh.PublicKey(), h.Seq
	if err := keylog.Sign(next, old); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.call(&wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(next), Auth: owner.proof("ann@example.com", fresh)}); err != nil {
		t.Fatalf("rotate: %v", err)
	}

	if thief.signedIn("ann@example.com") {
		t.Error("a session signed in with the replaced key still acts after the rotation")
	}
	if owner.signedIn("ann@example.com") {
		t.Error("the rotating session still acts: every session of the old record must end")
	}
	if _, err := thief.call(&wire.Request{Method: wire.Auth, Auth: thief.proof("ann@example.com", old)}); !errors.Is(err, spindle.Permission) {
		t.Errorf("sign-in with the replaced key: %v, want Permission", err)
	}
	if _, err := owner.call(&wire.Request{Method: wire.Auth, Auth: owner.proof("ann@example.com", fresh)}); err != nil {
		t.Fatalf("sign-in with the new key: %v", err)
	}
	if !owner.signedIn("ann@example.com") {
		t.Error("not signed in with the new key")
	}
}

// A session ends after Config.SessionTTL; the real client signs in again
// by itself and carries on.
func TestSessionExpires(t *testing.T) {
	const ttl = 300 * time.Millisecond
	ctx := context.Background()
	n, err := New(ctx, Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: testLogger(t), SessionTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c, keys := dialWithKeys(t, n, "ann@example.com")
	r := dialRaw(t, n, keys)
	start := time.Now()
	if !r.signedIn("ann@example.com") {
		t.Fatal("not signed in")
	}
	time.Sleep(ttl - time.Since(start) + 50*time.Millisecond)
	if r.signedIn("ann@example.com") {
		t.Errorf("session still acts %v after sign-in, TTL %v", time.Since(start), ttl)
	}
	if _, err := c.Put(ctx, ann("after-expiry"), bytes.NewReader([]byte("the client signs in again")), 0, nil); err != nil {
		t.Fatalf("put after the session expired: %v", err)
	}
	mustRead(t, c, ann("after-expiry"), []byte("the client signs in again"))
}

// key.put is served only to a peer that proves, over its own connection,
// that it holds the key the record registers: a record replayed by a
// stranger, or sent with another key's or another connection's proof, is
// refused, and the name stays free.
func TestKeyPutNeedsPossession(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, _, err := pack.Generate("new@example.com")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := pack.Generate("new@example.com")
	if err != nil {
		t.Fatal(err)
	}
	rec := &spindle.User{Name: "new@example.com", PublicKey: keys.PublicKey(), Version: 1}
	if err := keylog.Sign(rec, keys); err != nil {
		t.Fatal(err)
	}
	data := keylog.EncodeRecord(rec)
	r := dialAnon(t, n)
	elsewhere := dialAnon(t, n)
	for _, tc := range []struct {
		name string
		auth *wire.AuthMsg
	}{
		{"no proof", nil},
		{"proof by another key", r.proof("new@example.com", other)},
		{"proof made for another connection", elsewhere.proof("new@example.com", keys)},
		{"proof for another name", r.proof("old@example.com", keys)},
	} {
		if _, err := r.call(&wire.Request{Method: wire.KeyPut, Data: data, Auth: tc.auth}); !errors.Is(err, spindle.Permission) {
			t.Errorf("%s: %v, want Permission", tc.name, err)
		}
	}
	if _, err := n.kst().keys.Lookup(context.Background(), "new@example.com"); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("name taken without proof: %v", err)
	}
	if _, err := r.call(&wire.Request{Method: wire.KeyPut, Data: data, Auth: r.proof("new@example.com", keys)}); err != nil {
		t.Fatalf("with proof: %v", err)
	}
	if _, err := n.kst().keys.Lookup(context.Background(), "new@example.com"); err != nil {
		t.Fatalf("not registered: %v", err)
	}
}

// key.put is limited per peer: past the limit a peer is refused
// (Transient) while other peers are still served.
func TestKeyPutRateLimited(t *testing.T) {
	ctx := context.Background()
	n, err := New(ctx, Config{Home: t.TempDir(), Logger: testLogger(t), KeyPutLimit: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	r := dialAnon(t, n)
	for i := 0; i < 3; i++ {
		// Junk is counted too: the limit comes before any work.
		if _, err := r.call(&wire.Request{Method: wire.KeyPut, Data: []byte("junk")}); !errors.Is(err, spindle.Invalid) {
			t.Fatalf("put %d: %v, want Invalid", i+1, err)
		}
	}
	if _, err := r.call(&wire.Request{Method: wire.KeyPut, Data: []byte("junk")}); !errors.Is(err, spindle.Transient) {
		t.Fatalf("put past the limit: %v, want Transient", err)
	}
	if _, err := dialAnon(t, n).call(&wire.Request{Method: wire.KeyPut, Data: []byte("junk")}); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("another peer: %v, want Invalid (served)", err)
	}
}

// The limiter's memory is bounded: it tracks at most max peers, refuses
// newcomers while every tracked window runs, and makes room once they pass.
func TestPeerLimiterBounded(t *testing.T) {
	l := newPeerLimiter(2, time.Minute, 3)
	now := time.Unix(1e9, 0)
	peers := []peer.ID{"a", "b", "c", "d"}
	for _, p := range peers[:3] {
		for range 2 {
			if !l.allow(p, now) {
				t.Fatalf("peer %s refused within its limit", p)
			}
		}
		if l.allow(p, now) {
			t.Fatalf("peer %s allowed past its limit", p)
		}
	}
	if l.allow("d", now) {
		t.Error("a fourth peer tracked beyond the bound")
	}
	if got := l.size(); got != 3 {
		t.Errorf("tracking %d peers, bound 3", got)
	}
	later := now.Add(time.Minute)
	if !l.allow("d", later) {
		t.Error("a new peer refused after the windows passed")
	}
	if !l.allow("a", later) {
		t.Error("a peer refused in a new window")
	}
	if got := l.size(); got > 3 {
		t.Errorf("tracking %d peers, bound 3", got)
	}
}

// A rotation must not cut off entries its tree already holds: a record
// replacing the key with a DirSeq behind the tree's head on the node is
// refused, and one at the head is taken.
func TestRotationCutoffNotBehindHead(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	c, old := dialWithKeys(t, n, "ann@example.com")
	ctx := context.Background()
	if _, err := c.Put(ctx, ann("a"), bytes.NewReader([]byte("a")), 0, nil); err != nil {
		t.Fatal(err)
	}
	h, err := n.dir.Head(ctx, "ann@example.com")
	if err != nil || h.Seq < 1 {
		t.Fatalf("head %+v, %v", h, err)
	}
	r := dialRaw(t, n, old)
	cur, err := n.kst().keys.Lookup(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	fresh, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	rotation := func(dirSeq int64) error {
		next := keylog.Next(cur)
		next.PublicKey, next.DirSeq = fresh.PublicKey(), dirSeq
		if err := keylog.Sign(next, old); err != nil {
			t.Fatal(err)
		}
		_, err := r.call(&wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(next), Auth: r.proof("ann@example.com", fresh)})
		return err
	}
	if err := rotation(h.Seq - 1); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("rotation behind the head: %v, want Invalid", err)
	}
	if err := rotation(h.Seq); err != nil {
		t.Fatalf("rotation at the head: %v", err)
	}
}

// A watch ends with the session it was opened in: after the expiry, the
// next change ends it instead of being delivered. The client's watch
// then leaves no goroutine behind, though its context lives on.
func TestWatchEndsWithSession(t *testing.T) {
	const ttl = 500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: testLogger(t), SessionTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	watcher, keys := dialWithKeys(t, n, "ann@example.com")
	start := time.Now()
	ch, err := watcher.Watch(ctx, ann(""), 0)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl - time.Since(start) + 100*time.Millisecond)
	// Another client of ann's, with a session of its own, writes.
	c2, err := client.Dial(ctx, client.Config{Keys: keys, Node: n.DialAddr(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Put(ctx, ann("after"), bytes.NewReader([]byte("x")), 0, nil); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case ev, ok := <-ch:
			if !ok || ev.Err != nil {
				// Ended, with the reason or without.
				waitGone(t, "spindle.dev/client.(*remote).Watch")
				return
			}
			if ev.Entry != nil && ev.Entry.Name == ann("after") {
				t.Fatalf("event delivered to a watch whose session expired %v ago", time.Since(start)-ttl)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("watch neither ended nor delivered")
		}
	}
}
