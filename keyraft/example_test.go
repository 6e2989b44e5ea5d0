package keyraft_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"fmt"
	"log"
	"log/slog"
	"net"
	"time"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
)

// signer is a spindle.Signer for the example; Spindle's clients use the
// keys made by spin init.
type signer struct {
	name spindle.UserName
	key  *ecdsa.PrivateKey
}

func newSigner(name spindle.UserName) *signer {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	return &signer{name, key}
}

func (s *signer) UserName() spindle.UserName { return s.name }
func (s *signer) PublicKey() spindle.PublicKey {
	k, _ := spindle.FormatPublicKey(&s.key.PublicKey)
	return k
}
func (s *signer) Sign(digest []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.key, digest)
}

// A one-member cluster: a user registers, rotates their key, and a client
// checks the record against the transparency log.
func Example() {
	ctx := context.Background()
	// Node passes a libp2p stream listener and dialer; here, loopback TCP.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	dial := func(ctx context.Context, id string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	c, err := keyraft.Open(ctx, keyraft.Config{
		ID: "12D3KooWExample", Listener: ln, Dial: dial, Bootstrap: true,
		Logger:           slog.New(slog.DiscardHandler),
		HeartbeatTimeout: 100 * time.Millisecond, // One machine: elect quickly.
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Register: version 1, signed by the user's own key.
	ann := newSigner("ann@example.com")
	rec := &spindle.User{Name: "ann@example.com", PublicKey: ann.PublicKey(), DirHosts: []spindle.PeerAddr{"12D3KooWHome"}, Version: 1}
	if err := keylog.Sign(rec, ann); err != nil {
		log.Fatal(err)
	}
	if err := c.Put(ctx, rec); err != nil {
		log.Fatal(err)
	}

	// Rotate: the next version carries the new key and is signed by the old.
	ann2 := newSigner("ann@example.com")
	next := keylog.Next(rec)
	next.PublicKey = ann2.PublicKey()
	if err := keylog.Sign(next, ann); err != nil {
		log.Fatal(err)
	}
	if err := c.Put(ctx, next); err != nil {
		log.Fatal(err)
	}

	// A client trusts the member's key and checks every lookup.
	chk, err := keylog.NewChecker(c.VerifierKey())
	if err != nil {
		log.Fatal(err)
	}
	p, err := c.LookupProof(ctx, "ann@example.com")
	if err != nil {
		log.Fatal(err)
	}
	u, err := chk.VerifyLookup(ctx, p, "ann@example.com", c)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u.Name, "version", u.Version, "new key:", u.PublicKey == ann2.PublicKey())
	fmt.Println("log records:", chk.Tree().N)
	// Output:
	// ann@example.com version 2 new key: true
	// log records: 2
}
