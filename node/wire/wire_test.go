package wire

import (
	"errors"
	"testing"

	"spindle.dev"
)

func FuzzDecodeRequest(f *testing.F) {
	for _, r := range []*Request{
		{Method: DirLookup, Name: "ann@example.com/x"},
		{Method: Auth, Auth: &AuthMsg{User: "ann@example.com", Time: 1, Sig: []byte{1}}},
		{Method: DirAppend, Data: []byte{0, 1, 2}},
		{Method: KeyPut, Data: []byte{0, 1, 2}, Grant: []byte{3, 4}},
		{Method: KeyChange, Data: []byte("SPKC\x01")},
		{Method: DirLookup, Name: "ann@example.com/x", To: "12D3KooW", Auth: &AuthMsg{User: "ann@example.com", NodePeer: "12D3KooW", Time: 1, Sig: []byte{1}, Req: []byte{2}, Nonce: []byte{3}}},
	} {
		b, _ := Encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[Request])
}

// A dir host recomputes the digest of a signed request from the request
// it decoded: whatever bytes arrive, the digest of what they decode to is
// the digest of that request encoded and decoded again, so that a client
// and a host always agree on what was signed.
func FuzzSignedDigest(f *testing.F) {
	for _, r := range []*Request{
		{Method: DirLookup, Name: "ann@example.com/x", To: "12D3KooW", Auth: &AuthMsg{User: "ann@example.com", Req: []byte{2}, Nonce: []byte{3}}},
		{Method: DirBatch, Batch: [][]byte{{1}, {2}}, To: "p"},
	} {
		b, _ := Encode(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Request
		if Decode(data, &r) != nil {
			return
		}
		d1, err := SignedDigest(&r)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Encode(&r)
		if err != nil {
			t.Fatal(err)
		}
		var again Request
		if err := Decode(b, &again); err != nil {
			t.Fatal(err)
		}
		d2, err := SignedDigest(&again)
		if err != nil {
			t.Fatal(err)
		}
		if string(d1) != string(d2) {
			t.Fatalf("digest changed by a round trip: %x, then %x", d1, d2)
		}
	})
}

// What a user signs for one request differs from what signs a session in,
// and from the signature of another request, time or nonce.
func TestSignedRequestDigest(t *testing.T) {
	base := AuthMsg{User: "ann@example.com", ClientPeer: "c", NodePeer: "n", Time: 1}
	seen := map[string]string{}
	for name, a := range map[string]AuthMsg{
		"session": base,
		"request": {User: base.User, ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{1}},
		"other":   {User: base.User, ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{2}},
		"nonce":   {User: base.User, ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{1}, Nonce: []byte{9}},
		"time":    {User: base.User, ClientPeer: "c", NodePeer: "n", Time: 2, Req: []byte{1}},
		"node":    {User: base.User, ClientPeer: "c", NodePeer: "m", Time: 1, Req: []byte{1}},
	} {
		d := string(a.Digest())
		if other, ok := seen[d]; ok {
			t.Errorf("%s and %s have one digest", name, other)
		}
		seen[d] = name
	}
	r1 := &Request{Method: DirLookup, Name: "ann@example.com/x", To: "n"}
	r2 := &Request{Method: DirLookup, Name: "ann@example.com/y", To: "n"}
	d1, _ := SignedDigest(r1)
	d2, _ := SignedDigest(r2)
	r1.Auth = &AuthMsg{Sig: []byte{1}}
	d3, _ := SignedDigest(r1)
	if string(d1) == string(d2) || string(d1) != string(d3) {
		t.Errorf("SignedDigest: two names give one digest, or Auth changes it")
	}
}

// The client decodes what its node answers, which may be hostile.
func FuzzDecodeResponse(f *testing.F) {
	for _, r := range []*Response{
		{Entry: &spindle.DirEntry{Name: "ann@example.com/x"}},
		{Users: []spindle.UserName{"ann@example.com"}, Keys: []spindle.PublicKey{"k"}},
		{Data: []byte("SPKP\x01"), Proofs: [][]byte{{1, 2}}},
		{Err: []byte{1}, Delete: true},
		{Status: &Status{Peer: "12D3KooW", Started: 1, Peers: 3, DHTPeers: 2, Blocks: 5, Bytes: 1 << 20, Addrs: []string{"/ip4/127.0.0.1/tcp/7447"}, Announced: new(int64), RepairBacklog: new(int64),
			Logs: []LogStatus{{User: "ann@example.com", Role: "sequencer", Seq: 7, Hosts: []LogHost{{Peer: "12D3KooW", Seq: 7, Asked: new(spindle.Time)}}}, {User: "bob@example.com", Role: "mirror", Seq: 5, Source: "12D3KooW", SourceSeq: 7, Lag: 2, Err: "refused"}}}},
		{KeyStatus: &ClusterStatus{ID: "12D3KooW", Leader: "12D3KooW", Term: 2, LastIndex: 9, Applied: 9, Voters: []string{"12D3KooW"}, Members: map[string]string{"12D3KooW": "spindle-keyraft/12D3KooW+1+A"}, Seq: 3, Operators: []spindle.PublicKey{"p256:B"}, Policy: "domain", Domains: map[string]spindle.PublicKey{"example.com": "p256:B"}}, Data: []byte("v")},
	} {
		b, _ := Encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[Response])
}

// roundTrip checks that data either fails to decode as a T with an Invalid
// error, or decodes to a value whose encoding decodes again.
func roundTrip[T any](t *testing.T, data []byte) {
	var v T
	if err := Decode(data, &v); err != nil {
		if !errors.Is(err, spindle.Invalid) {
			t.Fatalf("decode error of kind %v", spindle.KindOf(err))
		}
		return
	}
	b, err := Encode(&v)
	if err != nil {
		t.Fatal(err)
	}
	var again T
	if err := Decode(b, &again); err != nil {
		t.Fatalf("re-decoding an encoded %T: %v", v, err)
	}
}
