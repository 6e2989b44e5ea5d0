package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// Ann's log is on H1 with the mirror H2, and her key record asks for one
// cosigning dir host. Bob, who never saw her tree, reads a file she has
// just written: H1 serves heads that H2 cosigned (it pulls first, being
// behind), and a read with no write between costs no new cosignature.
// H2 refuses to cosign a head of H1's over a map its replay does not
// give, and a head H1 did not sign.
func TestDirQuorumCosignedReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three networked nodes")
	}
	_, h := mirrorNodes(t, 2)
	h1, h2 := h[0], h[1]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, _ := dialWithKeys(t, h1, annU)
	bob, bobKeys := dialWithKeys(t, h1, "bob@example.com")
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("read, list: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	if err := annC.SetDirQuorum(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("f"), strings.NewReader("witnessed"), spindle.EEPack, nil); err != nil {
		t.Fatalf("ann's put under a dir quorum of 1: %v", err)
	}
	mustRead(t, bob, ann("f"), []byte("witnessed"))

	resp, err := nodeCall(t, h2, h1.Host().ID(), signedReq(t, bobKeys, wireLookup(ann("f")), h1.Host().ID()))
	if err != nil {
		t.Fatal(err)
	}
	hd := resp.Head
	if hd == nil || len(hd.Cosigs) == 0 || hd.Cosigs[0].Host != h2.Host().ID().String() {
		t.Fatalf("H1 served the head %+v, want one cosigned by H2", hd)
	}
	if err := hd.VerifyCosigs(listedHostsOf(h1, h2), 1); err != nil {
		t.Fatal(err)
	}
	again, err := nodeCall(t, h2, h1.Host().ID(), signedReq(t, bobKeys, wireLookup(ann("f")), h1.Host().ID()))
	if err != nil || again.Head == nil || string(again.Head.Cosigs[0].Sig) != string(hd.Cosigs[0].Sig) {
		t.Errorf("a second read with no write between gathered again: %v", err)
	}

	if hr, err := nodeCall(t, h2, h1.Host().ID(), signedReq(t, bobKeys, wiretest.Request{Method: wire.DirHead, User: annU}, h1.Host().ID())); err != nil || hr.Head == nil || hr.Head.VerifyCosigs(listedHostsOf(h1, h2), 1) != nil {
		t.Errorf("dir.head under a dir quorum of 1: %v, want a cosigned head", err)
	}

	// H2 checks against its own replay.
	signer, err := p2p.NewPeerSigner(h1.Host())
	if err != nil {
		t.Fatal(err)
	}
	lie := *hd
	lie.Cosigs = nil
	lie.Root[0] ^= 1 // Another map for the same log.
	if err := lie.Sign(signer); err != nil {
		t.Fatal(err)
	}
	_, err = h2.serveDirCosign(ctx, &caller{remote: h1.Host().ID()}, &wire.DirCosignRequest{Head: &lie})
	if !errors.Is(err, spindle.Integrity) || !strings.Contains(err.Error(), "not cosigned") {
		t.Errorf("H2 asked to cosign a head over another map: %v, want Integrity", err)
	}
	honest := *hd
	honest.Cosigs = nil
	if _, err := h2.serveDirCosign(ctx, &caller{remote: h2.Host().ID()}, &wire.DirCosignRequest{Head: &honest}); !errors.Is(err, spindle.Permission) {
		t.Errorf("H2 asked by a peer other than the signer: %v, want Permission", err)
	}
	cs, err := h2.serveDirCosign(ctx, &caller{remote: h1.Host().ID()}, &wire.DirCosignRequest{Head: &honest})
	if err != nil || cs.Cosig == nil {
		t.Fatalf("H2 asked to cosign H1's honest head: %v", err)
	}
}

// wireLookup is a lookup of name.
func wireLookup(name spindle.PathName) wiretest.Request {
	return wiretest.Request{Method: wire.DirLookup, Name: name}
}

// listedHostsOf verifies what the given nodes signed.
func listedHostsOf(nodes ...*Node) dirlog.HeadVerifier {
	var out listedHosts
	for _, a := range hostAddrs(nodes...) {
		info, _ := p2p.ParsePeerAddr(a)
		out = append(out, info)
	}
	return out
}

// With the dir hosts H1, H2 and H3 and a dir quorum of 1, H3 down costs
// a read nothing: H1 serves the head as soon as H2 cosigned it, without
// waiting out cosignTimeout for H3.
func TestDirQuorumHostDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes")
	}
	_, h := mirrorNodes(t, 3)
	h1, h2, h3 := h[0], h[1], h[2]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, _ := dialWithKeys(t, h1, annU)
	_, bobKeys := dialWithKeys(t, h1, "bob@example.com")
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2, h3)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("read, list: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
		t.Fatal(err)
	}
	if err := annC.SetDirQuorum(ctx, 1); err != nil {
		t.Fatal(err)
	}
	h3.Close()
	if _, err := annC.Put(ctx, ann("f"), strings.NewReader("witnessed"), spindle.EEPack, nil); err != nil {
		t.Fatalf("ann's put with H3 down: %v", err)
	}
	start := time.Now()
	resp, err := nodeCall(t, h2, h1.Host().ID(), signedReq(t, bobKeys, wireLookup(ann("f")), h1.Host().ID()))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= cosignTimeout {
		t.Errorf("the read took %v, the whole cosignTimeout", took)
	}
	if resp.Head == nil || resp.Head.VerifyCosigs(listedHostsOf(h1, h2, h3), 1) != nil {
		t.Fatalf("H1 served the head %+v with H3 down, want one cosigned by H2", resp.Head)
	}
}

// BenchmarkDirQuorumReadAfterWrite times a reader's lookup (bob, through
// the sequencer H1, the mirror H2 listed after it) of a file ann has just
// written, with ann's dir quorum at 0 and at 1; the writes are not timed.
// At 1, each read waits for H2 to pull the entry and cosign the head.
func BenchmarkDirQuorumReadAfterWrite(b *testing.B) {
	for _, q := range []int{0, 1} {
		b.Run(fmt.Sprintf("quorum=%d", q), func(b *testing.B) {
			k := netNode(b, "", nil)
			b.Cleanup(func() { k.Close() })
			kaddr := p2p.Addrs(k.Host())[0]
			h1, h2 := keyNode(b, kaddr), keyNode(b, kaddr)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const annU = spindle.UserName("ann@example.com")
			annC, _ := dialWithKeys(b, h1, annU)
			bob, _ := dialWithKeys(b, h1, "bob@example.com")
			if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
				b.Fatal(err)
			}
			if _, err := annC.Put(ctx, ann("Access"), strings.NewReader("read, list: bob@example.com\n*: ann@example.com\n"), spindle.PlainPack, nil); err != nil {
				b.Fatal(err)
			}
			if err := annC.SetDirQuorum(ctx, q); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				name := ann(fmt.Sprintf("f%d", i))
				if _, err := annC.Put(ctx, name, strings.NewReader("x"), spindle.EEPack, nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := bob.Lookup(ctx, name, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
