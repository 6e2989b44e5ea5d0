package client

import (
	"crypto/rand"
	"strconv"
	"strings"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// Heads that skip over the log (issue 26, attack 2a): the dir host itself
// signs a head one past the newest head the client saw, with a made-up
// hash. The client must check that the new head extends the one it saw.

// logHashes returns the hashes of ann's entries 1..n, read as the owner.
func (w *lieWorld) logHashes(t *testing.T, n int64) []dirlog.Hash {
	t.Helper()
	resp, err := call[wire.DirEntriesRequest, wire.DirEntriesResponse](w.ctx, w.ann.svc, wire.DirEntries, w.ann.user, &wire.DirEntriesRequest{User: w.ann.user, From: 1, Max: n})
	if err != nil || int64(len(resp.Log)) != n {
		t.Fatalf("entries of ann's log: %v", err)
	}
	var hs []dirlog.Hash
	for _, b := range resp.Log {
		e, err := dirlog.UnmarshalEntry(b)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, e.Hash())
	}
	return hs
}

// TestLieHeadSkipsOverLog: the liar signs, with the dir host's own key, a
// head at the next sequence with a made-up hash, its log tree either a
// genuine extension of the real one (only the entries show the lie, and
// only the owner may have them) or one that rewrites the first entry (the
// consistency proof shows it, to every reader). Ann's lookup and her put
// must fail with an Integrity error naming both heads, without a panic.
func TestLieHeadSkipsOverLog(t *testing.T) {
	w := newLieWorld(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	w.entry(t, "@/docs/a.txt") // Ann's floor: the honest head, signed.
	floor := w.ann.svc.heads.floor(w.ann.user)
	if floor == nil || !floor.HasLogRoot() {
		t.Fatalf("floor %+v has no log root", floor)
	}
	real := w.logHashes(t, floor.Seq)
	var made dirlog.Hash
	rand.Read(made[:])
	for _, tc := range []struct {
		name    string
		rewrite bool // Rewrite entry 1 in the liar's log tree.
	}{
		{"made-up hash, extending tree", false},
		{"made-up hash, rewritten tree", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fake dirlog.LogTree
			for i, h := range real {
				if i == 0 && tc.rewrite {
					h[0] ^= 1
				}
				fake.Append(h)
			}
			fake.Append(made)
			next := floor.Seq + 1
			root, _ := fake.Root(next)
			proof, _ := fake.Prove(floor.Seq, next)
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				switch {
				case req.Method == wire.DirStep:
					resp.Data, resp.Err = proof.Marshal(), nil
				case resp.Head != nil && resp.Head.User == w.ann.user:
					resp.Head.Seq, resp.Head.Hash, resp.Head.LogRoot = next, made, root
					resp.Head.Sign(own)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", false)
			wantIntegrity(t, err, "lookup")
			for _, s := range []string{strconv.FormatInt(next, 10), made.String(), strconv.FormatInt(floor.Seq, 10), floor.Hash.String()} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not name %s: %v", s, err)
				}
			}
			w.ann.dir = &serialDir{Client: dirlog.NewClient(w.ann.svc, w.ann.keys)}
			w.ann.dir.FollowKeyLog(w.ann.keyLogSize, w.ann.catchUpKeyLog)
			_, err = w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("x"), 0, nil)
			wantIntegrity(t, err, "put")
			if h := w.ann.svc.heads.floor(w.ann.user); h.Seq != floor.Seq || h.Hash != floor.Hash {
				t.Fatalf("the client moved its floor to the liar's head: %d %s", h.Seq, h.Hash)
			}
		})
	}
	w.l.tell(nil)
	if _, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("x"), 0, nil); err != nil {
		t.Fatalf("honest put after the lies: %v", err)
	}
	_ = spindle.Integrity
}

// TestLieStepProofDoesNotHold: a reader (not the owner, who also checks
// entries) gets the genuine next head with its log root altered, or a
// proof that does not hold, or none: the consistency check alone must
// refuse it.
func TestLieStepProofDoesNotHold(t *testing.T) {
	w := newLieWorld(t)
	w.ann.svc.ownStep = nil // As any reader: consistency proofs only.
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	w.entry(t, "@/docs/a.txt")
	floor := w.ann.svc.heads.floor(w.ann.user)
	real := w.logHashes(t, floor.Seq)
	var fake dirlog.LogTree
	for i, h := range real {
		if i == 1 {
			h[0] ^= 1 // The liar's log rewrites entry 2.
		}
		fake.Append(h)
	}
	var made dirlog.Hash
	rand.Read(made[:])
	fake.Append(made)
	root, _ := fake.Root(floor.Seq + 1)
	proof, _ := fake.Prove(floor.Seq, floor.Seq+1)
	for _, tc := range []struct {
		name  string
		proof []byte
	}{
		{"rewritten entry", proof.Marshal()},
		{"no proof", nil},
		{"garbage", []byte{3, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				switch {
				case req.Method == wire.DirStep:
					resp.Data, resp.Err = tc.proof, nil
				case resp.Head != nil && resp.Head.User == w.ann.user:
					resp.Head.Seq, resp.Head.Hash, resp.Head.LogRoot = floor.Seq+1, made, root
					resp.Head.Sign(own)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", false)
			wantIntegrity(t, err, "lookup")
		})
	}
}

// TestLieHeadOverOlderMap (issue 26, attack 2b): ann revokes bob, and the
// dir host then signs, with its own key, the genuine head of her revoking
// entry over the map root from before it, to answer her reads (those her
// next put makes to find its readers included) from the state in which
// bob could still read. Ann's client, the owner, checks the map step and
// must refuse the head before it acts on any answer: her lookup and her
// put fail with an Integrity error, and her floor stays below the lie.
// The host's map step may be the honest one, withheld, or garbage.
func TestLieHeadOverOlderMap(t *testing.T) {
	w := newLieWorld(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	w.entry(t, "@/docs/a.txt") // Ann's anchor: the honest head, signed, with its map root.
	before := w.ann.svc.heads.floor(w.ann.user)
	if !before.HasLogRoot() || len(before.Sig) == 0 {
		t.Fatalf("floor %+v is not a signed head with a log root", before)
	}
	w.put(t, "@/docs/Access", "*: ann@example.com\n") // Bob revoked.
	revoked := w.ann.svc.heads.floor(w.ann.user).Seq
	if revoked <= before.Seq {
		t.Fatalf("after the revocation the floor is at %d, below %d", revoked, before.Seq)
	}
	notExist := wire.ErrBytes(spindle.E(spindle.NotExist, "ann@example.com/", "no map step"))
	for _, tc := range []struct {
		name string
		step func(resp *wiretest.Response)
	}{
		{"honest map step", nil},
		{"map step withheld", func(resp *wiretest.Response) { resp.Data, resp.Err = nil, notExist }},
		{"garbage map step", func(resp *wiretest.Response) { resp.Data, resp.Err = []byte("SPDLM1 garbage"), nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				switch {
				case req.Method == wire.DirMapStep:
					if tc.step != nil {
						tc.step(resp)
					}
				case resp.Head != nil && resp.Head.User == w.ann.user && resp.Head.Seq == revoked:
					resp.Head.Root = before.Root // The genuine next entry, over the older map.
					resp.Head.Sign(own)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", false)
			wantIntegrity(t, err, "lookup")
			if !strings.Contains(err.Error(), before.Root.String()) && tc.step == nil {
				t.Errorf("error does not name the map root signed: %v", err)
			}
			_, err = w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for ann only"), 0, nil)
			wantIntegrity(t, err, "put")
			if a := w.ann.svc.heads.anchor(w.ann.user); a.Seq >= revoked || a.Root == before.Root && a.Seq != before.Seq {
				t.Fatalf("the client moved its anchor to the liar's head: %d (map root %s)", a.Seq, a.Root)
			}
		})
	}
	w.l.tell(nil)
	if _, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("for ann only"), 0, nil); err != nil {
		t.Fatalf("honest put after the lies: %v", err)
	}
}

// TestLiePublishedHeadSkipsOverLog: a head published in the DHT moves a
// client past its floor only if its log extends the floor's, as a head
// that comes with an answer does: the dir host signs a head one past the
// one ann saw, with a made-up hash, and publishes it.
func TestLiePublishedHeadSkipsOverLog(t *testing.T) {
	w := newLieWorld(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	w.entry(t, "@/docs/a.txt")
	floor := w.ann.svc.heads.floor(w.ann.user)
	fake := *floor
	fake.Seq++
	rand.Read(fake.Hash[:])
	fake.Sign(own)
	w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirPublished {
			resp.Head, resp.Err = &fake, nil
		}
	})
	defer w.l.tell(nil)
	_, err = w.ann.CheckHeads(w.ctx, w.ann.user)
	wantIntegrity(t, err, "check of published heads")
	if h := w.ann.svc.heads.floor(w.ann.user); h.Seq != floor.Seq || h.Hash != floor.Hash {
		t.Fatalf("the client moved its floor to the published lie: %d %s", h.Seq, h.Hash)
	}
}
