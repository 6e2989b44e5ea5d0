package client

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A base user registers its +suffix user, which then signs up, writes
// and reads as a user of its own; nobody else can register it, neither
// through SignupSuffixed nor with a record of their own making.
func TestSignupSuffixed(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ctx := context.Background()
	ann := dialAs(t, n, "ann@example.com")
	bob := dialAs(t, n, "bob@example.com")

	camKeys, _, err := pack.Generate("ann+camera@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.SignupSuffixed(ctx, camKeys); err != nil {
		t.Fatalf("ann registers ann+camera: %v", err)
	}
	if err := ann.SignupSuffixed(ctx, camKeys); err != nil {
		t.Errorf("registering ann+camera again with the same key: %v", err)
	}
	other, _, _ := pack.Generate("ann+camera@example.com")
	if err := ann.SignupSuffixed(ctx, other); !errors.Is(err, spindle.Exist) {
		t.Errorf("registering ann+camera with another key: %v, want Exist", err)
	}
	u, err := bob.LookupUser(ctx, "ann+camera@example.com")
	if err != nil || u.PublicKey != camKeys.PublicKey() || u.SignedBy != "ann@example.com" {
		t.Fatalf("ann+camera's record = %+v, %v; want its key, signed by ann", u, err)
	}

	cam, err := Dial(ctx, Config{Keys: camKeys, Node: n.DialAddr(), Logger: testLogger(t), KeyLog: filepath.Join(t.TempDir(), "keylog")})
	if err != nil {
		t.Fatal(err)
	}
	defer cam.Close()
	if err := cam.Signup(ctx); err != nil {
		t.Fatalf("ann+camera signs up: %v", err)
	}
	if _, err := cam.Put(ctx, "@/shot.jpg", bytes.NewReader([]byte("pixels")), 0, nil); err != nil {
		t.Fatal(err)
	}
	mustRead(t, cam, "ann+camera@example.com/shot.jpg", []byte("pixels"))

	// bob cannot register a suffix user of ann's.
	phone, _, _ := pack.Generate("ann+phone@example.com")
	if err := bob.SignupSuffixed(ctx, phone); !errors.Is(err, spindle.Invalid) {
		t.Errorf("bob registers ann+phone: %v, want Invalid", err)
	}
	// Nor by sending a record himself: signed by bob, or by the new key
	// itself, and with proof that he holds that key, the node and the
	// key cluster refuse both.
	for _, signer := range []spindle.Signer{bob.keys, phone} {
		rec := &spindle.User{Name: "ann+phone@example.com", PublicKey: phone.PublicKey(), DirHosts: []spindle.PeerAddr{p2p.PeerAddrOf(bob.svc.peer)}, Version: 1}
		if err := keylog.Sign(rec, signer); err != nil {
			t.Fatal(err)
		}
		a, err := bob.possession(rec.Name, phone)
		if err != nil {
			t.Fatal(err)
		}
		_, err = bob.svc.call(ctx, &wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(rec), Auth: a})
		if !errors.Is(err, spindle.Permission) && !errors.Is(err, spindle.Invalid) {
			t.Errorf("bob puts ann+phone's record signed by %s: %v, want a refusal", signer.UserName(), err)
		}
	}
	if _, err := bob.LookupUser(ctx, "ann+phone@example.com"); !errors.Is(err, spindle.NotExist) {
		t.Errorf("ann+phone after bob's tries: %v, want NotExist", err)
	}
}
