package wire

import (
	"errors"
	"testing"

	"spindle.dev"
)

// req returns the request of method with body, for the seeds.
func req(method string, body any) *Request {
	r, err := NewRequest(method, body)
	if err != nil {
		panic(err)
	}
	return r
}

// A node decodes the envelope of whatever bytes a peer sends.
func FuzzDecodeRequest(f *testing.F) {
	signed := req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x"})
	signed.To = "12D3KooW"
	signed.Auth = &AuthMsg{User: "ann@example.com", NodePeer: "12D3KooW", Time: 1, Sig: []byte{1}, Req: []byte{2}, Nonce: []byte{3}}
	auth := req(Auth, &AuthRequest{})
	auth.Auth = &AuthMsg{User: "ann@example.com", Time: 1, Sig: []byte{1}}
	for _, r := range []*Request{
		req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x"}),
		auth,
		req(DirAppend, &DirAppendRequest{Entry: []byte{0, 1, 2}}),
		req(KeyPut, &KeyPutRequest{Record: []byte{0, 1, 2}, Grant: []byte{3, 4}}),
		req(KeyChange, &KeyChangeRequest{Change: []byte("SPKC\x01")}),
		signed,
	} {
		b, _ := Encode(r)
		f.Add(b)
	}
	f.Fuzz(roundTrip[Request])
}

// A node's handlers decode the bodies of requests from any peer; a few of
// them, those with the most structure.
func FuzzDecodeBody(f *testing.F) {
	for _, r := range []*Request{
		req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x"}),
		req(DirBatch, &DirBatchRequest{Entries: [][]byte{{1}, {2, 3}}}),
		req(KeyPut, &KeyPutRequest{Record: []byte{0, 1, 2}, Grant: []byte{3, 4}}),
		req(DirEntries, &DirEntriesRequest{User: "ann@example.com", From: 3, Max: 100}),
		req(KeyConfig, &KeyConfigRequest{After: 2, Head: []byte("head")}),
		req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x", WithBlocks: true, StepFrom: 4}),
		req(DirBatch, &DirBatchRequest{Entries: [][]byte{{1}}, Blocks: [][]byte{{4, 5}, {6}}}),
		req(DirWhich, &DirWhichRequest{Name: "ann@example.com/x", StepFrom: 2, WithKeys: true}),
		req(KeyProof, &KeyProofRequest{User: "ann@example.com", Gossip: true}),
	} {
		f.Add(r.Body)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[DirLookupRequest](t, data)
		roundTrip[DirBatchRequest](t, data)
		roundTrip[KeyPutRequest](t, data)
		roundTrip[DirEntriesRequest](t, data)
		roundTrip[KeyConfigRequest](t, data)
		roundTrip[WatchRequest](t, data)
		roundTrip[DirWhichRequest](t, data)
		roundTrip[KeyProofRequest](t, data)
	})
}

// A dir host recomputes the digest of a signed request from the request
// it decoded: whatever bytes arrive, the digest of what they decode to is
// the digest of that request encoded and decoded again, so that a client
// and a host always agree on what was signed.
func FuzzSignedDigest(f *testing.F) {
	r1 := req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x"})
	r1.To, r1.Auth = "12D3KooW", &AuthMsg{User: "ann@example.com", Req: []byte{2}, Nonce: []byte{3}}
	r2 := req(DirBatch, &DirBatchRequest{Entries: [][]byte{{1}, {2}}})
	r2.To = "p"
	for _, r := range []*Request{r1, r2} {
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
	r1 := req(DirLookup, &DirLookupRequest{Name: "ann@example.com/x"})
	r2 := req(DirLookup, &DirLookupRequest{Name: "ann@example.com/y"})
	r1.To, r2.To = "n", "n"
	d1, _ := SignedDigest(r1)
	d2, _ := SignedDigest(r2)
	r1.Auth = &AuthMsg{Sig: []byte{1}}
	d3, _ := SignedDigest(r1)
	if string(d1) == string(d2) || string(d1) != string(d3) {
		t.Errorf("SignedDigest: two names give one digest, or Auth changes it")
	}
}

// What a dir host signs for an answer differs with the request it
// answers and with every part of the answer, and not with the signature
// fields themselves.
func TestAnswerDigest(t *testing.T) {
	a := AuthMsg{User: "ann@example.com", ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{1}, Nonce: []byte{9}}
	r := Response{Body: []byte{1}, Err: []byte{2}}
	seen := map[string]string{}
	for name, tc := range map[string]struct {
		a AuthMsg
		r Response
	}{
		"base":       {a, r},
		"request":    {AuthMsg{User: a.User, ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{2}, Nonce: []byte{9}}, r},
		"nonce":      {AuthMsg{User: a.User, ClientPeer: "c", NodePeer: "n", Time: 1, Req: []byte{1}, Nonce: []byte{8}}, r},
		"node":       {AuthMsg{User: a.User, ClientPeer: "c", NodePeer: "m", Time: 1, Req: []byte{1}, Nonce: []byte{9}}, r},
		"body":       {a, Response{Body: []byte{3}, Err: []byte{2}}},
		"error":      {a, Response{Body: []byte{1}, Err: []byte{3}}},
		"not leader": {a, Response{Body: []byte{1}, Err: []byte{2}, NotLeader: true}},
		"moved":      {a, Response{Body: []byte{1, 2}}},
	} {
		d := string(AnswerDigest(&tc.a, &tc.r))
		if other, ok := seen[d]; ok {
			t.Errorf("%s and %s have one digest", name, other)
		}
		seen[d] = name
	}
	signed := r
	signed.Sig, signed.Key = []byte{7}, []byte{6}
	if string(AnswerDigest(&a, &signed)) != string(AnswerDigest(&a, &r)) {
		t.Error("the signature fields change the digest they sign")
	}
	if req := (&Request{To: "n", Auth: &a}); !SignedFor(req, "n") || SignedFor(req, "m") || SignedFor(&Request{To: "n", Auth: &AuthMsg{}}, "n") || SignedFor(&Request{To: "n"}, "n") {
		t.Error("SignedFor: wrong for a request signed for n, for m, a session's, or unsigned")
	}
}

// The client decodes what its node answers, which may be hostile: the
// envelope, and then the body as the method's response.
func FuzzDecodeResponse(f *testing.F) {
	for _, r := range []any{
		&DirLookupResponse{Entry: &spindle.DirEntry{Name: "ann@example.com/x"}, Proofs: [][]byte{{1}}},
		&KeyDomainResponse{Users: []spindle.UserName{"ann@example.com"}},
		&KeyHistoryResponse{Keys: []spindle.PublicKey{"k"}},
		&KeyProofsResponse{Proofs: [][]byte{{1, 2}}},
		&DirLookupResponse{Entry: &spindle.DirEntry{Name: "ann@example.com/x"}, Blocks: [][]byte{{7}}, BlockErr: ErrBytes(spindle.E(spindle.Integrity, "damaged")), Step: &StepAnswers{From: 3, Proof: []byte{1}, MapStep: []byte{2}, Log: [][]byte{{3}, {4}}}},
		&DirWhichResponse{Entry: &spindle.DirEntry{Name: "ann@example.com/Access"}, KeyProofs: [][]byte{{5, 6}}, Step: &StepAnswers{From: 1}},
		&KeyProofResponse{Proof: []byte{1}, Heads: [][]byte{{2}}, Gossiped: true},
		&AuthResponse{Verifier: []byte("v"), TakesBlocks: true},
		&WatchEvent{Err: []byte{1}, Delete: true},
		&NodeStatusResponse{Status: &Status{Peer: "12D3KooW", Started: 1, Peers: 3, DHTPeers: 2, Blocks: 5, Bytes: 1 << 20, Addrs: []string{"/ip4/127.0.0.1/tcp/7447"}, Announced: new(int64), RepairBacklog: new(int64),
			Logs: []LogStatus{{User: "ann@example.com", Role: "sequencer", Seq: 7, Hosts: []LogHost{{Peer: "12D3KooW", Seq: 7, Asked: new(spindle.Time)}}}, {User: "bob@example.com", Role: "mirror", Seq: 5, Source: "12D3KooW", SourceSeq: 7, Lag: 2, Err: "refused"}}}},
		&KeyJoinResponse{Status: &ClusterStatus{ID: "12D3KooW", Leader: "12D3KooW", Term: 2, LastIndex: 9, Applied: 9, Voters: []string{"12D3KooW"}, Members: map[string]string{"12D3KooW": "spindle-keyraft/12D3KooW+1+A"}, Seq: 3, Operators: []spindle.PublicKey{"p256:B"}, Policy: "domain", Domains: map[string]spindle.PublicKey{"example.com": "p256:B"}}, Verifier: []byte("v")},
	} {
		b, _ := EncodeResponse(r, nil, false)
		f.Add(b)
	}
	b, _ := EncodeResponse(&DirLookupResponse{}, spindle.E(spindle.NotExist, spindle.PathName("ann@example.com/x")), true)
	f.Add(b)
	signed, _ := NewResponse(&DirWhichResponse{Entry: &spindle.DirEntry{Name: "ann@example.com/Access"}, Proofs: [][]byte{{1}}}, nil, false)
	signed.Sig, signed.Key = make([]byte, 64), []byte{8, 1, 18, 32}
	b, _ = Encode(signed)
	f.Add(b)
	a := &AuthMsg{User: "ann@example.com", NodePeer: "12D3KooW", Time: 1, Req: []byte{2}, Nonce: []byte{3}}
	f.Fuzz(func(t *testing.T, data []byte) {
		roundTrip[Response](t, data)
		resp, err := DecodeResponse(data)
		if resp == nil {
			if !errors.Is(err, spindle.Invalid) {
				t.Fatalf("decode error of kind %v", spindle.KindOf(err))
			}
			return
		}
		// The answer a client checks is the answer its host signed:
		// what the bytes decode to has the digest of itself encoded and
		// decoded again.
		again, aerr := Encode(resp)
		if aerr != nil {
			t.Fatal(aerr)
		}
		var resp2 Response
		if derr := Decode(again, &resp2); derr != nil {
			t.Fatal(derr)
		}
		if string(AnswerDigest(a, resp)) != string(AnswerDigest(a, &resp2)) {
			t.Fatal("answer digest changed by a round trip")
		}
		roundTrip[DirLookupResponse](t, resp.Body)
		roundTrip[DirGlobResponse](t, resp.Body)
		roundTrip[NodeStatusResponse](t, resp.Body)
		roundTrip[KeyJoinResponse](t, resp.Body)
		roundTrip[WatchEvent](t, resp.Body)
		roundTrip[DirWhichResponse](t, resp.Body)
		roundTrip[KeyProofResponse](t, resp.Body)
		roundTrip[AuthResponse](t, resp.Body)
	})
}

// Each method's body decodes to what was encoded, and the envelope
// carries the body and the error together.
func TestRoundTrip(t *testing.T) {
	r := req(DirGlob, &DirGlobRequest{Pattern: "ann@example.com/*"})
	b, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	var got Request
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	var body DirGlobRequest
	if err := Decode(got.Body, &body); err != nil || got.Method != DirGlob || body.Pattern != "ann@example.com/*" {
		t.Fatalf("request decoded as %+v, body %+v, %v", got, body, err)
	}
	out, err := EncodeResponse(&DirLookupResponse{Entry: &spindle.DirEntry{Name: "ann@example.com/l"}}, spindle.E(spindle.NotExist, spindle.PathName("ann@example.com/l/x")), false)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := DecodeResponse(out)
	if !errors.Is(err, spindle.NotExist) || resp == nil {
		t.Fatalf("response error %v, want NotExist", err)
	}
	var lr DirLookupResponse
	if err := Decode(resp.Body, &lr); err != nil || lr.Entry == nil || lr.Entry.Name != "ann@example.com/l" {
		t.Fatalf("response body %+v, %v", lr, err)
	}
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
