package node

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"spindle.dev"
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
	pid, err := p2p.Connect(ctx, h, orderAddrs(n.Addrs())[0])
	if err != nil {
		t.Fatal(err)
	}
	call := func(req []byte) error {
		out, err := p2p.Call(ctx, h, pid, ClientProtocol, req, maxMessage)
		if err != nil {
			return err
		}
		var resp response
		if err := decode(out, &resp); err != nil {
			return err
		}
		if resp.Err != nil {
			return spindle.UnmarshalError(resp.Err)
		}
		return nil
	}
	enc := func(r *request) []byte {
		b, err := encode(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	forged := &authMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now(), Sig: []byte{1, 2, 3}}
	other, _, _ := pack.Generate("ann@example.com")
	stolen := &authMsg{User: "ann@example.com", ClientPeer: "12D3KooWSomeoneElse", NodePeer: n.host.ID().String(), Time: spindle.Now()}
	stolen.Sig, _ = other.Sign(stolen.digest())
	stale := &authMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now() - spindle.Time(time.Hour)}
	wrongKey := &authMsg{User: "ann@example.com", ClientPeer: h.ID().String(), NodePeer: n.host.ID().String(), Time: spindle.Now()}
	wrongKey.Sig, _ = other.Sign(wrongKey.digest())

	for _, tc := range []struct {
		name string
		req  []byte
		kind spindle.Kind
	}{
		{"garbage", []byte("\xff\x00garbage"), spindle.Invalid},
		{"empty", nil, spindle.Invalid},
		{"unknown method", enc(&request{Method: "dir.explode"}), spindle.Permission},
		{"read without signing in", enc(&request{Method: mDirLookup, Name: "ann@example.com/"}), spindle.Permission},
		{"append without signing in", enc(&request{Method: mDirAppend, Data: []byte("x")}), spindle.Permission},
		{"forged signature", enc(&request{Method: mAuth, Auth: forged}), spindle.Permission},
		{"credentials of another peer", enc(&request{Method: mAuth, Auth: stolen}), spindle.Permission},
		{"stale credentials", enc(&request{Method: mAuth, Auth: stale}), spindle.Permission},
		{"signed with another key", enc(&request{Method: mAuth, Auth: wrongKey}), spindle.Permission},
		{"no credentials", enc(&request{Method: mAuth}), spindle.Invalid},
		{"bad user name", enc(&request{Method: mKeyLookup, User: "not a user"}), spindle.Invalid},
		{"malformed key record", enc(&request{Method: mKeyPut, Data: []byte("junk")}), spindle.Invalid},
		{"proof for a bad user name", enc(&request{Method: mKeyProof, User: "not a user"}), spindle.Invalid},
		{"proof for an unknown user", enc(&request{Method: mKeyProof, User: "nobody@example.com"}), spindle.NotExist},
		{"history of a bad user name", enc(&request{Method: mKeyProofs, User: "no/pe@example.com"}), spindle.Invalid},
		{"consistency backwards", enc(&request{Method: mKeyConsistency, Seq: 2, Size: 1}), spindle.Invalid},
		{"consistency beyond the log", enc(&request{Method: mKeyConsistency, Seq: 1, Size: 1 << 40}), spindle.Invalid},
		{"consistency from a negative size", enc(&request{Method: mKeyConsistency, Seq: -5, Size: 1}), spindle.Invalid},
		{"head without signing in", enc(&request{Method: mDirHead, User: "ann@example.com"}), spindle.Permission},
	} {
		err := call(tc.req)
		if !errors.Is(err, tc.kind) {
			t.Errorf("%s: got %v, want kind %q", tc.name, err, tc.kind)
		}
	}
	// An oversized request is refused by the frame limit.
	if err := call(bytes.Repeat([]byte{0}, maxMessage+1)); err == nil {
		t.Error("oversized request accepted")
	}
	// The node still serves ann.
	if _, err := ann.Put(ctx, "@/still", bytes.NewReader([]byte("fine")), 0, nil); err != nil {
		t.Fatalf("node stopped serving after hostile requests: %v", err)
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
	eve, err := Dial(ctx, ClientConfig{Keys: keys, Node: orderAddrs(n.Addrs())[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer eve.Close()
	if err := eve.Signup(ctx); !errors.Is(err, spindle.Permission) {
		t.Fatalf("eve's signup created a tree on a node that does not admit her: %v", err)
	}
	if _, err := eve.Put(ctx, "eve@evil.org/x", bytes.NewReader([]byte("x")), 0, nil); !errors.Is(err, spindle.Permission) {
		t.Fatalf("eve stored a file: %v", err)
	}
	if _, err := New(ctx, Config{Writers: []string{"not a user"}}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("bad -writers entry: %v, want Invalid", err)
	}
}

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []*request{
		{Method: mDirLookup, Name: "ann@example.com/x"},
		{Method: mAuth, Auth: &authMsg{User: "ann@example.com", Time: 1, Sig: []byte{1}}},
		{Method: mDirAppend, Data: []byte{0, 1, 2}},
	} {
		b, _ := encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[request])
}

// The client decodes what its node answers, which may be hostile.
func FuzzDecodeResponse(f *testing.F) {
	for _, r := range []*response{
		{Entry: &spindle.DirEntry{Name: "ann@example.com/x"}},
		{Users: []spindle.UserName{"ann@example.com"}, Keys: []spindle.PublicKey{"k"}},
		{Data: []byte("SPKP\x01"), Proofs: [][]byte{{1, 2}}},
		{Err: []byte{1}, Delete: true},
	} {
		b, _ := encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[response])
}

// roundTrip checks that data either fails to decode as a T with an Invalid
// error, or decodes to a value whose encoding decodes again.
func roundTrip[T any](t *testing.T, data []byte) {
	var v T
	if err := decode(data, &v); err != nil {
		if !errors.Is(err, spindle.Invalid) {
			t.Fatalf("decode error of kind %v", spindle.KindOf(err))
		}
		return
	}
	b, err := encode(&v)
	if err != nil {
		t.Fatal(err)
	}
	var again T
	if err := decode(b, &again); err != nil {
		t.Fatalf("re-decoding an encoded %T: %v", v, err)
	}
}
