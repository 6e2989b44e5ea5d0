package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/p2p"
)

// Ann's sequencer H1 finds her log damaged as it starts again: a byte
// flipped in an entry, the file cut short, the file deleted, and (with
// -repair) two bytes flipped in the last entry, which no later entry
// pins and no one-byte fix restores.
// Each time it keeps the entries that verify and takes the rest from her
// mirror H2, serving nothing of the tree until then, and never an older
// state or a new empty tree: afterwards it holds H2's head and ann writes
// through it again.
func TestRefillFromMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes and restarts one")
	}
	k, h := mirrorNodes(t, 2) // The third keeps the DHT of each at two peers.
	h2 := h[0]
	home := t.TempDir()
	kaddr := p2p.Addrs(k.Host())[0]
	h1 := homeNode(t, home, kaddr)
	defer func() { h1.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	_, annKeys := dialWithKeys(t, h1, annU)
	annC := fwdDial(t, h2, annKeys)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(home, "dirlogs", string(annU)+".log")
	for i, c := range []struct {
		what   string
		damage func(b []byte) []byte
		repair bool
	}{
		{"a flipped byte in an entry", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }, false},
		{"the file cut short", func(b []byte) []byte { return b[:len(b)/3] }, false},
		{"the file deleted", nil, false},
		{"two flipped bytes in the last entry, with -repair", func(b []byte) []byte { b[len(b)-3] ^= 0x10; b[len(b)-40] ^= 0x10; return b }, true},
	} {
		name := ann("f" + string(rune('a'+i)))
		if _, err := annC.Put(ctx, name, strings.NewReader(c.what), spindle.EEPack, nil); err != nil {
			t.Fatal(err)
		}
		waitMirrored(t, annU, h1, h2)
		want := headOf(t, h1, annU)
		h1.Close()
		if c.damage == nil {
			if err := os.Remove(log); err != nil {
				t.Fatal(err)
			}
		} else {
			b, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(log, c.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		cfg := Config{Home: home, NoSocket: true, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: []spindle.PeerAddr{kaddr}, Writers: []string{"all"}, Logger: testLogger(t)}
		if c.repair {
			cfg.Repair = []spindle.UserName{annU}
		}
		var err error
		if h1, err = New(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if len(h1.Damage()) == 0 {
			t.Fatalf("%s: no damage reported", c.what)
		}
		waitFor(t, mirrorWait, func() string {
			hd, err := h1.dir.Head(ctx, annU)
			if err != nil {
				return c.what + ": H1 answers " + err.Error()
			}
			return fmt.Sprintf("%s: H1 serves %d, want %d", c.what, hd.Seq, want.Seq)
		}, func() bool {
			hd, err := h1.dir.Head(ctx, annU)
			if err != nil && spindle.KindOf(err) != spindle.Transient && spindle.KindOf(err) != spindle.Damaged {
				t.Fatalf("%s: H1 answers %v while it refills", c.what, err)
			}
			if err == nil && hd.Seq < want.Seq {
				t.Fatalf("%s: H1 serves sequence %d, an older state than %d", c.what, hd.Seq, want.Seq)
			}
			return err == nil && hd.Seq == want.Seq && hd.Hash == want.Hash
		})
		if m, _ := filepath.Glob(log + ".damaged-*"); c.damage != nil && len(m) == 0 {
			t.Errorf("%s: the damaged bytes were not set aside", c.what)
		}
		for _, f := range []spindle.PathName{ann("fa"), name} {
			if _, err := h1.dir.Lookup(ctx, annU, f); err != nil {
				t.Fatalf("%s: %s on H1 after the refill: %v", c.what, f, err)
			}
		}
	}
	if _, err := annC.Put(ctx, ann("after"), strings.NewReader("after"), spindle.EEPack, nil); err != nil {
		t.Fatalf("a write through the refilled sequencer: %v", err)
	}
	waitMirrored(t, annU, h1, h2)
}
