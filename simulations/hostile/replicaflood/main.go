// Command replicaflood is a hostile peer: it makes many identities, each
// of which says it serves the private DHT, and pushes blocks of junk to
// one node as replicas, to see how much of the node's disk strangers can
// fill. Tests of the replica quotas run it against a real node.
//
//	replicaflood -node /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo... -ids 100 -blocks 8 -size 65536
//
// With -seed, the identities are derived from the seed, so that a second
// run comes back as the same peers. It prints one line
// "stored BYTES in K of N blocks; most from one identity BYTES", and
// then, for each kind of error, a line "COUNT\tKIND\tFIRST ERROR".
package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"

	"spindle.dev"
	"spindle.dev/p2p"
)

func main() {
	node := flag.String("node", "", "multiaddr of the node to push to, ending in /p2p/<peer ID>")
	ids := flag.Int("ids", 100, "identities to make")
	nblocks := flag.Int("blocks", 8, "blocks each identity pushes")
	size := flag.Int("size", 64<<10, "bytes of each block")
	seed := flag.Uint64("seed", 0, "derive the identities from this seed (0: random)")
	flag.Parse()
	if *node == "" || *ids <= 0 || *nblocks <= 0 || *size <= 0 || *size > spindle.MaxBlockSize {
		fmt.Fprintln(os.Stderr, "usage: replicaflood -node ADDR [-ids N] [-blocks N] [-size BYTES] [-seed N]")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stored, most int64
	var ok, tried int
	type kind struct {
		n     int
		first string
	}
	kinds := map[string]*kind{}
	fail := func(err error) {
		k := spindle.KindOf(err).String()
		if kinds[k] == nil {
			kinds[k] = &kind{first: err.Error()}
		}
		kinds[k].n++
	}
	for i := range *ids {
		got, err := push(ctx, *node, *seed, i, *nblocks, *size, func(err error) { tried++; fail(err) }, func() { tried++; ok++ })
		if err != nil {
			fail(err)
		}
		stored += got
		most = max(most, got)
	}
	fmt.Printf("stored %d in %d of %d blocks; most from one identity %d\n", stored, ok, tried, most)
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Printf("%d\t%s\t%s\n", kinds[k].n, k, kinds[k].first)
	}
}

// push makes identity i and pushes n blocks of size random bytes to
// node, returning the bytes stored.
func push(ctx context.Context, node string, seed uint64, i, n, size int, failed func(error), stored func()) (int64, error) {
	var key crypto.PrivKey
	if seed != 0 {
		var s [ed25519.SeedSize]byte
		binary.BigEndian.PutUint64(s[:], seed)
		binary.BigEndian.PutUint64(s[8:], uint64(i))
		k, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(s[:]))
		if err != nil {
			return 0, err
		}
		key = k
	}
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Key: key})
	if err != nil {
		return 0, err
	}
	defer h.Close()
	// Say it serves the DHT; it answers nothing.
	h.SetStreamHandler(p2p.DHTProtocol, func(s network.Stream) { s.Reset() })
	to, err := p2p.Connect(ctx, h, spindle.PeerAddr(node))
	if err != nil {
		return 0, err
	}
	r := p2p.NewRemoteStore(h, to)
	defer r.Close()
	var got int64
	for range n {
		data := make([]byte, size)
		rand.Read(data)
		_, err := r.Put(ctx, data)
		// Until the node has identified this peer as a server of the
		// DHT it refuses as Permission: try again a while.
		for try := 0; errors.Is(err, spindle.Permission) && try < 50; try++ {
			time.Sleep(20 * time.Millisecond)
			_, err = r.Put(ctx, data)
		}
		if err != nil {
			failed(err)
			continue
		}
		stored()
		got += int64(size)
	}
	return got, nil
}
