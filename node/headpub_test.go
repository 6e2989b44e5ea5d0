package node

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
)

// peerKey signs heads as a peer, without a host.
type peerKey struct {
	id   peer.ID
	priv crypto.PrivKey
	pub  []byte
}

func newPeerKey(t testing.TB) *peerKey {
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
	return &peerKey{id: id, priv: priv, pub: b}
}

func (k *peerKey) HostID() string  { return k.id.String() }
func (k *peerKey) HostKey() []byte { return k.pub }
func (k *peerKey) Sign(d []byte) (spindle.Signature, error) {
	return k.priv.Sign(d)
}

// signedHead returns the encoding of a head of user's log at seq, signed
// by k; hash distinguishes heads of one sequence.
func signedHead(t testing.TB, k *peerKey, user spindle.UserName, seq int64, hash byte, at spindle.Time) []byte {
	t.Helper()
	h := &dirlog.Head{User: user, Seq: seq, Time: at}
	h.Hash[0] = hash
	if err := h.Sign(k); err != nil {
		t.Fatal(err)
	}
	return h.Marshal()
}

func TestHeadValidatorValidate(t *testing.T) {
	k := newPeerKey(t)
	other := newPeerKey(t)
	const ann = "ann@example.com"
	good := signedHead(t, k, ann, 5, 1, 100)
	// A head whose signature is by another key than the one it names.
	forged, _ := dirlog.UnmarshalHead(good)
	forged.HostKey = other.pub
	unsigned := &dirlog.Head{User: ann, Seq: 5}
	tampered, _ := dirlog.UnmarshalHead(good)
	tampered.Seq = 9

	v := headValidator{}
	if err := v.Validate(HeadKey(ann), good); err != nil {
		t.Fatalf("good head refused: %v", err)
	}
	for _, c := range []struct {
		name, key string
		val       []byte
		kind      spindle.Kind
		want      string
	}{
		{"other user's key", HeadKey("bob@example.com"), good, spindle.Invalid, "published under the key of bob@example.com"},
		{"other namespace", "/pk/" + ann, good, spindle.Invalid, "not in namespace"},
		{"garbage", HeadKey(ann), []byte("SPDLH2 junk"), spindle.Invalid, "malformed head"},
		{"unsigned", HeadKey(ann), unsigned.Marshal(), spindle.Invalid, "not signed"},
		{"key of another peer", HeadKey(ann), forged.Marshal(), spindle.Integrity, "not the key of"},
		{"tampered sequence", HeadKey(ann), tampered.Marshal(), spindle.Integrity, "does not verify"},
	} {
		err := v.Validate(c.key, c.val)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %v error containing %q", c.name, err, c.kind, c.want)
		}
	}
}

// With the user's dir hosts at hand, the validator refuses a head signed
// by another peer, and the selector passes over it; without them, it
// takes the head.
func TestHeadValidatorDirHosts(t *testing.T) {
	host, stranger := newPeerKey(t), newPeerKey(t)
	const ann = "ann@example.com"
	known := true
	v := headValidator{hosts: func(u spindle.UserName) ([]string, bool) {
		if u != ann || !known {
			return nil, false
		}
		return []string{host.HostID()}, true
	}}
	good := signedHead(t, host, ann, 5, 1, 100)
	bad := signedHead(t, stranger, ann, 9, 1, 100)
	if err := v.Validate(HeadKey(ann), good); err != nil {
		t.Errorf("head by the dir host: %v", err)
	}
	if err := v.Validate(HeadKey(ann), bad); !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "not a dir host") {
		t.Errorf("head by a stranger: %v, want Invalid saying not a dir host", err)
	}
	if i, err := v.Select(HeadKey(ann), [][]byte{bad, good}); err != nil || i != 1 {
		t.Errorf("select: %d, %v; want the dir host's head (1)", i, err)
	}
	known = false
	if err := v.Validate(HeadKey(ann), bad); err != nil {
		t.Errorf("head by a peer, dir hosts not known: %v", err)
	}
}

// The selector keeps the highest sequence number, whichever order the
// records come in; a lower sequence never wins over one already held.
func TestHeadValidatorSelect(t *testing.T) {
	k := newPeerKey(t)
	const ann = "ann@example.com"
	v := headValidator{}
	s3 := signedHead(t, k, ann, 3, 1, 300)
	s7 := signedHead(t, k, ann, 7, 1, 100) // Older time, higher sequence.
	s7b := signedHead(t, k, ann, 7, 2, 200)
	junk := []byte("not a head")
	for _, c := range []struct {
		name string
		vals [][]byte
		want int
	}{
		{"higher later", [][]byte{s3, s7}, 1},
		{"higher first", [][]byte{s7, s3}, 0},
		{"junk skipped", [][]byte{junk, s3}, 1},
		{"same seq: later time", [][]byte{s7, s7b}, 1},
		{"same seq: later time first", [][]byte{s7b, s7}, 0},
	} {
		got, err := v.Select(HeadKey(ann), c.vals)
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v, want %d", c.name, got, err, c.want)
		}
	}
	if _, err := v.Select(HeadKey(ann), [][]byte{junk}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("no valid record: got %v, want Invalid", err)
	}
}

// FuzzHeadRecord feeds the DHT's head validator arbitrary records: it must
// not panic, and whatever it accepts re-encodes to the same bytes.
func FuzzHeadRecord(f *testing.F) {
	k := newPeerKey(f)
	f.Add(signedHead(f, k, "ann@example.com", 5, 1, 100))
	f.Add([]byte("SPDLH2"))
	f.Add([]byte("SPDLH1"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := decodeHeadRecord(HeadKey("ann@example.com"), data)
		if err != nil {
			return
		}
		if string(h.Marshal()) != string(data) {
			t.Fatalf("accepted record does not re-encode to itself")
		}
		if _, err := (headValidator{}).Select(HeadKey("ann@example.com"), [][]byte{data}); err != nil {
			t.Fatalf("valid record not selectable: %v", err)
		}
	})
}

// Ann's dir host B publishes her log's head after her writes; every node
// of the network finds the newest, and none lets an older record replace
// it, whoever offers it.
func TestHeadPublishedAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	w := newFwdWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ann = "ann@example.com"
	c := fwdDial(t, w.b, w.annKeys)
	if _, err := c.Put(ctx, ann+"/a", strings.NewReader("one"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	old, err := w.b.dir.Head(ctx, ann)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := c.Put(ctx, spindle.PathName(fmt.Sprintf("%s/b%d", ann, i)), strings.NewReader("two"), spindle.PlainPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	now, err := w.b.dir.Head(ctx, ann)
	if err != nil || now.Seq <= old.Seq {
		t.Fatalf("head after the puts: %v, %v (before: %d)", now, err, old.Seq)
	}
	for _, n := range []*Node{w.a, w.z, w.k, w.b} {
		var got *dirlog.Head
		waitFor(t, time.Minute, func() string { return fmt.Sprintf("%s finds head %+v, want sequence %d", n.Host().ID(), got, now.Seq) }, func() bool {
			got, _ = n.PublishedHead(ctx, ann)
			return got != nil && got.Seq == now.Seq
		})
		if got.Hash != now.Hash || got.Host != w.b.Host().ID().String() {
			t.Errorf("%s: published head %s by %s, want %s by B", n.Host().ID(), got.Hash, got.Host, now.Hash)
		}
	}
	// The old head, genuinely signed by B, offered again by any node.
	for _, n := range []*Node{w.a, w.z} {
		if err := n.DHT().PutValue(ctx, HeadKey(ann), old.Marshal()); err == nil {
			t.Errorf("%s took a head of sequence %d over %d", n.Host().ID(), old.Seq, now.Seq)
		}
		if got, err := n.PublishedHead(ctx, ann); err != nil || got.Seq != now.Seq {
			t.Errorf("%s: after the old record was offered, published head %v, %v; want sequence %d", n.Host().ID(), got, err, now.Seq)
		}
	}
	// A well-signed head by a peer that is not ann's dir host, once a
	// node knows her key record (a check of her head had it looked up),
	// is refused and does not hide the real one.
	st := newPeerKey(t)
	bogus := &dirlog.Head{User: ann, Seq: now.Seq + 100, Time: spindle.Now()}
	if err := bogus.Sign(st); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, func() string { return "node A does not know ann's dir hosts" }, func() bool {
		_, known := w.a.dirHosts.get(ann)
		return known
	})
	if err := w.a.DHT().PutValue(ctx, HeadKey(ann), bogus.Marshal()); err == nil || !strings.Contains(err.Error(), "not a dir host") {
		t.Errorf("node A stored a head by a stranger: %v", err)
	}
	if got, err := w.a.PublishedHead(ctx, ann); err != nil || got.Seq != now.Seq {
		t.Errorf("after a stranger's head was offered, published head %v, %v; want sequence %d", got, err, now.Seq)
	}
	// A record that does not verify is refused outright.
	bad := *now
	bad.Seq += 10
	if err := w.a.DHT().PutValue(ctx, HeadKey(ann), bad.Marshal()); err == nil {
		t.Errorf("a head whose signature does not verify was stored")
	}
}

// BenchmarkHeadValidate measures what every DHT node spends on a head
// record it stores or reads: decoding it and verifying its signature.
func BenchmarkHeadValidate(b *testing.B) {
	rec := signedHead(b, newPeerKey(b), "ann@example.com", 5, 1, 100)
	key := HeadKey("ann@example.com")
	b.ReportAllocs()
	for b.Loop() {
		if err := (headValidator{}).Validate(key, rec); err != nil {
			b.Fatal(err)
		}
	}
}
