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
	} {
		b, _ := Encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[Request])
}

// The client decodes what its node answers, which may be hostile.
func FuzzDecodeResponse(f *testing.F) {
	for _, r := range []*Response{
		{Entry: &spindle.DirEntry{Name: "ann@example.com/x"}},
		{Users: []spindle.UserName{"ann@example.com"}, Keys: []spindle.PublicKey{"k"}},
		{Data: []byte("SPKP\x01"), Proofs: [][]byte{{1, 2}}},
		{Err: []byte{1}, Delete: true},
		{Status: &Status{Peer: "12D3KooW", Started: 1, Peers: 3, DHTPeers: 2, Blocks: 5, Bytes: 1 << 20, Addrs: []string{"/ip4/127.0.0.1/tcp/7447"}, Announced: new(int64), RepairBacklog: new(int64)}},
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
