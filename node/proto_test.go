package node

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A hostile or broken peer gets a clear error for every malformed request,
// and the node goes on serving others.
func TestHostileRequests(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	ann := dialAs(t, n, "ann@example.com")
	ctx := context.Background()
	h, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	pid, err := p2p.Connect(ctx, h, n.DialAddr())
	if err != nil {
		t.Fatal(err)
	}
	call := func(req []byte) error {
		out, err := p2p.Call(ctx, h, pid, wire.ClientProtocol, req, wire.MaxMessage)
		if err != nil {
			return err
		}
		var resp wiretest.Response
		if err := wire.Decode(out, &resp); err != nil {
			return err
		}
		if resp.Err != nil {
			return spindle.UnmarshalError(resp.Err)
		}
		return nil
	}
	enc := func(r *wiretest.Request) []byte {
		b, err := wire.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	forged := &wire.AuthMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now(), Sig: []byte{1, 2, 3}}
	other, _, _ := pack.Generate("ann@example.com")
	stolen := &wire.AuthMsg{User: "ann@example.com", ClientPeer: "12D3KooWSomeoneElse", NodePeer: n.host.ID().String(), Time: spindle.Now()}
	stolen.Sig, _ = other.Sign(stolen.Digest())
	stale := &wire.AuthMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now() - spindle.Time(time.Hour)}
	wrongKey := &wire.AuthMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now()}
	wrongKey.Sig, _ = other.Sign(wrongKey.Digest())
	raw := func(method string, body []byte) []byte {
		b, err := wire.Encode(&wire.Request{Method: method, Body: body})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	wrongType, _ := wire.Encode(map[int]int{2: 7}) // A user name that is a number.

	for _, tc := range []struct {
		name string
		req  []byte
		kind spindle.Kind
	}{
		{"garbage", []byte("\xff\x00garbage"), spindle.Invalid},
		{"empty", nil, spindle.Invalid},
		{"unknown method", enc(&wiretest.Request{Method: "dir.explode"}), spindle.Permission},
		{"read without signing in", enc(&wiretest.Request{Method: wire.DirLookup, Name: "ann@example.com/"}), spindle.Permission},
		{"append without signing in", enc(&wiretest.Request{Method: wire.DirAppend, Data: []byte("x")}), spindle.Permission},
		{"forged signature", enc(&wiretest.Request{Method: wire.Auth, Auth: forged}), spindle.Permission},
		{"credentials of another peer", enc(&wiretest.Request{Method: wire.Auth, Auth: stolen}), spindle.Permission},
		{"stale credentials", enc(&wiretest.Request{Method: wire.Auth, Auth: stale}), spindle.Permission},
		{"signed with another key", enc(&wiretest.Request{Method: wire.Auth, Auth: wrongKey}), spindle.Permission},
		{"no credentials", enc(&wiretest.Request{Method: wire.Auth}), spindle.Invalid},
		{"bad user name", enc(&wiretest.Request{Method: wire.KeyLookup, User: "not a user"}), spindle.Invalid},
		{"malformed key record", enc(&wiretest.Request{Method: wire.KeyPut, Data: []byte("junk")}), spindle.Invalid},
		{"proof for a bad user name", enc(&wiretest.Request{Method: wire.KeyProof, User: "not a user"}), spindle.Invalid},
		{"proof for an unknown user", enc(&wiretest.Request{Method: wire.KeyProof, User: "nobody@example.com"}), spindle.NotExist},
		{"history of a bad user name", enc(&wiretest.Request{Method: wire.KeyProofs, User: "no/pe@example.com"}), spindle.Invalid},
		{"consistency backwards", enc(&wiretest.Request{Method: wire.KeyConsistency, Seq: 2, Size: 1}), spindle.Invalid},
		{"consistency beyond the log", enc(&wiretest.Request{Method: wire.KeyConsistency, Seq: 1, Size: 1 << 40}), spindle.Invalid},
		{"consistency from a negative size", enc(&wiretest.Request{Method: wire.KeyConsistency, Seq: -5, Size: 1}), spindle.Invalid},
		{"head without signing in", enc(&wiretest.Request{Method: wire.DirHead, User: "ann@example.com"}), spindle.Permission},
		{"body that is no CBOR", raw(wire.KeyLookup, []byte("\xff\x00")), spindle.Invalid},
		{"body of the wrong shape", raw(wire.KeyLookup, wrongType), spindle.Invalid},
		{"operator method", enc(&wiretest.Request{Method: wire.KeyJoin}), spindle.Permission},
	} {
		err := call(tc.req)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: got %v, want kind %q", tc.name, err, tc.kind)
		}
	}
	// An oversized request is refused by the frame limit.
	if err := call(bytes.Repeat([]byte{0}, wire.MaxMessage+1)); err == nil {
		t.Error("oversized request accepted")
	}
	// The node still serves ann.
	if _, err := ann.Put(ctx, "@/still", bytes.NewReader([]byte("fine")), 0, nil); err != nil {
		t.Fatalf("node stopped serving after hostile requests: %v", err)
	}
}

// The client protocol has no operator methods, and the operator protocol
// only those; each method's entry is its handler's.
func TestMethodTables(t *testing.T) {
	for name, m := range clientMethods {
		if m.who == operator {
			t.Errorf("client protocol method %s is for the operator", name)
		}
		if m.serve == nil {
			t.Errorf("client protocol method %s has no handler", name)
		}
		if m.anon && !m.dir {
			t.Errorf("method %s is answered for the anonymous reader but not by a dir host", name)
		}
	}
	for _, name := range []string{wire.KeyJoin, wire.KeyLeave, wire.NodeBackup} {
		if _, ok := clientMethods[name]; ok {
			t.Errorf("client protocol has operator method %s", name)
		}
	}
	for name, m := range operatorMethods {
		if m.who != operator || m.serve == nil || m.dir || m.key {
			t.Errorf("operator method %s: %+v", name, m)
		}
	}
}

// A node stores trees and blocks only for the writers it admits.
func TestWritersAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), Writers: []string{"*@example.com"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	dialAs(t, n, "ann@example.com")
	keys, _, _ := pack.Generate("eve@evil.org")
	eve, err := client.Dial(ctx, client.Config{Keys: keys, Node: n.DialAddr()})
	if err != nil {
		t.Fatal(err)
	}
	defer eve.Close()
	if err := eve.Signup(ctx); !errors.Is(err, spindle.Permission) {
		t.Fatalf("eve's signup created a tree on a node that does not admit her: %v", err)
	}
	// Her key is registered, but the node that refused her is not her dir host.
	if u, err := eve.LookupUser(ctx, "eve@evil.org"); err != nil || u.PublicKey != keys.PublicKey() || len(u.DirHosts) != 0 {
		t.Fatalf("eve's record after a refused signup: %+v, %v", u, err)
	}
	if _, err := eve.Put(ctx, "eve@evil.org/x", bytes.NewReader([]byte("x")), 0, nil); !errors.Is(err, spindle.Permission) && !errors.Is(err, spindle.NotExist) {
		t.Fatalf("eve stored a file: %v", err)
	}
	if _, err := New(ctx, Config{Writers: []string{"not a user"}}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("bad -writers entry: %v, want Invalid", err)
	}
}

// A node decodes whatever a peer sends as an envelope and then as the
// body of the method it names: bytes that do not decode are refused with
// Invalid, and anything else gets an answer that decodes.
func FuzzServeClient(f *testing.F) {
	for name := range clientMethods {
		for _, body := range [][]byte{nil, {0xa0}, {0xa1, 0x02, 0x61, 'x'}, {0xff}} {
			b, _ := wire.Encode(&wire.Request{Method: name, Body: body})
			f.Add(b)
		}
	}
	n := startNode(f, f.TempDir())
	defer n.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := n.ServeClient(ctx, "fuzzer", data)
		if err != nil {
			if !errors.Is(err, spindle.Invalid) {
				t.Fatalf("error of kind %v", spindle.KindOf(err))
			}
			return
		}
		var resp wire.Response
		if err := wire.Decode(out, &resp); err != nil {
			t.Fatalf("answer does not decode: %v", err)
		}
	})
}
