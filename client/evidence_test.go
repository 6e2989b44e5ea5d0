package client

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// strangerKey signs heads as a peer that is nobody's dir host.
type strangerKey struct {
	id   peer.ID
	priv crypto.PrivKey
	pub  []byte
}

func newStranger(t testing.TB) *strangerKey {
	t.Helper()
	priv, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPublicKey(pub)
	b, _ := crypto.MarshalPublicKey(pub)
	return &strangerKey{id: id, priv: priv, pub: b}
}

func (k *strangerKey) HostID() string                           { return k.id.String() }
func (k *strangerKey) HostKey() []byte                          { return k.pub }
func (k *strangerKey) Sign(d []byte) (spindle.Signature, error) { return k.priv.Sign(d) }

func sampleEvidence(t testing.TB) *Evidence {
	k := newStranger(t)
	a := &dirlog.Head{User: "ann@example.com", Seq: 4, Time: 10}
	b := &dirlog.Head{User: "ann@example.com", Seq: 4, Time: 11}
	b.Hash[0] = 1
	for _, h := range []*dirlog.Head{a, b} {
		if err := h.Sign(k); err != nil {
			t.Fatal(err)
		}
	}
	return &Evidence{Kind: EvidenceFork, User: "ann@example.com", Peer: k.HostID(), Time: 12, Heads: []*dirlog.Head{a, b}, Note: "fork at\nsequence 4"}
}

func TestEvidenceEncoding(t *testing.T) {
	e := sampleEvidence(t)
	data := e.Marshal()
	got, err := UnmarshalEvidence(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if string(got.Marshal()) != string(data) || got.Note != "fork at sequence 4" {
		t.Errorf("round trip changed the evidence:\n%s\n%s", data, got.Marshal())
	}
	head0 := "head " + strings.Fields(strings.Split(string(data), "\n")[5])[1]
	for _, c := range []struct{ name, text, want string }{
		{"empty", "", "empty"},
		{"not evidence", "hello\n", "not a Spindle evidence file"},
		{"unknown kind", evidenceMagic + "\nkind theft\n", `unknown kind "theft"`},
		{"bad user", evidenceMagic + "\nkind fork\nuser nobody\n", "line 3"},
		{"no user", evidenceMagic + "\nkind fork\n", "has no user"},
		{"one head", evidenceMagic + "\nkind fork\nuser ann@example.com\n" + head0 + "\n", "needs two heads, has 1"},
		{"head of another", evidenceMagic + "\nkind fork\nuser bob@example.com\n" + head0 + "\n" + head0 + "\n", "holds a head of ann@example.com"},
		{"bad base64", evidenceMagic + "\nkind fork\nuser ann@example.com\nhead !!\n", "not base64"},
		{"twice", evidenceMagic + "\nkind fork\nkind fork\n", `second "kind"`},
		{"no entry", evidenceMagic + "\nkind bad-entry\nuser ann@example.com\n", "has no entry"},
	} {
		_, err := UnmarshalEvidence([]byte(c.text))
		if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want Invalid containing %q", c.name, err, c.want)
		}
	}
}

// FuzzEvidence feeds the evidence decoder arbitrary files: no panic, and
// what it accepts re-encodes to something it decodes the same.
func FuzzEvidence(f *testing.F) {
	f.Add(sampleEvidence(f).Marshal())
	f.Add([]byte(evidenceMagic + "\nkind rollback\nuser ann@example.com\n"))
	f.Add([]byte(evidenceMagic + "\nkind bad-entry\nuser ann@example.com\nentry AAAA\n"))
	f.Add([]byte(evidenceMagic + "\nkind key-fork\npeer p\ntime 1\nkeyhead AAAA\nkeyhead AAAA\nprefix " + strings.Repeat("A", 43) + "=\nproof AQ==\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := UnmarshalEvidence(data)
		if err != nil {
			return
		}
		again, err := UnmarshalEvidence(e.Marshal())
		if err != nil {
			t.Fatalf("re-encoded evidence refused: %v", err)
		}
		if string(again.Marshal()) != string(e.Marshal()) {
			t.Fatalf("evidence changed in a round trip")
		}
	})
}

// waitPublished waits until the node's DHT holds a head of owner's log
// at seq or later.
func waitPublished(t *testing.T, c *Client, owner spindle.UserName, seq int64) *dirlog.Head {
	t.Helper()
	var h *dirlog.Head
	var err error
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, err = c.PublishedHead(context.Background(), owner)
		if err == nil && h.Seq >= seq {
			return h
		}
		if time.Now().After(deadline) {
			t.Fatalf("no head of %s at %d published after a minute: %v, %v", owner, seq, h, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// evidenceIn returns the one evidence file in dir.
func evidenceIn(t *testing.T, dir string) *Evidence {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(files) != 1 {
		t.Fatalf("want one evidence file in %s, have %q", dir, files)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	e, err := UnmarshalEvidence(data)
	if err != nil {
		t.Fatalf("saved evidence does not decode: %v\n%s", err, data)
	}
	return e
}

// A host that serves an older head than the one published in the DHT is
// caught by a reader that has seen nothing newer itself, with evidence
// that checks; the reader keeps the published head, not the old one.
func TestPublishedHeadCatchesRollback(t *testing.T) {
	w := newLieWorld(t)
	old, err := w.ann.svc.Head(w.ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	w.put(t, "@/docs/a.txt", "the contract, signed")
	now, err := w.ann.svc.Head(w.ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	pub := waitPublished(t, w.ann, "ann@example.com", now.Seq)
	if pub.Seq != now.Seq || pub.Hash != now.Hash || pub.Host != w.n.Host().ID().String() {
		t.Fatalf("published head %d %s by %s, want %d %s by the node", pub.Seq, pub.Hash, pub.Host, now.Seq, now.Hash)
	}

	// A fresh client of ann, which has seen no head, and a host that
	// replays the old one.
	c, err := Dial(w.ctx, Config{Keys: w.ann.keys, Node: w.n.DialAddr(), Logger: testLogger(t), Evidence: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirHead {
			resp.Head = old
		}
	})
	_, err = c.CheckHeads(w.ctx, "ann@example.com")
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("CheckHeads with a replayed head: %v, want Integrity", err)
	}
	for _, want := range []string{"ann@example.com", "rollback", w.n.Host().ID().String(), "evidence saved in"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if seen := c.heads.floor("ann@example.com"); seen == nil || seen.Seq != now.Seq {
		t.Errorf("client now trusts head %v, want sequence %d", seen, now.Seq)
	}
	e := evidenceIn(t, c.svc.evidence)
	if e.Kind != EvidenceRollback || e.Heads[0].Seq != now.Seq || e.Heads[1].Seq != old.Seq {
		t.Errorf("evidence %s of heads %d, %d; want rollback of %d, %d", e.Kind, e.Heads[0].Seq, e.Heads[1].Seq, now.Seq, old.Seq)
	}
	w.l.tell(nil)
	verdict, err := c.VerifyEvidence(w.ctx, e)
	if err != nil || !strings.Contains(verdict, "both heads genuine") {
		t.Errorf("VerifyEvidence: %q, %v", verdict, err)
	}

	// An honest host passes.
	rep, err := c.CheckHeads(w.ctx, "ann@example.com")
	if err != nil || rep.Served.Seq != now.Seq || rep.Published.Seq != now.Seq {
		t.Errorf("CheckHeads of an honest host: %+v, %v", rep, err)
	}
}

// A host that signs a second head for a sequence number the reader has a
// head of is caught; the evidence proves the fork to anyone.
func TestForkCaughtWithEvidence(t *testing.T) {
	w := newLieWorld(t)
	w.ann.svc.evidence = t.TempDir()
	if _, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", true); err != nil {
		t.Fatal(err)
	}
	seen := w.ann.heads.floor("ann@example.com")
	if seen == nil || len(seen.Sig) == 0 {
		t.Fatalf("client kept no signed head: %+v", seen)
	}
	signer, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	forked := *seen
	forked.Hash[0] ^= 1
	if err := forked.Sign(signer); err != nil {
		t.Fatal(err)
	}
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirHead {
			resp.Head = &forked
		}
	})
	_, err = w.ann.CheckHeads(w.ctx, "ann@example.com")
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "fork at sequence") || !strings.Contains(err.Error(), "evidence saved in") {
		t.Fatalf("CheckHeads with a forked head: %v, want an Integrity error saying fork, with evidence", err)
	}
	if h := w.ann.heads.floor("ann@example.com"); h.Hash != seen.Hash {
		t.Errorf("client took the forked head")
	}
	w.l.tell(nil)
	e := evidenceIn(t, w.ann.svc.evidence)
	verdict, err := w.ann.VerifyEvidence(w.ctx, e)
	if err != nil || !strings.HasPrefix(verdict, "proved: fork") {
		t.Errorf("VerifyEvidence of a fork: %q, %v", verdict, err)
	}
	// The same heads twice are no fork.
	e.Heads[1] = e.Heads[0]
	if _, err := w.ann.VerifyEvidence(w.ctx, e); !errors.Is(err, spindle.Invalid) {
		t.Errorf("VerifyEvidence of two equal heads: %v, want Invalid", err)
	}
	// A head signed by a stranger proves nothing against ann's hosts.
	st := newStranger(t)
	if err := e.Heads[1].Sign(st); err != nil {
		t.Fatal(err)
	}
	if _, err := w.ann.VerifyEvidence(w.ctx, e); !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "not a dir host") {
		t.Errorf("VerifyEvidence with a stranger's head: %v, want Integrity saying not a dir host", err)
	}
}

// A published head signed by a peer the key record does not name (one a
// node took before it knew the user's dir hosts, or a node that lies
// about the DHT) is refused by the reader, which keeps the head it had.
func TestPublishedHeadNotByDirHost(t *testing.T) {
	w := newLieWorld(t)
	now, err := w.ann.svc.Head(w.ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	bogus := &dirlog.Head{User: "ann@example.com", Seq: now.Seq + 100, Time: spindle.Now()}
	if err := bogus.Sign(newStranger(t)); err != nil {
		t.Fatal(err)
	}
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirPublished {
			resp.Head, resp.Err = bogus, nil
		}
	})
	_, err = w.ann.CheckHeads(w.ctx, "ann@example.com")
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "not a dir host") {
		t.Fatalf("published head by a stranger: %v, want Integrity saying not a dir host", err)
	}
	if h := w.ann.heads.floor("ann@example.com"); h == nil || h.Seq != now.Seq {
		t.Errorf("client's newest head: %+v, want sequence %d", h, now.Seq)
	}
}

// An entry whose signature does not verify is evidence that anyone with
// the writer's key record can check; the genuine entry is not.
func TestBadEntryEvidence(t *testing.T) {
	w := newLieWorld(t)
	resp, err := w.ann.svc.call(w.ctx, &wiretest.Request{Method: wire.DirEntries, User: "ann@example.com", Seq: 3, Size: 1})
	if err != nil || len(resp.Log) != 1 {
		t.Fatalf("entries: %v, %d", err, len(resp.Log))
	}
	e, err := dirlog.UnmarshalEntry(resp.Log[0])
	if err != nil {
		t.Fatal(err)
	}
	ev := &Evidence{Kind: EvidenceBadEntry, User: "ann@example.com", Entry: e}
	if _, err := w.ann.VerifyEvidence(w.ctx, ev); !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "not evidence") {
		t.Errorf("VerifyEvidence of a good entry: %v, want Invalid", err)
	}
	e.Sig = append(spindle.Signature(nil), e.Sig...)
	e.Sig[len(e.Sig)/2] ^= 1
	// Through the file, as another would get it.
	got, err := UnmarshalEvidence(ev.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	verdict, err := w.ann.VerifyEvidence(w.ctx, got)
	if err != nil || !strings.HasPrefix(verdict, "proved: entry 3") {
		t.Errorf("VerifyEvidence of a bad entry: %q, %v", verdict, err)
	}
}
