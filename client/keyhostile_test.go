package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// Hostile answers to a client's key lookups, from a node that sits between
// it and the key cluster, are each refused with an Integrity error that
// says what is wrong, and change nothing the client keeps: its key log (the
// newest head and the versions seen), and the record it takes afterwards
// from an honest answer. The cluster's own refusals of hostile requests (an
// update signed by the wrong key, a second registration of a taken name)
// are checked end to end here too; keyraft's TestRefusals checks that its
// state does not change.
func TestKeyAnswersHostile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	n := startNode(t, home)
	defer n.Close()
	dialAs(t, n, "bob@example.com")
	dialAs(t, n, "carol@example.com")
	annKeys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ann := dialKeys(ctx, t, n, annKeys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	bob, err := ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	carolProof := func() []byte {
		p, err := ann.svc.call(ctx, &wire.Request{Method: wire.KeyProof, User: "carol@example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return p.Data
	}()

	// A made-up log, larger than the true one, signed with the cluster's
	// own note key: its head does not extend the heads ann has seen.
	var filler []*spindle.User
	filler = append(filler, bob)
	for range int(ann.keyLog.chk().Tree().N) + 2 {
		k, _, err := pack.Generate("mallory@example.com")
		if err != nil {
			t.Fatal(err)
		}
		u := &spindle.User{Name: "mallory@example.com", PublicKey: k.PublicKey(), Version: 1}
		if err := keylog.Sign(u, k); err != nil {
			t.Fatal(err)
		}
		filler = append(filler, u)
	}
	rogue := newRogueLog(t, home, filler...)
	// A note key of the cluster's name that is not a member's, and one of
	// another name.
	stranger := func(name string) note.Signer {
		skey, _, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	memberName, _, _ := strings.Cut(n.VerifierKey(), "+")
	resign := func(s note.Signer) func([]byte) []byte {
		return func(data []byte) []byte {
			p, err := keylog.UnmarshalProof(data)
			if err != nil {
				t.Fatal(err)
			}
			text, _, _ := bytes.Cut(p.Head, []byte("\n\n"))
			if p.Head, err = note.Sign(&note.Note{Text: string(text) + "\n"}, s); err != nil {
				t.Fatal(err)
			}
			out, _ := p.MarshalBinary()
			return out
		}
	}

	var lies sync.Mutex
	var lie func(req *wire.Request) ([]byte, bool) // The lie told, if any.
	setLie := func(f func(req *wire.Request) ([]byte, bool)) {
		lies.Lock()
		lie = f
		lies.Unlock()
	}
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wire.Request
		lies.Lock()
		lie := lie
		lies.Unlock()
		if lie != nil && wire.Decode(data, &req) == nil {
			if out, ok := lie(&req); ok {
				return out, nil
			}
		}
		return n.ServeClient(ctx, remote, data)
	})
	// proofLie answers bob's proved lookup with change applied to the
	// true answer.
	proofLie := func(change func([]byte) []byte) func(req *wire.Request) ([]byte, bool) {
		return func(req *wire.Request) ([]byte, bool) {
			if req.Method != wire.KeyProof || req.User != "bob@example.com" {
				return nil, false
			}
			p, err := n.ServeClient(ctx, "", mustEncode(t, req))
			if err != nil {
				t.Fatal(err)
			}
			var resp wire.Response
			if err := wire.Decode(p, &resp); err != nil {
				t.Fatal(err)
			}
			resp.Data = change(resp.Data)
			return mustEncode(t, &resp), true
		}
	}
	for _, tc := range []struct {
		name string
		lie  func(req *wire.Request) ([]byte, bool)
		want string // In the error.
	}{
		{"record that does not match its proof", proofLie(func(data []byte) []byte {
			p, _ := keylog.UnmarshalProof(data)
			c, _ := keylog.UnmarshalProof(carolProof)
			p.Record = c.Record
			out, _ := p.MarshalBinary()
			return out
		}), "is not in the tree"},
		{"record of another user with its own proof", proofLie(func([]byte) []byte { return carolProof }), "proof is for the record of carol@example.com"},
		{"head signed by a non-member with a member's name", proofLie(resign(stranger(memberName))), "tree head"},
		{"head signed by a stranger", proofLie(resign(stranger("spindle-keyraft/stranger"))), "tree head"},
		{"newer head inconsistent with the older", func(req *wire.Request) ([]byte, bool) {
			switch req.Method {
			case wire.KeyProof:
				if req.User == "bob@example.com" {
					return mustEncode(t, &wire.Response{Data: rogue.proof(t, 0)}), true
				}
			case wire.KeyConsistency:
				p, err := tlog.ProveTree(req.Size, req.Seq, rogue)
				if err != nil {
					t.Fatal(err)
				}
				return mustEncode(t, &wire.Response{Data: keylog.MarshalTreeProof(p)}), true
			}
			return nil, false
		}, "transparency log rewritten"},
		{"garbage", proofLie(func([]byte) []byte { return []byte("SPKP\x01garbage") }), "malformed proof"},
	} {
		before := ann.keyLog.content(keyLogFile{})
		ann.mu.Lock()
		ann.userKeys = map[spindle.UserName]cachedUser{}
		ann.mu.Unlock()
		setLie(tc.lie)
		_, err := ann.LookupUser(ctx, "bob@example.com")
		setLie(nil)
		if !errors.Is(err, spindle.Integrity) && !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: lookup = %v, want an Integrity error saying %q", tc.name, err, tc.want)
		}
		if after := ann.keyLog.content(keyLogFile{}); !bytes.Equal(before, after) {
			t.Errorf("%s: the key log changed:\n%s\nthen\n%s", tc.name, before, after)
		}
		if u, err := ann.LookupUser(ctx, "bob@example.com"); err != nil || u.PublicKey != bob.PublicKey {
			t.Errorf("%s: honest lookup afterwards: %v", tc.name, err)
		}
	}

	// An update of ann's record signed by a key that is not hers, through
	// the node: refused, and her record stays as it was.
	thief, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	cur, err := ann.LookupUser(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	h, err := ann.svc.Head(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	u := keylog.Next(cur)
	u.PublicKey = thief.PublicKey()
	u.DirSeq = h.Seq // As the node wants of a key change, so that the key decides.
	if err := keylog.Sign(u, thief); err != nil {
		t.Fatal(err)
	}
	th := dialAs(t, n, "mallory@example.com")
	put := func(u *spindle.User) error {
		a, err := th.possession(u.Name, thief)
		if err != nil {
			t.Fatal(err)
		}
		_, err = th.svc.call(ctx, &wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(u), Auth: a})
		return err
	}
	if err := put(u); !errors.Is(err, spindle.Permission) {
		t.Errorf("update signed by the wrong key: %v, want Permission", err)
	}
	// A second registration of the taken name, with the thief's key.
	second := &spindle.User{Name: "ann@example.com", PublicKey: thief.PublicKey(), Version: 1}
	if err := keylog.Sign(second, thief); err != nil {
		t.Fatal(err)
	}
	if err := put(second); !errors.Is(err, spindle.Exist) {
		t.Errorf("second registration of a taken name: %v, want Exist", err)
	}
	if now, err := ann.LookupUser(ctx, "ann@example.com"); err != nil || now.Version != cur.Version || now.PublicKey != annKeys.PublicKey() {
		t.Errorf("after refused changes, ann's record is %+v, %v; want version %d with her key", now, err, cur.Version)
	}
}

func mustEncode(t *testing.T, v any) []byte {
	t.Helper()
	b, err := wire.Encode(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
