package client

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A split view of the key cluster's log, shown by whoever holds the
// members' note keys (here: the cluster's only key, stolen), is caught,
// kept as evidence that anyone following the cluster can check, and
// changes nothing the client keeps: its key log keeps the head it had, and
// honest answers are taken afterwards. Two forks: a log of the same size
// with another tree hash, and a larger log that does not start with the
// one the client saw, with the consistency proof and prefix hash its
// holder serves. Evidence that proves nothing (a larger log that does
// extend the head, a proof that does not lead to the head) is refused.
func TestKeyForkKeptAsEvidence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	n := startNode(t, home)
	defer n.Close()
	dialAs(t, n, "bob@example.com")
	annKeys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	evidence := t.TempDir()
	ann, err := Dial(ctx, Config{Keys: annKeys, Node: n.DialAddr(), KeyLog: filepath.Join(t.TempDir(), "keylog"), Evidence: evidence, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	bob, err := ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	other := dialAs(t, n, "carol@example.com")
	if _, err := ann.LookupUser(ctx, "carol@example.com"); err != nil {
		t.Fatal(err)
	}
	seenN := int(ann.keyLog.chk().Tree().N)

	// Two made-up logs signed with the cluster's note key: one of the
	// size ann has seen, one larger; neither is the cluster's.
	filler := func(n int) []*spindle.User {
		out := []*spindle.User{bob}
		for len(out) < n {
			k, _, err := pack.Generate("mallory@example.com")
			if err != nil {
				t.Fatal(err)
			}
			u := &spindle.User{Name: "mallory@example.com", PublicKey: k.PublicKey(), Version: 1}
			if err := keylog.Sign(u, k); err != nil {
				t.Fatal(err)
			}
			out = append(out, u)
		}
		return out
	}
	same := newRogueLog(t, home, filler(seenN)...)
	larger := newRogueLog(t, home, filler(seenN+3)...)

	var rogue atomic.Pointer[rogueLog]
	serveFork(ctx, t, n, rogue.Load)

	for _, tc := range []struct {
		name  string
		log   *rogueLog
		proof bool // The evidence carries a consistency proof.
	}{
		{"same size", same, false},
		{"larger log", larger, true},
	} {
		before := ann.keyLog.content(keyLogFile{})
		ann.mu.Lock()
		ann.userKeys = map[spindle.UserName]cachedUser{}
		ann.mu.Unlock()
		rogue.Store(tc.log)
		_, err := ann.LookupUser(ctx, "bob@example.com")
		rogue.Store(nil)
		if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "transparency log rewritten") || !strings.Contains(err.Error(), "evidence saved in ") {
			t.Fatalf("%s: lookup = %v, want an Integrity error naming the evidence saved", tc.name, err)
		}
		if after := ann.keyLog.content(keyLogFile{}); !bytes.Equal(before, after) {
			t.Errorf("%s: the key log changed:\n%s\nthen\n%s", tc.name, before, after)
		}
		file := strings.TrimSuffix(err.Error()[strings.Index(err.Error(), "evidence saved in ")+len("evidence saved in "):], "; spin audit -evidence checks it)")
		file, _, _ = strings.Cut(file, ";")
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ev, err := UnmarshalEvidence(data)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if ev.Kind != EvidenceKeyFork || ev.Fork == nil || (len(ev.Fork.Proof) > 0) != tc.proof {
			t.Fatalf("%s: evidence %+v", tc.name, ev)
		}
		verdict, err := ann.VerifyEvidence(ctx, ev)
		if err != nil || !strings.HasPrefix(verdict, "proved: ") {
			t.Errorf("%s: VerifyEvidence = %q, %v; want proved", tc.name, verdict, err)
		}
		// Another client of the cluster checks it the same way.
		if verdict, err := other.VerifyEvidence(ctx, ev); err != nil || !strings.HasPrefix(verdict, "proved: ") {
			t.Errorf("%s: another client's VerifyEvidence = %q, %v; want proved", tc.name, verdict, err)
		}
		// Honest answers are taken afterwards.
		if u, err := ann.LookupUser(ctx, "bob@example.com"); err != nil || u.PublicKey != bob.PublicKey {
			t.Errorf("%s: honest lookup afterwards: %v", tc.name, err)
		}
	}

	// Evidence that proves no fork is refused: the head ann holds twice;
	// a prefix hash the proof does not lead from; and a larger log that
	// extends the head (the cluster's own, later).
	own := ann.keyLog.chk().Head()
	f := &keylog.Fork{Seen: own, Served: own}
	if verdict, err := ann.VerifyEvidence(ctx, &Evidence{Kind: EvidenceKeyFork, Fork: f}); err == nil {
		t.Errorf("one head twice verified: %q", verdict)
	}
	p, err := tlog.ProveTree(int64(seenN+3), int64(seenN), larger)
	if err != nil {
		t.Fatal(err)
	}
	largerHead := keyHeadOf(t, larger)
	f = &keylog.Fork{Seen: own, Served: largerHead, Prefix: ann.keyLog.chk().Tree().Hash, Proof: p}
	if verdict, err := ann.VerifyEvidence(ctx, &Evidence{Kind: EvidenceKeyFork, Fork: f}); err == nil {
		t.Errorf("a proof that does not lead from the prefix verified: %q", verdict)
	}
	oldTree := ann.keyLog.chk().Tree()
	dialAs(t, n, "dave@example.com")
	if _, err := ann.LookupUser(ctx, "dave@example.com"); err != nil {
		t.Fatal(err)
	}
	newTree := ann.keyLog.chk().Tree()
	if newTree.N <= oldTree.N {
		t.Fatalf("the cluster's log did not grow: %d then %d records", oldTree.N, newTree.N)
	}
	p, err = prover{ann.svc}.ConsistencyProof(ctx, oldTree.N, newTree.N)
	if err != nil {
		t.Fatal(err)
	}
	f = &keylog.Fork{Seen: own, Served: ann.keyLog.chk().Head(), Prefix: oldTree.Hash, Proof: p}
	if verdict, err := ann.VerifyEvidence(ctx, &Evidence{Kind: EvidenceKeyFork, Fork: f}); err == nil || !strings.Contains(err.Error(), "extends") {
		t.Errorf("a later head of the same log: VerifyEvidence = %q, %v; want refused as no fork", verdict, err)
	}
}

// keyHeadOf returns the signed head of a rogue log.
func keyHeadOf(t *testing.T, l *rogueLog) []byte {
	t.Helper()
	p, err := keylog.UnmarshalProof(l.proof(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	return p.Head
}

// A head of a forked key log that another command of the user saved in
// the key log file (a command that was shown the fork first) is not taken
// by a client that holds a head of the real log: refresh checks it against
// the client's own head like any head a node serves. Before, a lookup that
// failed against the client's head took the file's larger head unchecked,
// and with it the forged record the fork was made for.
func TestKeyForkInFileNotTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	n := startNode(t, home)
	defer n.Close()
	dialAs(t, n, "bob@example.com")
	annKeys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ann, err := Dial(ctx, Config{Keys: annKeys, Node: n.DialAddr(), KeyLog: filepath.Join(t.TempDir(), "keylog"), Evidence: t.TempDir(), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer ann.Close()
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	bob, err := ann.LookupUser(ctx, "bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := ann.keyLog.save(); err != nil {
		t.Fatal(err)
	}
	held := ann.keyLog.chk().Head()

	// The fork: bob's record with mallory's key, in a larger log that
	// does not start with the one ann holds.
	mk, _, err := pack.Generate("bob@example.com")
	if err != nil {
		t.Fatal(err)
	}
	forged := &spindle.User{Name: "bob@example.com", PublicKey: mk.PublicKey(), Version: 1}
	if err := keylog.Sign(forged, mk); err != nil {
		t.Fatal(err)
	}
	records := []*spindle.User{forged}
	for len(records) < int(ann.keyLog.chk().Tree().N)+3 {
		records = append(records, bob)
	}
	fork := newRogueLog(t, home, records...)

	// Another command saved the fork's head in the file.
	other, err := newKeyLog(ann.keyLog.file, ann.keyLog.boot, ann.keyLog.chk().ConfigEntries(), keyHeadOf(t, fork))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ann.keyLog.file, other.content(keyLogFile{}), 0o600); err != nil {
		t.Fatal(err)
	}

	serveFork(ctx, t, n, func() *rogueLog { return fork })
	ann.mu.Lock()
	ann.userKeys = map[spindle.UserName]cachedUser{}
	ann.mu.Unlock()
	u, err := ann.LookupUser(ctx, "bob@example.com")
	if err == nil {
		t.Fatalf("lookup through the fork = bob with key %s (forged: %v), want an Integrity error", u.PublicKey, u.PublicKey == forged.PublicKey)
	}
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "evidence saved in ") {
		t.Errorf("lookup through the fork: %v, want an Integrity error naming the evidence", err)
	}
	if now := ann.keyLog.chk().Head(); !bytes.Equal(now, held) {
		t.Errorf("the client took another head:\n%s\nafter holding\n%s", now, held)
	}
}

// serveFork makes n answer bob's key lookups from the log fork returns
// (none if nil), and consistency proofs as the fork's holder would: its
// own proof, and its own hash of the prefix.
func serveFork(ctx context.Context, t *testing.T, n *node.Node, fork func() *rogueLog) {
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wiretest.Request
		l := fork()
		if l == nil || wire.Decode(data, &req) != nil {
			return n.ServeClient(ctx, remote, data)
		}
		switch req.Method {
		case wire.KeyProof:
			if req.User == "bob@example.com" {
				return mustEncode(t, &wiretest.Response{Data: l.proof(t, 0)}), nil
			}
		case wire.KeyConsistency:
			p, err := tlog.ProveTree(req.Size, req.Seq, l)
			if err != nil {
				t.Fatal(err)
			}
			prefix, err := tlog.TreeHash(req.Seq, l)
			if err != nil {
				t.Fatal(err)
			}
			body := mustEncode(t, &wire.KeyConsistencyResponse{Proof: keylog.MarshalTreeProof(p), Prefix: prefix[:]})
			return mustEncode(t, &wire.Response{Body: body}), nil
		}
		return n.ServeClient(ctx, remote, data)
	})
}
