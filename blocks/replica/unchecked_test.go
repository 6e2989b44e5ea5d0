package replica_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
)

// A node passes on to its user, unchecked, the bytes a holder sends (the
// user's client checks them); it caches them only once a check finds them
// sound; and when the user asks for a block again because its bytes were
// wrong (Refetch), it checks what it fetches, so that a lying holder is
// bypassed.
func TestClientGetUncheckedCachesOnlySound(t *testing.T) {
	nodes := newNet(t, 4, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	user, stranger := blockClient(t, nodes[0]), blockClient(t, nodes[0])
	nodes[0].users.Store(user.h.ID(), true)

	liar, honest := nodes[2], nodes[3]
	x, y := []byte("block x, held by a liar and an honest node"), []byte("block y, held by the honest node")
	for _, nd := range []*node{liar, honest} {
		if _, err := nd.local.Put(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := honest.local.Put(ctx, y); err != nil {
		t.Fatal(err)
	}
	rx, ry := blocks.RefOf(x), blocks.RefOf(y)
	for _, nd := range []*node{liar, honest} {
		if err := nd.store.Announce(rx, ry); err != nil {
			t.Fatal(err)
		}
	}
	waitProviders(t, nodes[0], rx, 2)
	waitProviders(t, nodes[0], ry, 1)

	// The honest holder answers as if it held nothing: the liar's bytes
	// reach the user as they are.
	liar.corrupt.Store(true)
	honest.gone.Store(true)
	got, err := user.r.Fetch(ctx, rx)
	if err != nil {
		t.Fatalf("the user's fetch of a block only a liar serves: %v", err)
	}
	if bytes.Equal(got, x) || blocks.Check(rx, got) == nil {
		t.Fatal("the node sent the user sound bytes: it did not pass on the liar's unchecked, and the test does not show what it means to")
	}
	// The user, finding them wrong, asks again, saying so; now the node
	// checks, and the honest holder is back.
	honest.gone.Store(false)
	lies := liar.served.Load()
	got, err = user.r.Refetch(ctx, rx)
	if err != nil || !bytes.Equal(got, x) {
		t.Fatalf("the user's second fetch of a block a liar served: %v, equal=%v; want the block from the honest holder", err, bytes.Equal(got, x))
	}
	if n := liar.served.Load() - lies; n > 1 {
		t.Fatalf("the liar served %d times on the second fetch; want at most once, then dropped", n)
	}
	// What the node checked it caches; strangers get it from there.
	if got, err := stranger.r.Get(ctx, rx); err != nil || !bytes.Equal(got, x) {
		t.Fatalf("a stranger's get of the block the node checked and cached: %v", err)
	}

	// A sound block passed on unchecked is cached once checked, off the
	// user's path.
	if got, err := user.r.Fetch(ctx, ry); err != nil || !bytes.Equal(got, y) {
		t.Fatalf("the user's fetch of a block an honest node holds: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := stranger.r.Get(ctx, ry)
		if err == nil && bytes.Equal(got, y) {
			break
		}
		if !errors.Is(err, spindle.NotExist) {
			t.Fatalf("a stranger's get of a block the node fetched for its user: %v, want the block or NotExist", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the block the node passed on unchecked is not in its cache 10s later")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The liar's bytes, passed on unchecked, are never cached: a stranger,
// who may get only what the node holds or has cached, never gets them.
func TestClientGetUncheckedLieNotCached(t *testing.T) {
	nodes := newNet(t, 3, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	user, stranger := blockClient(t, nodes[0]), blockClient(t, nodes[0])
	nodes[0].users.Store(user.h.ID(), true)
	liar := nodes[2]
	x := []byte("block x, held by a liar alone")
	if _, err := liar.local.Put(ctx, x); err != nil {
		t.Fatal(err)
	}
	rx := blocks.RefOf(x)
	if err := liar.store.Announce(rx); err != nil {
		t.Fatal(err)
	}
	waitProviders(t, nodes[0], rx, 1)
	liar.corrupt.Store(true)
	for range 3 {
		got, err := user.r.Fetch(ctx, rx)
		if err != nil || blocks.Check(rx, got) == nil {
			t.Fatalf("the user's fetch of a block only a liar holds: %v, sound=%v; want the liar's bytes passed on", err, err == nil)
		}
	}
	// Asked again, the node checks, and there is no one else to ask.
	if got, err := user.r.Refetch(ctx, rx); err == nil {
		t.Fatalf("the user's refetch of a block only a liar holds: %d bytes, sound=%v; want an error", len(got), blocks.Check(rx, got) == nil)
	}
	// However long the node's checks take, the stranger never gets bytes.
	for range 20 {
		if got, err := stranger.r.Get(ctx, rx); !errors.Is(err, spindle.NotExist) {
			t.Fatalf("a stranger's get of a block only a liar holds: %d bytes, %v; want NotExist", len(got), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// blockClient returns a host of its own connected to nd, and a remote
// store of nd's blocks reached from it.
func blockClient(t *testing.T, nd *node) blockPeer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if _, err := p2p.Connect(ctx, h, p2p.Addrs(nd.h)[0]); err != nil {
		t.Fatal(err)
	}
	r := p2p.NewRemoteStore(h, nd.h.ID())
	t.Cleanup(func() { r.Close() })
	return blockPeer{h, r}
}

type blockPeer struct {
	h host.Host
	r *p2p.RemoteStore
}

// A holder whose own copy has rotted on disk, asked for the block by its
// user, still catches the damage (its disk store checks what it reads),
// gets a good copy from another holder, serves it and holds it again: the
// repair is as for any other Get, though the copy fetched for the user is
// passed on unchecked (the disk store checks it on Put).
func TestClientGetOfRottenCopyHealed(t *testing.T) {
	nodes := newNetWith(t, 4, replica.Config{Replicas: 3, BaseTimeout: 5 * time.Second}, func() spindle.BlockStore {
		s, err := disk.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	user := blockClient(t, nodes[0])
	nodes[0].users.Store(user.h.ID(), true)
	data := randomBlock(rand.New(rand.NewPCG(14, 15)), 300000) // A file of its own.
	ref, err := nodes[0].store.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	d, err := blocks.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	name := nodes[0].local.(*disk.Store).Path(d)
	onDisk, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	onDisk[1000] ^= 0x40
	if err := os.WriteFile(name, onDisk, 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := user.r.Fetch(ctx, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the user's fetch of a block whose copy on its node rotted: %v, equal=%v; want the block from another holder", err, bytes.Equal(got, data))
	}
	if got, err := nodes[0].local.Get(ctx, ref); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("the rotten copy was not replaced: %v", err)
	}
}
