// Command sink is a hostile peer for tests: a sybil of Spindle's private
// DHT that takes every block pushed to it and keeps none. It is a program
// of its own, not a mode of the product, so that no flag of a real node
// can make it lie.
//
// It runs a real libp2p host and a DHT server on the network it joins,
// and answers the block exchange protocol as a liar would:
//
//   - a put is acknowledged with the block's true ref ("stored"), the
//     bytes are dropped, and the sink announces itself as a provider of
//     the block;
//   - a has request is answered yes, whatever the block;
//   - a prove request is answered with random bytes;
//   - a get is answered NotExist.
//
// It prints "addr ADDRESS" for each of its addresses and then "ready"
// once it knows another peer (in a network that admits only its members,
// once it is connected to the bootstrap node, which serves the DHT). Each line "provide REF" on its standard
// input makes it announce itself as a provider of REF, as a sybil that
// learned a block's address from the DHT's traffic would; it exits when
// its standard input ends.
//
//	sink -bootstrap /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo…
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

func main() {
	listen := flag.String("listen", "/ip4/127.0.0.1/tcp/0", "address to listen on")
	bootstrap := flag.String("bootstrap", "", "a peer of the network to join, as a multiaddr ending in /p2p/ID")
	flag.Parse()
	if *bootstrap == "" {
		fmt.Fprintln(os.Stderr, "sink: -bootstrap is required")
		os.Exit(2)
	}
	if err := run(*listen, spindle.PeerAddr(*bootstrap)); err != nil {
		fmt.Fprintf(os.Stderr, "sink: %v\n", err)
		os.Exit(1)
	}
}

func run(listen string, boot spindle.PeerAddr) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{listen}, Memory: 64 << 20})
	if err != nil {
		return err
	}
	defer h.Close()
	d, err := dht.New(ctx, h, []spindle.PeerAddr{boot})
	if err != nil {
		return err
	}
	defer d.Close()

	// One goroutine announces, from a bounded queue: a put or a line of
	// input that finds it full is not announced.
	provide := make(chan spindle.Ref, 1024)
	go announce(ctx, d, provide)
	p2p.HandleStream(ctx, h, p2p.BlockProtocol, 0, func(ctx context.Context, c *p2p.Conn) error {
		return lie(c, provide)
	})

	for _, a := range p2p.Addrs(h) {
		fmt.Printf("addr %s\n", a)
	}
	bootID := bootPeer(boot)
	// Joined: a peer is in the routing table, or (in a network that
	// admits only its members, whose nodes answer none of the sink's DHT
	// requests and so never enter its table) the bootstrap node is
	// connected and known to serve the DHT.
	joined := func() bool {
		if d.RoutingTable().Size() > 0 {
			return true
		}
		ok, err := h.Peerstore().SupportsProtocols(bootID, p2p.DHTProtocol)
		return err == nil && len(ok) > 0 && h.Network().Connectedness(bootID) == network.Connected
	}
	for i := 0; !joined(); i++ {
		if i == 300 {
			return fmt.Errorf("no peer of the network found in 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if ref, ok := strings.CutPrefix(in.Text(), "provide "); ok {
			select {
			case provide <- spindle.Ref(ref):
			default:
			}
		}
	}
	return nil
}

// bootPeer returns the peer ID of the bootstrap address, which run has
// parsed already.
func bootPeer(boot spindle.PeerAddr) peer.ID {
	ai, _ := p2p.ParsePeerAddr(boot)
	return ai.ID
}

// lie answers the block requests on one stream.
func lie(c *p2p.Conn, provide chan<- spindle.Ref) error {
	for {
		msg, err := c.Recv()
		if err != nil {
			return nil
		}
		if len(msg) < 9 {
			return nil
		}
		op, id, body := msg[0], msg[1:9], msg[9:]
		status, result := byte(0), []byte(nil)
		switch op {
		case 1: // get
			status = 1
			result, _ = spindle.E(spindle.NotExist, "no such block").(*spindle.Error).MarshalBinary()
		case 2: // put: "stored"
			ref := blocks.RefOf(body)
			result = []byte(ref)
			select {
			case provide <- ref:
			default:
			}
		case 3: // has: yes
			result = []byte{1}
		default: // prove, or anything newer: random bytes
			result = make([]byte, 32)
			rand.Read(result)
		}
		var hdr [9]byte
		hdr[0] = status
		copy(hdr[1:], id)
		if err := c.Send(append(hdr[:], result...)); err != nil {
			return nil
		}
	}
}

// announce makes the sink a provider of each block it is told of.
func announce(ctx context.Context, d *kad.IpfsDHT, refs <-chan spindle.Ref) {
	for {
		select {
		case <-ctx.Done():
			return
		case ref := <-refs:
			dg, err := blocks.ParseRef(ref)
			if err != nil {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			d.Provide(pctx, dg.CID(), true)
			cancel()
		}
	}
}
