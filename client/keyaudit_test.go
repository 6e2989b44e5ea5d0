package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// A rogueLog is a key log made up by a member that holds the cluster's
// note key but not its users' keys: well-formed, its heads signed with the
// key clients trust, holding records the cluster's policy would refuse.
type rogueLog struct {
	records [][]byte
	hashes  map[int64]tlog.Hash
	signer  note.Signer
}

func newRogueLog(t *testing.T, nodeHome string, records ...*spindle.User) *rogueLog {
	t.Helper()
	skey, err := os.ReadFile(filepath.Join(nodeHome, "raft", "notekey"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(strings.TrimSpace(string(skey)))
	if err != nil {
		t.Fatal(err)
	}
	l := &rogueLog{hashes: map[int64]tlog.Hash{}, signer: s}
	for _, u := range records {
		data := keylog.EncodeRecord(u)
		hs, err := tlog.StoredHashes(int64(len(l.records)), data, l)
		if err != nil {
			t.Fatal(err)
		}
		base := tlog.StoredHashIndex(0, int64(len(l.records)))
		for i, h := range hs {
			l.hashes[base+int64(i)] = h
		}
		l.records = append(l.records, data)
	}
	return l
}

// ReadHashes implements tlog.HashReader.
func (l *rogueLog) ReadHashes(indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, x := range indexes {
		h, ok := l.hashes[x]
		if !ok {
			return nil, fmt.Errorf("no hash %d", x)
		}
		out[i] = h
	}
	return out, nil
}

// proof returns the proof of record i against the whole log's head.
func (l *rogueLog) proof(t *testing.T, i int) []byte {
	t.Helper()
	n := int64(len(l.records))
	th, err := tlog.TreeHash(n, l)
	if err != nil {
		t.Fatal(err)
	}
	head, err := note.Sign(&note.Note{Text: fmt.Sprintf("spindle.dev key log\n%d\n%s\nconfig 0\n", n, th)}, l.signer)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := tlog.ProveRecord(n, int64(i), l)
	if err != nil {
		t.Fatal(err)
	}
	data, err := (&keylog.Proof{Record: l.records[i], Index: int64(i), Inclusion: rp, Head: head}).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// An audit replays every version of a user's record with its proof and
// reports the version that is not signed by the key before it, in a
// history a lying node serves from a log a member that holds the cluster's
// note key made up: a thief's key put in ann's record without her say.
// The honest history, with a rotation, audits clean.
func TestKeyAuditReportsForgedVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	home := t.TempDir()
	n := startNode(t, home)
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ann := dialKeys(ctx, t, n, keys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, ann, keys, first)
	bob := dialAs(t, n, "bob@example.com")
	carolKeys, _, err := pack.Generate("carol@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := dialKeys(ctx, t, n, carolKeys).Signup(ctx); err != nil {
		t.Fatal(err)
	}

	rep, err := bob.KeyAudit(ctx, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Versions) != 2 || len(rep.Problems()) != 0 {
		t.Fatalf("audit of an honest history with a rotation: %+v", rep)
	}
	honest := []*spindle.User{rep.Versions[0].User, rep.Versions[1].User}

	thief, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	forged := keylog.Next(honest[1])
	forged.PublicKey = thief.PublicKey()
	if err := keylog.Sign(forged, thief); err != nil {
		t.Fatal(err)
	}
	rogue := newRogueLog(t, home, honest[0], honest[1], forged)
	p2p.Handle(ctx, n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		var req wiretest.Request
		if wire.Decode(data, &req) == nil && req.Method == wire.KeyGossip {
			// The lying node withholds the heads others published,
			// as the only node a client reaches can: else gossip
			// (keygossip_test.go) catches the made-up log first.
			return mustEncode(t, &wire.Response{Body: mustEncode(t, &wire.KeyGossipResponse{})}), nil
		}
		if wire.Decode(data, &req) != nil || req.User != "ann@example.com" {
			return n.ServeClient(ctx, remote, data)
		}
		switch req.Method {
		case wire.KeyProof:
			return wire.Encode(&wiretest.Response{Data: rogue.proof(t, 2)})
		case wire.KeyProofs:
			return wire.Encode(&wiretest.Response{Proofs: [][]byte{rogue.proof(t, 0), rogue.proof(t, 1), rogue.proof(t, 2)}})
		}
		return n.ServeClient(ctx, remote, data)
	})

	carol := dialKeys(ctx, t, n, carolKeys) // A new key log: no head of the true log seen.
	rep, err = carol.KeyAudit(ctx, "ann@example.com")
	if err != nil {
		t.Fatalf("audit of the made-up history: %v", err)
	}
	bad := rep.Problems()
	if len(rep.Versions) != 3 || len(bad) != 1 || bad[0].User.Version != 3 || !strings.Contains(bad[0].Problem, "not signed by the key of version 2") {
		t.Fatalf("audit of a history with a version signed by a thief's key: %+v", rep)
	}

	// Bob has seen the true log's head: the made-up log does not extend
	// it, and his audit fails with the evidence rather than report.
	if _, err := bob.KeyAudit(ctx, "ann@example.com"); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("audit by a client that saw the true log: %v, want Integrity", err)
	}
}

// An audit refuses, with Integrity, a history that hides versions the
// client has seen, and one whose proofs do not verify.
func TestKeyAuditRefusesShortenedHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := startNode(t, t.TempDir())
	defer n.Close()
	keys, first, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	ann := dialKeys(ctx, t, n, keys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	rotate(ctx, t, ann, keys, first)
	bob := dialAs(t, n, "bob@example.com")
	if _, err := bob.KeyAudit(ctx, "ann@example.com"); err != nil {
		t.Fatal(err)
	}
	l := newLiar(t, n)
	for _, lie := range []struct {
		name string
		fn   func(resp *wiretest.Response)
	}{
		{"first version only", func(resp *wiretest.Response) { resp.Proofs = resp.Proofs[:1] }},
		{"no versions", func(resp *wiretest.Response) { resp.Proofs = nil }},
		{"proof of one version bent", func(resp *wiretest.Response) { resp.Proofs[1][len(resp.Proofs[1])-200] ^= 1 }},
		{"versions swapped", func(resp *wiretest.Response) { resp.Proofs[0], resp.Proofs[1] = resp.Proofs[1], resp.Proofs[0] }},
	} {
		l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.KeyProofs {
				lie.fn(resp)
			}
		})
		rep, err := bob.KeyAudit(ctx, "ann@example.com")
		switch {
		case err == nil && len(rep.Problems()) > 0:
			// Reported, version by version.
		case !errors.Is(err, spindle.Integrity) && !errors.Is(err, spindle.Invalid):
			t.Errorf("%s: audit answered %+v, %v; want an integrity error or a report", lie.name, rep, err)
		}
	}
}
