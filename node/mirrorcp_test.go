package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// Ann's sequencer H1, with mirror H2, compacts her log after some
// entries. A mirror H3 listed later cannot have the entries before the
// checkpoint: it starts from the checkpoint, verified, and pulls the
// entries after it. While H1 sends a tampered checkpoint (a bad host
// signature, one signed by a host the record does not name, a bad entry
// signature or map root under H1's own signature) H3 refuses it and
// installs nothing.
func TestMirrorStartsFromCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five networked nodes")
	}
	_, h := mirrorNodes(t, 4)
	h1, h2, h3, h4 := h[0], h[1], h[2], h[3]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, _ := dialWithKeys(t, h1, annU)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := range n {
		if _, err := annC.Put(ctx, ann(fmt.Sprintf("before-%d", i)), strings.NewReader("before"), spindle.EEPack, nil); err != nil {
			t.Fatal(err)
		}
	}
	waitMirrored(t, annU, h1, h2)
	cp, err := h1.dir.Compact(ctx, annU)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("after"), strings.NewReader("after"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, h1, h2)

	var mu sync.Mutex
	var lie func(resp *wiretest.Response)
	p2p.Handle(context.Background(), h1.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := h1.ServeClient(ctx, remote, data)
		mu.Lock()
		fn := lie
		mu.Unlock()
		var req wiretest.Request
		var resp wiretest.Response
		if err != nil || fn == nil || wire.Decode(data, &req) != nil || req.Method != wire.DirMirror || wire.Decode(out, &resp) != nil {
			return out, err
		}
		fn(&resp)
		return wire.Encode(&resp)
	})
	tell := func(fn func(resp *wiretest.Response)) {
		mu.Lock()
		lie = fn
		mu.Unlock()
	}
	signer := func(n *Node) dirlog.HeadSigner {
		s, err := p2p.NewPeerSigner(n.Host())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// tamper changes the checkpoint a dir.mirror answer carries.
	tamper := func(fn func(cp *dirlog.Checkpoint)) func(resp *wiretest.Response) {
		return func(resp *wiretest.Response) {
			if len(resp.Data) == 0 {
				return
			}
			cp, err := dirlog.UnmarshalCheckpoint(resp.Data)
			if err != nil {
				return
			}
			fn(cp)
			resp.Data = cp.Marshal()
		}
	}
	resign := func(s dirlog.HeadSigner, fn func(cp *dirlog.Checkpoint)) func(cp *dirlog.Checkpoint) {
		return func(cp *dirlog.Checkpoint) {
			fn(cp)
			if err := cp.Sign(s); err != nil {
				t.Error(err)
			}
		}
	}
	cases := []struct {
		name string
		fn   func(cp *dirlog.Checkpoint)
	}{
		{"bad host signature", func(cp *dirlog.Checkpoint) { cp.Sig[len(cp.Sig)/2] ^= 1 }},
		{"signed by a host not listed", resign(signer(h4), func(*dirlog.Checkpoint) {})},
		{"bad entry signature", resign(signer(h1), func(cp *dirlog.Checkpoint) {
			e := cp.Entries[len(cp.Entries)-1]
			e.Sig[len(e.Sig)/2] ^= 1
		})},
		{"bad map root", resign(signer(h1), func(cp *dirlog.Checkpoint) { cp.Root[0] ^= 1 })},
	}
	tell(tamper(cases[0].fn))
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2, h3)); err != nil {
		t.Fatal(err)
	}
	prev := ""
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tell(tamper(tc.fn))
			h3.mirrors.track(annU)
			var st MirrorStatus
			waitFor(t, mirrorWait, func() string { return fmt.Sprintf("mirror status %+v, want a new error of kind Integrity", st) }, func() bool {
				st, _ = h3.MirrorStatus(ctx, annU)
				return st.Err != nil && errors.Is(st.Err, spindle.Integrity) && st.Err.Error() != prev
			})
			prev = st.Err.Error()
			t.Logf("mirror refused: %v", st.Err)
			if !strings.Contains(prev, h1.Host().ID().String()) || !strings.Contains(prev, "checkpoint") {
				t.Errorf("mirror error %v does not name the checkpoint and the host that sent it, %s", st.Err, h1.Host().ID())
			}
			if got := headOf(t, h3, annU); got.Seq != 0 {
				t.Errorf("mirror at %d after a tampered checkpoint, want nothing installed", got.Seq)
			}
			if got, err := h3.dir.Checkpoint(ctx, annU, annU); err != nil || got != nil {
				t.Errorf("checkpoint on the mirror after a tampered one: %v, %v; want none", got, err)
			}
		})
	}

	// H1 honest: H3 starts from the checkpoint and takes what follows.
	tell(nil)
	h3.mirrors.track(annU)
	waitMirrored(t, annU, h1, h3)
	if got, err := h3.dir.Checkpoint(ctx, annU, annU); err != nil || got == nil || got.Seq != cp.Seq || got.Hash != cp.Hash || got.Host != h1.Host().ID().String() {
		t.Fatalf("checkpoint on H3: %+v, %v; want H1's at %d", got, err, cp.Seq)
	}
	if st, _ := h3.MirrorStatus(ctx, annU); st.Err != nil || st.Source != h1.Host().ID() {
		t.Errorf("H3 after catching up: %+v", st)
	}
	if _, err := annC.Put(ctx, ann("later"), strings.NewReader("later"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, h1, h2, h3)
	for _, name := range []spindle.PathName{ann("Access"), ann("before-0"), ann(fmt.Sprintf("before-%d", n-1)), ann("after"), ann("later")} {
		if _, err := h3.dir.Lookup(ctx, annU, name); err != nil {
			t.Errorf("lookup of %s on H3: %v", name, err)
		}
	}
	if des, err := h3.dir.Glob(ctx, annU, string(ann("*"))); err != nil || len(des) != n+3 {
		t.Errorf("glob on H3: %d entries, %v; want %d", len(des), err, n+3)
	}
	// Readers take H3's head: signed by H3, and the log it serves (the
	// checkpoint and the entries after it) makes it.
	hd, err := h3.dir.HeadFor(ctx, annU, annU)
	if err != nil {
		t.Fatal(err)
	}
	if err := hd.Verify(listedHosts{{ID: h3.Host().ID()}}); err != nil {
		t.Errorf("H3's head: %v", err)
	}
	got, _ := h3.dir.Checkpoint(ctx, annU, annU)
	tail, err := h3.dir.Entries(ctx, annU, annU, got.Seq+1, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirlog.CheckLogFrom(got, tail, hd); err != nil {
		t.Errorf("H3's log does not make its head: %v", err)
	}
}
