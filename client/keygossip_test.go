package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/pack"
)

// gossipWorld is one node, ann (a client that keeps evidence) and bob,
// both holding the key log's newest head.
type gossipWorld struct {
	home     string
	n        *node.Node
	ann, bob *Client
	annEv    string // ann's evidence directory.
	bobEv    string
}

func newGossipWorld(t *testing.T, ctx context.Context) *gossipWorld {
	t.Helper()
	w := &gossipWorld{home: t.TempDir(), annEv: t.TempDir(), bobEv: t.TempDir()}
	w.n = startNode(t, w.home)
	t.Cleanup(func() { w.n.Close() })
	dial := func(user spindle.UserName, ev string) *Client {
		keys, _, err := pack.Generate(user)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Dial(ctx, Config{Keys: keys, Node: w.n.DialAddr(), KeyLog: filepath.Join(t.TempDir(), "keylog"), Evidence: ev, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Signup(ctx); err != nil {
			t.Fatal(err)
		}
		return c
	}
	w.ann = dial("ann@example.com", w.annEv)
	w.bob = dial("bob@example.com", w.bobEv)
	for _, c := range []*Client{w.ann, w.bob} {
		for _, u := range []spindle.UserName{"ann@example.com", "bob@example.com"} {
			if _, err := c.LookupUser(ctx, u); err != nil {
				t.Fatal(err)
			}
		}
	}
	if a, b := w.ann.keyLog.chk().Tree(), w.bob.keyLog.chk().Tree(); a != b {
		t.Fatalf("ann and bob hold different trees before the attack: %v and %v", a, b)
	}
	return w
}

// evidenceFiles returns the key-fork evidence saved in dir.
func evidenceFiles(t *testing.T, dir string) []*Evidence {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, EvidenceKeyFork+"-*"))
	var out []*Evidence
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := UnmarshalEvidence(data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, ev)
	}
	return out
}

// The attack gossip catches: whoever holds the cluster's note key (here
// its only member's, stolen) shows bob a log of the size ann holds with
// another tree hash. Neither can tell alone. After both gossip (ann,
// bob, then ann again, as her next lookup or audit does), both hold
// key-fork evidence made of the two signed heads alone, which each of
// them and a third client of the cluster check as proved.
func TestKeyGossipForkCaughtByBoth(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newGossipWorld(t, ctx)
	size := int(w.ann.keyLog.chk().Tree().N)
	bobRec, err := w.ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	records := make([]*spindle.User, size)
	for i := range records {
		records[i] = bobRec
	}
	forged := keyHeadOf(t, newRogueLog(t, w.home, records...))
	shown, err := newKeyLog(w.bob.keyLog.file, w.bob.keyLog.boot, w.bob.keyLog.chk().ConfigEntries(), forged)
	if err != nil {
		t.Fatal(err)
	}
	w.bob.keyLog.checker.Store(shown.chk())

	if _, err := w.ann.GossipKeyHead(ctx); err != nil {
		t.Fatalf("ann's first gossip, before bob published: %v", err)
	}
	if _, err := w.bob.GossipKeyHead(ctx); !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "evidence saved in ") {
		t.Fatalf("bob's gossip = %v, want an Integrity error naming the evidence", err)
	}
	if _, err := w.ann.GossipKeyHead(ctx); !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "evidence saved in ") {
		t.Fatalf("ann's second gossip = %v, want an Integrity error naming the evidence", err)
	}
	carol := dialAs(t, w.n, "carol@example.com")
	for who, dir := range map[string]string{"ann": w.annEv, "bob": w.bobEv} {
		evs := evidenceFiles(t, dir)
		if len(evs) != 1 {
			t.Fatalf("%s keeps %d key-fork evidence files, want 1", who, len(evs))
		}
		ev := evs[0]
		if len(ev.Fork.Proof) != 0 {
			t.Errorf("%s's evidence carries a consistency proof: a fork of one size needs the two heads alone", who)
		}
		for by, c := range map[string]*Client{"ann": w.ann, "carol": carol} {
			if verdict, err := c.VerifyEvidence(ctx, ev); err != nil || !strings.HasPrefix(verdict, "proved: two logs of ") {
				t.Errorf("%s's evidence checked by %s: %q, %v; want proved", who, by, verdict, err)
			}
		}
	}
}

// Honest clients that gossip find no fork: two of one size agree, and
// one whose log has grown since publishes the larger head without
// calling the smaller one a fork.
func TestKeyGossipAgreementIsNotFork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newGossipWorld(t, ctx)
	if _, err := w.ann.GossipKeyHead(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := w.bob.GossipKeyHead(ctx)
	if err != nil || rep.Agree != 1 || len(rep.Ignored) != 0 {
		t.Fatalf("bob's gossip = %+v, %v; want ann's head, agreeing", rep, err)
	}
	before := w.ann.keyLog.chk().Tree().N
	dialAs(t, w.n, "dave@example.com")
	if _, err := w.ann.LookupUser(ctx, "dave@example.com"); err != nil {
		t.Fatal(err)
	}
	if after := w.ann.keyLog.chk().Tree().N; after <= before {
		t.Fatalf("the key log did not grow: %d then %d", before, after)
	}
	if _, err := w.ann.GossipKeyHead(ctx); err != nil {
		t.Fatalf("ann's gossip of the extended log: %v", err)
	}
	if _, err := w.bob.GossipKeyHead(ctx); err != nil {
		t.Fatalf("bob's gossip of the older size: %v", err)
	}
	for _, dir := range []string{w.annEv, w.bobEv} {
		if evs := evidenceFiles(t, dir); len(evs) != 0 {
			t.Errorf("evidence of a fork kept for an honest log: %+v", evs)
		}
	}
}

// A head published in the DHT that the members did not sign (here one
// signed by a stranger's key, of the size ann holds) is logged and
// ignored: no error, no evidence. An unsigned head does not even reach
// the DHT.
func TestKeyGossipGarbageIgnored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newGossipWorld(t, ctx)
	tree := w.ann.keyLog.chk().Tree()
	skey, _, err := note.GenerateKey(rand.Reader, "spindle-keyraft/stranger")
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf("spindle.dev key log\n%d\n%s\nconfig 0\n", tree.N, tlog.RecordHash([]byte("stranger")))
	stranger, err := note.Sign(&note.Note{Text: text}, s)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := keylog.EncodeGossip(tree.N, [][]byte{w.bob.keyLog.chk().Head(), stranger})
	if err != nil {
		t.Fatal(err)
	}
	// A lone node reaches no peer, and keeps the record itself.
	w.n.DHT().PutValue(ctx, node.KeyGossipKey(tree.N), rec)
	if got, err := w.n.DHT().GetValue(ctx, node.KeyGossipKey(tree.N)); err != nil || !bytes.Equal(got, rec) {
		t.Fatalf("the stranger's record is not in the DHT: %v", err)
	}
	rep, err := w.ann.GossipKeyHead(ctx)
	if err != nil || len(rep.Ignored) != 1 || rep.Agree != 1 {
		t.Fatalf("ann's gossip = %+v, %v; want bob's head agreeing and the stranger's ignored", rep, err)
	}
	if evs := evidenceFiles(t, w.annEv); len(evs) != 0 {
		t.Errorf("a stranger's head kept as evidence: %+v", evs)
	}
	unsigned := []byte(text + "\n")
	if _, err := keylog.EncodeGossip(tree.N, [][]byte{unsigned}); err == nil {
		t.Errorf("an unsigned head encoded as gossip")
	}
	w.n.DHT().PutValue(ctx, node.KeyGossipKey(tree.N), append([]byte{1, byte(len(unsigned))}, unsigned...))
	if got, err := w.n.DHT().GetValue(ctx, node.KeyGossipKey(tree.N)); err != nil || !bytes.Equal(got, rec) {
		t.Errorf("the DHT took a record with an unsigned head: %q, %v", got, err)
	}
}

// A key proof asked for with the gossip of its head carries the heads
// others published, and a fork among them is caught as a gossip request
// would catch it: ann, who has not gossiped yet, looks up a record after
// bob published a forged head of her log's size, and her lookup fails
// with the fork's evidence saved, with no gossip request of its own.
func TestKeyProofGossipCatchesFork(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	w := newGossipWorld(t, ctx)
	size := int(w.ann.keyLog.chk().Tree().N)
	bobRec, err := w.ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	records := make([]*spindle.User, size)
	for i := range records {
		records[i] = bobRec
	}
	forged := keyHeadOf(t, newRogueLog(t, w.home, records...))
	shown, err := newKeyLog(w.bob.keyLog.file, w.bob.keyLog.boot, w.bob.keyLog.chk().ConfigEntries(), forged)
	if err != nil {
		t.Fatal(err)
	}
	w.bob.keyLog.checker.Store(shown.chk())
	w.bob.GossipKeyHead(ctx) // Publishes the forged head; bob's own verdict is not the point here.

	counts := countRequests(t, w.n)
	w.ann.gossiped.Store(0) // As a new command of ann's.
	_, err = w.ann.LookupUser(ctx, "bob@example.com")
	if !errors.Is(err, spindle.Integrity) || len(evidenceFiles(t, w.annEv)) != 1 {
		t.Fatalf("ann's lookup after a forged head was published = %v, with %d evidence files; want Integrity and the evidence", err, len(evidenceFiles(t, w.annEv)))
	}
	if got := counts(); got[wire.KeyGossip] != 0 || got[wire.KeyProof] != 1 {
		t.Errorf("the lookup made requests %v, want one %s and no %s", got, wire.KeyProof, wire.KeyGossip)
	}
}
