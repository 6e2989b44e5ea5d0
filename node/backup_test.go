package node

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/p2p"
)

// A node backed up while it serves, then lost, comes back from the backup
// on a new home as the same node: the same peer, its key cluster (a
// cluster of one) with every record, and ann's tree as it was at the
// backup, whose blocks it fetches from the node that holds their copies.
// What was written after the backup is not in it. A backup never writes
// over a directory, and a restore never into a home in use.
func TestBackupRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	aHome := t.TempDir()
	a := netNode(t, aHome, nil)
	aAddr := p2p.Addrs(a.Host())[0]
	b := keyNodeAt(t, t.TempDir(), aAddr)
	waitFor(t, 20*time.Second, func() string { return "A and B do not meet in the DHT" },
		func() bool { return a.DHT().RoutingTable().Find(b.Host().ID()) != "" })

	annKeys := newKeys(t, "ann@example.com")
	ann := fwdDial(t, a, annKeys)
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if _, err := ann.Put(ctx, "ann@example.com/photo", bytes.NewReader(data), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	e, err := ann.Lookup(ctx, "ann@example.com/photo", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, blk := range e.Blocks {
		if _, err := b.store.Get(ctx, blk.Ref); err != nil {
			t.Fatalf("B holds no copy of block %s: %v", blk.Ref, err)
		}
	}

	dest := filepath.Join(t.TempDir(), "backup")
	resp, err := a.Backup(ctx, dest)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.KeyCluster || !slices.Contains(resp.Logs, "ann@example.com") || resp.Peer != a.Host().ID().String() {
		t.Fatalf("backup: %+v", resp)
	}
	if _, err := a.Backup(ctx, dest); !errors.Is(err, spindle.Exist) {
		t.Errorf("a second backup into the same directory: %v, want Exist", err)
	}
	if _, err := ann.Put(ctx, "ann@example.com/later", bytes.NewReader([]byte("after the backup")), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	if err := Restore(dest, aHome); !errors.Is(err, spindle.Exist) {
		t.Errorf("a restore into the home in use: %v, want Exist", err)
	}

	// A's machine is lost. The backup goes to a new one.
	a.Close()
	newHome := filepath.Join(t.TempDir(), "node")
	if err := Restore(dest, newHome); err != nil {
		t.Fatal(err)
	}
	if err := Restore(t.TempDir(), filepath.Join(t.TempDir(), "x")); !errors.Is(err, spindle.Invalid) {
		t.Errorf("a restore from a directory that is no backup: %v, want Invalid", err)
	}
	r := netNode(t, newHome, []spindle.PeerAddr{spindle.PeerAddr(fmt.Sprintf("%s/p2p/%s", b.Host().Addrs()[0], b.Host().ID()))})
	defer r.Close()
	if r.Host().ID() != a.Host().ID() {
		t.Fatalf("the restored node is peer %s, not %s", r.Host().ID(), a.Host().ID())
	}
	if err := r.Host().Connect(ctx, peer.AddrInfo{ID: b.Host().ID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() string { return "the restored node does not meet B in the DHT" },
		func() bool { return r.DHT().RoutingTable().Find(b.Host().ID()) != "" })
	annAgain := fwdDial(t, r, annKeys)
	mustRead(t, annAgain, "ann@example.com/photo", data)
	if _, err := annAgain.Lookup(ctx, "ann@example.com/later", false); !errors.Is(err, spindle.NotExist) {
		t.Errorf("a file put after the backup: %v, want NotExist on the restored node", err)
	}
	if _, err := annAgain.Put(ctx, "ann@example.com/again", bytes.NewReader([]byte("written on the restored node")), spindle.EEPack, nil); err != nil {
		t.Fatalf("a put through the restored node: %v", err)
	}
	if _, err := os.Stat(filepath.Join(newHome, BackupReadme)); err == nil {
		t.Error("the restore copied the backup's description into the home")
	}
}
