package keyraft

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

const (
	ann    spindle.UserName = "ann@example.com"
	bob    spindle.UserName = "bob@example.com"
	annCam spindle.UserName = "ann+camera@example.com"
)

func wantKind(t *testing.T, what string, err error, kind spindle.Kind) {
	t.Helper()
	if !spindle.Match(spindle.E(spindle.Op("keyraft.Put"), kind), err) {
		t.Errorf("%s: got error %v (kind %v), want kind %v", what, err, spindle.KindOf(err), kind)
	}
}

func mustPut(t *testing.T, c *Cluster, u *spindle.User) {
	t.Helper()
	if err := c.Put(ctxT(t), u); err != nil {
		t.Fatalf("Put %s v%d: %v", u.Name, u.Version, err)
	}
}

func sameRecord(a, b *spindle.User) bool {
	return bytes.Equal(keylog.EncodeRecord(a), keylog.EncodeRecord(b))
}

func TestOpenPolicyAndRotation(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	annKey := newSigner(t, ann)
	v1 := register(t, annKey, "12D3KooWHostA")
	mustPut(t, c, v1)
	got, err := c.Lookup(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	if !sameRecord(got, v1) {
		t.Fatalf("Lookup = %+v, want %+v", got, v1)
	}
	// Repeating a Put is safe and changes nothing.
	mustPut(t, c, v1)
	if h := len(mustHistory(t, c, ann)); h != 1 {
		t.Errorf("history after a repeated Put has %d versions, want 1", h)
	}

	// Someone else cannot take the name.
	mallory := newSigner(t, ann)
	wantKind(t, "register a taken name", c.Put(ctx, register(t, mallory)), spindle.Exist)

	// Rotation: the new key is installed by a record signed by the old key.
	annKey2 := newSigner(t, ann)
	v2 := update(t, v1, annKey2.pub, annKey, "12D3KooWHostA", "12D3KooWHostB")
	mustPut(t, c, v2)
	got, _ = c.Lookup(ctx, ann)
	if got.Version != 2 || got.PublicKey != annKey2.pub || len(got.DirHosts) != 2 {
		t.Fatalf("after rotation Lookup = %+v", got)
	}
	// From now on only the new key may change the record.
	wantKind(t, "update signed by the retired key", c.Put(ctx, update(t, v2, annKey.pub, annKey)), spindle.Permission)
	v3 := update(t, v2, annKey2.pub, annKey2, "12D3KooWHostC")
	mustPut(t, c, v3)
	// An old version cannot be replayed, nor a stale update.
	wantKind(t, "replay of version 2", c.Put(ctx, v2), spindle.Invalid)
	wantKind(t, "stale update", c.Put(ctx, update(t, v2, annKey2.pub, annKey2)), spindle.Invalid)

	hist := mustHistory(t, c, ann)
	if len(hist) != 3 || !sameRecord(hist[0], v1) || !sameRecord(hist[1], v2) || !sameRecord(hist[2], v3) {
		t.Errorf("history = %d versions, want v1, v2, v3", len(hist))
	}
}

func mustHistory(t *testing.T, c *Cluster, name spindle.UserName) []*spindle.User {
	t.Helper()
	ps, err := c.History(ctxT(t), name)
	if err != nil {
		t.Fatal(err)
	}
	us, err := keylog.VerifyHistory(ps, name, mustVerifiers(t, c))
	if err != nil {
		t.Fatal(err)
	}
	return us
}

func TestSuffixUsers(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	annKey := newSigner(t, ann)
	camKey := newSigner(t, annCam)

	// Before the base user exists nobody can register a +suffix user.
	rec := &spindle.User{Name: annCam, PublicKey: camKey.pub, Version: 1}
	if err := keylog.Sign(rec, annKey); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "suffix user of an unregistered base", c.Put(ctx, rec), spindle.Permission)

	mustPut(t, c, register(t, annKey))
	// A +suffix user cannot register itself: its base user owns the name.
	wantKind(t, "self-registered suffix user", c.Put(ctx, register(t, camKey)), spindle.Permission)
	// The base user registers it.
	mustPut(t, c, rec)
	got, err := c.Lookup(ctx, annCam)
	if err != nil || got.PublicKey != camKey.pub || got.SignedBy != ann {
		t.Fatalf("Lookup(%s) = %+v, %v", annCam, got, err)
	}
	// Either the suffix user's own key or the base user's may update it.
	v2 := update(t, rec, camKey.pub, camKey, "12D3KooWHostA")
	mustPut(t, c, v2)
	camKey2 := newSigner(t, annCam)
	v3 := update(t, v2, camKey2.pub, annKey)
	mustPut(t, c, v3)
	// Another user may not.
	bobKey := newSigner(t, bob)
	mustPut(t, c, register(t, bobKey))
	wantKind(t, "update signed by another user", c.Put(ctx, update(t, v3, bobKey.pub, bobKey)), spindle.Invalid)
	// A forged base-user signature is refused.
	forged := update(t, v3, bobKey.pub, bobKey)
	forged.SignedBy = ann
	wantKind(t, "forged base-user signature", c.Put(ctx, forged), spindle.Permission)
}

func TestRefusals(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	annKey := newSigner(t, ann)
	v1 := register(t, annKey, "12D3KooWHostA")
	mustPut(t, c, v1)
	before := snapshotBytes(t, c.fsm)

	signed := func(u *spindle.User, s *testSigner) *spindle.User {
		if err := keylog.Sign(u, s); err != nil {
			t.Fatal(err)
		}
		return u
	}
	hosts := func(n int, f func(int) string) []spindle.PeerAddr {
		var hs []spindle.PeerAddr
		for i := range n {
			hs = append(hs, spindle.PeerAddr(f(i)))
		}
		return hs
	}
	bobKey := newSigner(t, bob)
	allKey := newSigner(t, spindle.AllUsers)
	caps := newSigner(t, "bob@Example.COM")
	tests := []struct {
		name string
		u    *spindle.User
		kind spindle.Kind
	}{
		{"nil", nil, spindle.Invalid},
		{"all users", register(t, allKey), spindle.Invalid},
		{"bad name", register(t, newSigner(t, "no-at-sign")), spindle.Invalid},
		{"non-canonical name", register(t, caps), spindle.Invalid},
		{"empty name", register(t, newSigner(t, "")), spindle.Invalid},
		{"unsigned", &spindle.User{Name: bob, PublicKey: bobKey.pub, Version: 1, SignedBy: bob}, spindle.Invalid},
		{"bad key", signed(&spindle.User{Name: bob, PublicKey: "p256:AAAA", Version: 1}, bobKey), spindle.Invalid},
		{"non-canonical key", signed(&spindle.User{Name: bob, PublicKey: bobKey.pub + " ", Version: 1}, bobKey), spindle.Invalid},
		{"version 0", signed(&spindle.User{Name: bob, PublicKey: bobKey.pub}, bobKey), spindle.Invalid},
		{"version 1 with prev", signed(&spindle.User{Name: bob, PublicKey: bobKey.pub, Version: 1, Prev: make([]byte, 32)}, bobKey), spindle.Invalid},
		{"too many hosts", register(t, bobKey, hosts(keylog.MaxDirHosts+1, func(i int) string { return fmt.Sprint("h", i) })...), spindle.Invalid},
		{"long host", register(t, bobKey, spindle.PeerAddr(strings.Repeat("h", keylog.MaxPeerAddrLen+1))), spindle.Invalid},
		{"host with space", register(t, bobKey, "a b"), spindle.Invalid},
		{"empty host", register(t, bobKey, ""), spindle.Invalid},
		{"duplicate host", register(t, bobKey, "h1", "h1"), spindle.Invalid},
		{"signature by another key", signed(&spindle.User{Name: bob, PublicKey: bobKey.pub, Version: 1}, newSigner(t, bob)), spindle.Permission},
		{"signer is a stranger", signed(&spindle.User{Name: bob, PublicKey: bobKey.pub, Version: 1}, annKey), spindle.Invalid},
		{"taken name", register(t, newSigner(t, ann)), spindle.Exist},
		{"version 1 again with the same key", register(t, annKey, "12D3KooWHostB"), spindle.Exist},
		{"update of unregistered", update(t, register(t, bobKey), bobKey.pub, bobKey), spindle.NotExist},
		{"skipped version", func() *spindle.User {
			u := keylog.Next(v1)
			u.Version = 3
			return signed(u, annKey)
		}(), spindle.Invalid},
		{"wrong prev", func() *spindle.User {
			u := keylog.Next(v1)
			u.Prev = bytes.Repeat([]byte{1}, 32)
			return signed(u, annKey)
		}(), spindle.Invalid},
		{"tampered after signing", func() *spindle.User {
			u := update(t, v1, annKey.pub, annKey, "12D3KooWHostA")
			u.DirHosts = []spindle.PeerAddr{"12D3KooWEvil"}
			return u
		}(), spindle.Permission},
		{"huge signature", func() *spindle.User {
			u := register(t, bobKey)
			u.Signature = make([]byte, keylog.MaxSignatureLen+1)
			return u
		}(), spindle.Invalid},
	}
	for _, tt := range tests {
		wantKind(t, tt.name, c.Put(ctx, tt.u), tt.kind)
	}
	if after := snapshotBytes(t, c.fsm); !bytes.Equal(before, after) {
		t.Errorf("refused requests changed the state")
	}
	if _, err := c.Lookup(ctx, bob); !errors.Is(err, spindle.NotExist) {
		t.Errorf("Lookup(bob) = %v, want NotExist", err)
	}
	if _, err := c.Lookup(ctx, "bad"); !errors.Is(err, spindle.Invalid) {
		t.Errorf("Lookup(bad) = %v, want Invalid", err)
	}
}

// TestApplyRefusesWhatTheLeaderWouldRefuse checks the second, deterministic
// check in FSM.Apply, which guards against a request that raced another
// past the leader's first check (or a log written by a faulty leader).
func TestApplyRefusesWhatTheLeaderWouldRefuse(t *testing.T) {
	c := memCluster(t)
	annKey := newSigner(t, ann)
	v1 := register(t, annKey)
	mustPut(t, c, v1)
	// Two updates of version 1 pass the leader's check at once; only the
	// first can apply.
	a := update(t, v1, annKey.pub, annKey, "h1")
	b := update(t, v1, annKey.pub, annKey, "h2")
	for i, u := range []*spindle.User{a, b} {
		f := c.raft.Apply(append([]byte{cmdPut}, keylog.EncodeRecord(u)...), 0)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		err, _ := f.Response().(error)
		if (i == 0) != (err == nil) {
			t.Errorf("apply %d: response %v", i, f.Response())
		}
		if i == 1 && !errors.Is(err, spindle.Invalid) {
			t.Errorf("racing update: %v, want Invalid", err)
		}
	}
	for _, cmd := range [][]byte{nil, {9}, {cmdPut, 1, 2, 3}} {
		f := c.raft.Apply(cmd, 0)
		if err := f.Error(); err != nil {
			t.Fatal(err)
		}
		if err, _ := f.Response().(error); !errors.Is(err, spindle.Invalid) {
			t.Errorf("apply %x: response %v, want Invalid", cmd, f.Response())
		}
	}
	got, _ := c.Lookup(ctxT(t), ann)
	if !sameRecord(got, a) {
		t.Errorf("Lookup = version %d %v", got.Version, got.DirHosts)
	}
}
