package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// callAs sends a request of method with body to the peer pid and decodes
// the answer as a T.
func callAs[Req, T any](ctx context.Context, h host.Host, pid peer.ID, method string, body *Req) (*T, error) {
	req, err := wire.NewRequest(method, body)
	if err != nil {
		return nil, err
	}
	data, err := wire.Encode(req)
	if err != nil {
		return nil, err
	}
	out, err := p2p.Call(ctx, h, pid, wire.ClientProtocol, data, wire.MaxMessage)
	if err != nil {
		return nil, err
	}
	return wire.DecodeAnswer[T](out)
}

// A witness killed with SIGKILL after it answered still refuses, once
// restarted, the older head its last cosignature rules out: it stored the
// head before it answered. The node witnesses its own key cluster's log,
// which grows by a registration between the two heads.
func TestWitnessRemembersAfterKill(t *testing.T) {
	w := &clusterNode{op: newSpinUser(t), args: []string{"-witness"}}
	w.start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	pid, err := p2p.Connect(ctx, h, spindle.PeerAddr(w.addr))
	if err != nil {
		t.Fatal(err)
	}
	register := func(name spindle.UserName) {
		keys, _, err := pack.Generate(name)
		if err != nil {
			t.Fatal(err)
		}
		rec := &spindle.User{Name: name, PublicKey: keys.PublicKey(), Version: 1}
		if err := keylog.Sign(rec, keys); err != nil {
			t.Fatal(err)
		}
		a := &wire.AuthMsg{User: name, Time: spindle.Now(), ClientPeer: h.ID().String(), NodePeer: pid.String()}
		if a.Sig, err = keys.Sign(a.Digest()); err != nil {
			t.Fatal(err)
		}
		req, _ := wire.NewRequest(wire.KeyPut, &wire.KeyPutRequest{Record: keylog.EncodeRecord(rec)})
		req.Auth = a
		data, _ := wire.Encode(req)
		out, err := p2p.Call(ctx, h, pid, wire.ClientProtocol, data, wire.MaxMessage)
		if err == nil {
			_, err = wire.DecodeResponse(out)
		}
		if err != nil {
			t.Fatalf("registering %s: %v", name, err)
		}
	}
	head := func() ([]byte, keylog.HeadInfo) {
		resp, err := callAs[wire.KeyHeadRequest, wire.KeyHeadResponse](ctx, h, pid, wire.KeyHead, &wire.KeyHeadRequest{})
		if err != nil {
			t.Fatal(err)
		}
		hi, err := keylog.ParseHead(resp.Head)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Head, hi
	}
	cosign := func(req *wire.WitnessCosignRequest) (*wire.WitnessCosignResponse, error) {
		return callAs[wire.WitnessCosignRequest, wire.WitnessCosignResponse](ctx, h, pid, wire.WitnessCosign, req)
	}

	register("wit1@example.com")
	older, oi := head()
	if _, err := cosign(&wire.WitnessCosignRequest{Head: older}); err != nil {
		t.Fatal(err)
	}
	register("wit2@example.com")
	newer, ni := head()
	if ni.N <= oi.N {
		t.Fatalf("the log did not grow: %d, then %d records", oi.N, ni.N)
	}
	proof, err := callAs[wire.KeyConsistencyRequest, wire.KeyConsistencyResponse](ctx, h, pid, wire.KeyConsistency, &wire.KeyConsistencyRequest{Old: oi.N, New: ni.N})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cosign(&wire.WitnessCosignRequest{Head: newer, OldSize: oi.N, Proof: proof.Proof})
	if err != nil {
		t.Fatal(err)
	}
	w.cmd.Process.Signal(syscall.SIGKILL)
	w.wait()

	w.start(t)
	if pid, err = p2p.Connect(ctx, h, spindle.PeerAddr(w.addr)); err != nil {
		t.Fatal(err)
	}
	wh, err := callAs[wire.WitnessHeadRequest, wire.WitnessHeadResponse](ctx, h, pid, wire.WitnessHead, &wire.WitnessHeadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if string(wh.Head) != string(newer) {
		t.Fatalf("restarted, the witness has cosigned\n%s\nwant\n%s", wh.Head, newer)
	}
	v, err := note.NewVerifier(string(wh.Verifier))
	if err != nil {
		t.Fatal(err)
	}
	signed, err := witness.AddCosignature(newer, resp.Sig)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(v)); err != nil {
		t.Fatalf("the cosignature does not verify with the witness's key after its restart: %v", err)
	}
	stale, err := cosign(&wire.WitnessCosignRequest{Head: older})
	if !errors.Is(err, spindle.Stale) || stale == nil || string(stale.Head) != string(newer) || len(stale.Sig) > 0 {
		t.Fatalf("the older head after a restart: %v, want Stale naming the newer head", err)
	}
}

// Three spin node processes: A runs the key cluster, W witnesses it, B is
// where bob signs up. Once A's operator names W and a quorum of one, bob's
// client takes only heads W cosigned, and W cosigns the true heads; a
// head forged with A's stolen note key, of another tree of the size W
// cosigned, is refused with evidence that spin audit -evidence proves.
func TestWitnessProcesses(t *testing.T) {
	opA, opW, opB := newSpinUser(t), newSpinUser(t), newSpinUser(t)
	a := &clusterNode{op: opA}
	a.start(t)
	w := &clusterNode{op: opW, args: []string{"-keyserver", a.addr, "-witness"}}
	b := &clusterNode{op: opB, args: []string{"-keyserver", a.addr}}
	w.start(t)
	b.start(t)
	opA.run("init", "-node", a.addr, "opa@example.com")
	opA.run("signup")
	opA.run("key", "init")

	status := opW.out("node", "status")
	var vkey string
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "witness key:"); ok {
			vkey = strings.TrimSpace(v)
		}
	}
	if vkey == "" {
		t.Fatalf("spin node status on a witness names no witness key:\n%s", status)
	}
	opA.run("key", "witness", "add", vkey)
	opA.run("key", "witness", "quorum", "1")
	if out := opA.out("key", "members"); !strings.Contains(out, "quorum:    1 of 1 witnesses cosign each head") {
		t.Fatalf("spin key members does not show the witness policy:\n%s", out)
	}

	opB.run("init", "-node", b.addr, "bob@example.com")
	opB.run("signup")
	opB.run("key", "audit")
	if out := opW.out("node", "status"); !strings.Contains(out, "witnessed:") || strings.Contains(out, "up to 0 records") {
		t.Fatalf("the witness cosigned nothing for bob's sign-up:\n%s", out)
	}
	if out := opA.out("key", "witnesses"); !regexp.MustCompile(`(?m)^cosigned: +[1-9][0-9]* records for 12D3KooW`).MatchString(out) {
		t.Fatalf("spin key witnesses does not show what the witness cosigned:\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	wpid, err := p2p.Connect(ctx, h, spindle.PeerAddr(w.addr))
	if err != nil {
		t.Fatal(err)
	}
	wh, err := callAs[wire.WitnessHeadRequest, wire.WitnessHeadResponse](ctx, h, wpid, wire.WitnessHead, &wire.WitnessHeadRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hi, err := keylog.ParseHead(wh.Head)
	if err != nil {
		t.Fatal(err)
	}
	skey, err := os.ReadFile(filepath.Join(a.home(), "raft", "notekey"))
	if err != nil {
		t.Fatal(err)
	}
	stolen, err := note.NewSigner(strings.TrimSpace(string(skey)))
	if err != nil {
		t.Fatal(err)
	}
	fake := hi
	fake.Hash[0] ^= 1
	forged, err := note.Sign(&note.Note{Text: string(keylog.FormatHead(fake))}, stolen)
	if err != nil {
		t.Fatal(err)
	}
	_, err = callAs[wire.WitnessCosignRequest, wire.WitnessCosignResponse](ctx, h, wpid, wire.WitnessCosign, &wire.WitnessCosignRequest{Head: forged, OldSize: hi.N, ConfigAfter: wh.Config})
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("a forged head of the size the witness cosigned: %v, want Integrity", err)
	}
	files, _ := filepath.Glob(filepath.Join(w.home(), "witness", "evidence", "key-fork-*"))
	if len(files) != 1 {
		t.Fatalf("%d evidence files after the forged head, want 1 (%v)", len(files), err)
	}
	if out := opB.out("audit", "-evidence", files[0]); !strings.Contains(out, "proved") {
		t.Fatalf("spin audit -evidence on the witness's evidence:\n%s", out)
	}
	// The true head is cosigned still.
	if _, err := callAs[wire.WitnessCosignRequest, wire.WitnessCosignResponse](ctx, h, wpid, wire.WitnessCosign, &wire.WitnessCosignRequest{Head: wh.Head, OldSize: hi.N}); err != nil {
		t.Fatalf("the true head after the forged one: %v", err)
	}
}
