package client

import (
	"crypto/rand"
	"errors"
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

// Lies about the state of a directory log: a file hidden, a head signed by
// the wrong host, and a fork offered to a writer. Each needs the signed
// heads and map proofs to catch (see dirproofs.go).

// keySigner signs heads with a libp2p key of its own: a peer that is not
// a dir host of anyone.
type keySigner struct {
	id   peer.ID
	priv crypto.PrivKey
}

func newKeySigner(t *testing.T) *keySigner {
	t.Helper()
	priv, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return &keySigner{id: id, priv: priv}
}

func (s *keySigner) HostID() string { return s.id.String() }
func (s *keySigner) HostKey() []byte {
	b, _ := crypto.MarshalPublicKey(s.priv.GetPublic())
	return b
}
func (s *keySigner) Sign(digest []byte) (spindle.Signature, error) { return s.priv.Sign(digest) }

// The node answers NotExist for a file that exists: with no proof, with
// the proof of the file's presence, and with a genuine proof of another
// name's absence.
func TestLieNotExistForExistingFile(t *testing.T) {
	w := newLieWorld(t)
	const name = "ann@example.com/docs/a.txt"
	// A genuine exclusion proof, of a name that does not exist.
	var absent wiretest.Response
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && req.Name == "ann@example.com/docs/none" {
			absent = *resp
		}
	})
	if _, err := w.ann.Lookup(w.ctx, "@/docs/none", false); !errors.Is(err, spindle.NotExist) || absent.Head == nil {
		t.Fatalf("honest lookup of a missing name: %v, head %v", err, absent.Head)
	}
	notExist := wire.ErrBytes(spindle.E(spindle.NotExist, spindle.PathName(name)))
	for _, tc := range []struct {
		name string
		lie  func(resp *wiretest.Response)
	}{
		{"no proof", func(resp *wiretest.Response) { *resp = wiretest.Response{Err: notExist} }},
		{"the presence proof", func(resp *wiretest.Response) { resp.Entry, resp.Err = nil, notExist }},
		{"another name's absence", func(resp *wiretest.Response) {
			*resp = absent
			resp.Err = notExist
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirLookup && req.Name == name {
					tc.lie(resp)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Lookup(w.ctx, name, false)
			wantIntegrity(t, err, "lookup")
		})
	}
}

// The node's heads are signed by a peer that is not a dir host of ann, are
// not signed, or are of another user's log.
func TestLieHeadNotSignedByDirHost(t *testing.T) {
	w := newLieWorld(t)
	stranger := newKeySigner(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		lie  func(h *dirlog.Head)
	}{
		{"a stranger", func(h *dirlog.Head) { h.Sign(stranger) }},
		{"unsigned", func(h *dirlog.Head) { h.Host, h.HostKey, h.Sig = "", nil, nil }},
		{"the host's name and a stranger's key", func(h *dirlog.Head) {
			h.Sign(stranger)
			h.Host = own.HostID()
		}},
		{"a changed root", func(h *dirlog.Head) { h.Root[0] ^= 1 }},
		{"another user's log", func(h *dirlog.Head) {
			h.User = "bob@example.com"
			h.Sign(own)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if resp.Head != nil {
					tc.lie(resp.Head)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", false)
			wantIntegrity(t, err, "lookup")
			_, err = w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("x"), 0, nil)
			wantIntegrity(t, err, "put")
		})
	}
	w.noKeyForMallory(t, "@/docs/new.txt")
}

// The node offers a writer a fork: a head signed with its own key (a dir
// host can sign anything) at the sequence number the writer has seen,
// with another hash; or the genuine head of an earlier state. The writer
// must not sign an entry on top of either.
func TestLieForkOfferedToWriter(t *testing.T) {
	w := newLieWorld(t)
	own, err := p2p.NewPeerSigner(w.n.Host())
	if err != nil {
		t.Fatal(err)
	}
	var old *dirlog.Head
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if resp.Head != nil {
			old = resp.Head
		}
	})
	w.entry(t, "@/docs/a.txt")
	w.l.tell(nil)
	if old == nil {
		t.Fatal("no head came with a lookup")
	}
	w.put(t, "@/docs/c.txt", "more")
	w.entry(t, "@/docs/c.txt") // The client sees the newest head.
	for _, tc := range []struct {
		name string
		lie  func(h *dirlog.Head)
	}{
		{"another hash", func(h *dirlog.Head) {
			h.Hash[0] ^= 1
			h.Sign(own)
		}},
		{"an earlier head", func(h *dirlog.Head) { *h = *old }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirHead && resp.Head != nil {
					tc.lie(resp.Head)
				}
			})
			defer w.l.tell(nil)
			// As a new command would, with the heads ann has seen but
			// not the head her last append made.
			w.ann.dir = &serialDir{Client: dirlog.NewClient(w.ann.svc, w.ann.keys)}
			w.ann.dir.FollowKeyLog(w.ann.keyLogSize, w.ann.catchUpKeyLog)
			_, err := w.ann.Put(w.ctx, "@/docs/new.txt", strings.NewReader("x"), 0, nil)
			wantIntegrity(t, err, "put")
			w.l.tell(nil)
			if _, err := w.ann.Lookup(w.ctx, "@/docs/new.txt", false); !errors.Is(err, spindle.NotExist) {
				t.Fatalf("the writer appended on a fork: lookup %v", err)
			}
		})
	}
}

// The node lists an older version of a file in a Glob answer, or drops the
// proofs.
func TestLieGlobOlderEntry(t *testing.T) {
	w := newLieWorld(t)
	old := w.entry(t, "@/docs/a.txt")
	w.put(t, "@/docs/a.txt", "the contract, signed")
	for _, tc := range []struct {
		name string
		lie  func(resp *wiretest.Response)
	}{
		{"older entry", func(resp *wiretest.Response) {
			for i, e := range resp.Entries {
				if e.Name == old.Name {
					resp.Entries[i] = old
				}
			}
		}},
		{"no proofs", func(resp *wiretest.Response) { resp.DirProofs = nil }},
		{"proofs shuffled", func(resp *wiretest.Response) {
			resp.DirProofs[0], resp.DirProofs[1] = resp.DirProofs[1], resp.DirProofs[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w.lie(func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method == wire.DirGlob && len(resp.Entries) > 1 {
					tc.lie(resp)
				}
			})
			defer w.l.tell(nil)
			_, err := w.ann.Glob(w.ctx, "@/docs/*")
			wantIntegrity(t, err, "glob")
		})
	}
	es, err := w.ann.Glob(w.ctx, "@/docs/*")
	if err != nil || len(es) != 3 {
		t.Fatalf("honest glob: %d entries, %v", len(es), err)
	}
}

// A node that stops answering fails a call within callTimeout, with a
// Transient error naming it, instead of hanging the client.
func TestHungNodeTimesOut(t *testing.T) {
	w := newLieWorld(t)
	old := callTimeout
	callTimeout = 300 * time.Millisecond
	defer func() { callTimeout = old }()
	release := make(chan struct{})
	defer close(release)
	w.l.tell(func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup {
			<-release
		}
	})
	start := time.Now()
	_, err := w.ann.Lookup(w.ctx, "@/docs/a.txt", false)
	if !errors.Is(err, spindle.Transient) || time.Since(start) > 5*time.Second {
		t.Fatalf("lookup at a hung node: %v after %v, want Transient within the timeout", err, time.Since(start))
	}
	t.Log(err)
}
