package client

import (
	"errors"
	"testing"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
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
		lie  func(req *wire.Request, resp *wire.Response)
	}{
		{"an entry left out", func(req *wire.Request, resp *wire.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 3 {
				resp.Log = append(resp.Log[:2:2], resp.Log[3:]...)
			}
		}},
		{"an entry changed", func(req *wire.Request, resp *wire.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 3 {
				e, _ := dirlog.UnmarshalEntry(resp.Log[3])
				e.Time++
				resp.Log[3] = e.Marshal()
			}
		}},
		{"the last entry dropped", func(req *wire.Request, resp *wire.Response) {
			if req.Method == wire.DirEntries && len(resp.Log) > 0 {
				resp.Log = resp.Log[:len(resp.Log)-1]
			}
		}},
		{"a head with another root", func(req *wire.Request, resp *wire.Response) {
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
	_, err = w.mallory.svc.call(w.ctx, &wire.Request{Method: wire.DirEntries, User: "ann@example.com", Seq: 1, Size: 10})
	if !errors.Is(err, spindle.Private) {
		t.Errorf("mallory reading ann's log: %v, want Private", err)
	}
}
