package client

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// An audit of an honest node's log passes; one of a node that leaves an
// entry out, changes one, or signs a head whose map root the log does not
// make, fails with Integrity; and only the owner may audit.
func TestAudit(t *testing.T) {
	w := newLieWorld(t)
	if err := w.ann.Rename(w.ctx, "@/docs/b.txt", "@/docs/c.txt"); err != nil {
		t.Fatal(err)
	}
	rep, err := w.ann.Audit(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Head.Seq < 7 || rep.Writers["ann@example.com"] != int(rep.Head.Seq) {
		t.Fatalf("audit: head %d, writers %v", rep.Head.Seq, rep.Writers)
	}
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lie  func(req *wiretest.Request, resp *wiretest.Response)
	}{
		{"an entry left out", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 3 {
				resp.Log = append(resp.Log[:2:2], resp.Log[3:]...)
			}
		}},
		{"an entry changed", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 3 {
				e, _ := dirlog.UnmarshalEntry(resp.Log[3])
				e.Time++
				resp.Log[3] = e.Marshal()
			}
		}},
		{"the last entry dropped", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 0 {
				resp.Log = resp.Log[:len(resp.Log)-1]
			}
		}},
		{"a head with another root", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirHead && resp.Head != nil {
				resp.Head.Root[5] ^= 1
				resp.Head.Sign(own) // The host itself signs the lie.
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.l.tell(tc.lie)
			defer w.l.tell(nil)
			_, err := w.ann.Audit(w.ctx)
			wantIntegrity(t, err, "audit")
		})
	}
	if _, err := w.mallory.Audit(w.ctx); err != nil {
		t.Errorf("mallory auditing her own empty tree: %v", err)
	}
	// Another user's log is the owner's to read.
	_, err = w.mallory.svc.call(w.ctx, &wiretest.Request{Method: wire.DirEntries, User: "ann@example.com", Seq: 1, Size: 10})
	if !errors.Is(err, spindle.Private) {
		t.Errorf("mallory reading ann's log: %v, want Private", err)
	}
}

// An audit of a compacted log (a node run with -compact) checks the
// checkpoint and the entries after it; a checkpoint with a changed entry,
// or signed by a peer that is not a dir host of the owner, fails it.
func TestAuditCompacted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{Home: t.TempDir(), Writers: []string{"all"}, Logger: testLogger(t), CompactAfter: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ann := dialAs(t, n, "ann@example.com")
	l := newLiar(t, n)
	for i := range 7 {
		if _, err := ann.Put(ctx, spindle.PathName(fmt.Sprintf("@/f%d", i%2)), strings.NewReader("text"), 0, nil); err != nil {
			if _, ok := err.(*spindle.Warning); !ok {
				t.Fatal(err)
			}
		}
	}
	rep, err := ann.Audit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Checkpoint == 0 || rep.Checkpoint > rep.Head.Seq || rep.Writers["ann@example.com"] >= int(rep.Head.Seq) {
		t.Fatalf("audit of a compacted log: checkpoint %d, head %d, writers %v", rep.Checkpoint, rep.Head.Seq, rep.Writers)
	}
	stranger := newPeerSigner(t)
	for _, tc := range []struct {
		name string
		lie  func(req *wiretest.Request, resp *wiretest.Response)
	}{
		{"a checkpoint entry changed", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirCheckpoint && len(resp.Data) > 0 {
				cp, _ := dirlog.UnmarshalCheckpoint(resp.Data)
				cp.Entries[len(cp.Entries)-1].Time++
				resp.Data = cp.Marshal()
			}
		}},
		{"a checkpoint signed by a stranger", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirCheckpoint && len(resp.Data) > 0 {
				cp, _ := dirlog.UnmarshalCheckpoint(resp.Data)
				cp.Sign(stranger)
				resp.Data = cp.Marshal()
			}
		}},
		{"the checkpoint withheld", func(req *wiretest.Request, resp *wiretest.Response) {
			if req.Method == wire.DirCheckpoint {
				resp.Data = nil
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l.tell(tc.lie)
			defer l.tell(nil)
			_, err := ann.Audit(ctx)
			if tc.name == "the checkpoint withheld" {
				// Entries from 1 are gone: the audit cannot pass.
				if err == nil {
					t.Fatal("audit passed without the checkpoint")
				}
				return
			}
			wantIntegrity(t, err, "audit")
		})
	}
}

// strangerSigner signs as a libp2p peer that no key record names.
type strangerSigner struct {
	id   peer.ID
	priv crypto.PrivKey
	pub  []byte
}

func (s *strangerSigner) HostID() string  { return s.id.String() }
func (s *strangerSigner) HostKey() []byte { return s.pub }
func (s *strangerSigner) Sign(d []byte) (spindle.Signature, error) {
	return s.priv.Sign(d)
}

// newPeerSigner returns a dirlog.HeadSigner for a new libp2p identity.
func newPeerSigner(t *testing.T) dirlog.HeadSigner {
	t.Helper()
	priv, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := crypto.MarshalPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return &strangerSigner{id: id, priv: priv, pub: b}
}
