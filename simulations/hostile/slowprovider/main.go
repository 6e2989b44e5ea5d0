// Command slowprovider is a hostile peer for tests: it joins Spindle's
// private DHT as n servers (fresh peer IDs, all in this one process),
// announces each of them as a provider of the blocks it is given, and
// answers every get of [p2p.BlockProtocol] by sending bytes very slowly,
// so that a reader who waits for it waits for ever. It claims to hold
// every block when asked, and refuses to store any.
//
// The blocks of a public file (packing plain or eeintegrity) are named by
// the hash of their bytes, so anyone who knows the file can compute them
// and announce them before the honest writer does.
//
//	slowprovider -boot /ip4/127.0.0.1/tcp/4001/p2p/12D3… -n 20 -rate 64 \
//		-refs bafkrei…,bafkrei…
//
// It prints one line "provider PEERID" per identity once that identity
// has announced every block, then "ready", and runs until its standard
// input closes, it is signalled, or -life passes.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ipfs/go-cid"
	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// The frame and message layout of p2p.BlockProtocol, written out here so
// that this program owes nothing to the product's own framing code.
const (
	tagData    = 1
	frameHdr   = 5     // tag, 4-byte length
	msgHdr     = 1 + 8 // op or status, 8-byte id
	opGet      = 1
	opHas      = 3
	statusOK   = 0
	statusErr  = 1
	maxRequest = 1 << 10
)

func main() {
	boot := flag.String("boot", "", "a node's multiaddr with /p2p/ID, to join through (required)")
	n := flag.Int("n", 20, "number of identities")
	refs := flag.String("refs", "", "comma-separated refs (CIDs) to announce (required)")
	rate := flag.Int("rate", 64, "bytes per second sent in answer to a get")
	life := flag.Duration("life", 2*time.Minute, "run at most this long")
	flag.Parse()
	if *boot == "" || *refs == "" || *n < 1 || *rate < 1 {
		flag.Usage()
		os.Exit(2)
	}
	var cids []cid.Cid
	for r := range strings.SplitSeq(*refs, ",") {
		c, err := cid.Decode(r)
		if err != nil {
			fatalf("ref %q: %v", r, err)
		}
		cids = append(cids, c)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *life)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // Serialises output and guards fail and count.
		fail  error
		count int // Identities that have announced every block.
	)
	for range *n {
		wg.Go(func() {
			h, d, err := join(ctx, spindle.PeerAddr(*boot), *rate)
			if err != nil {
				mu.Lock()
				fail = err
				mu.Unlock()
				return
			}
			defer h.Close()
			defer d.Close()
			for _, c := range cids {
				pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
				err := d.Provide(pctx, c, true)
				pcancel()
				if err != nil {
					mu.Lock()
					fail = fmt.Errorf("%s: announce %s: %w", h.ID(), c, err)
					mu.Unlock()
					return
				}
			}
			mu.Lock()
			fmt.Printf("provider %s\n", h.ID())
			count++
			mu.Unlock()
			<-ctx.Done()
		})
	}
	// "ready" once every identity has announced every block; the
	// identities stay until ctx ends.
	for ctx.Err() == nil {
		mu.Lock()
		failed, all := fail, count == *n
		if all {
			fmt.Println("ready")
		}
		mu.Unlock()
		if failed != nil {
			fatalf("%v", failed)
		}
		if all {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	wg.Wait()
}

// join starts one identity: a host on loopback, a DHT server joined
// through boot, and the slow block handler.
func join(ctx context.Context, boot spindle.PeerAddr, rate int) (host.Host, *kad.IpfsDHT, error) {
	h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}, Memory: 64 << 20})
	if err != nil {
		return nil, nil, err
	}
	h.SetStreamHandler(p2p.BlockProtocol, func(s network.Stream) { serve(ctx, s, rate) })
	d, err := dht.New(ctx, h, []spindle.PeerAddr{boot})
	if err != nil {
		h.Close()
		return nil, nil, err
	}
	// Wait for the routing table to hold the bootstrap node, then fill
	// it, so that announcements reach the nodes nearest to each key.
	for try := 0; d.RoutingTable().Size() == 0; try++ {
		if try == 200 {
			d.Close()
			h.Close()
			return nil, nil, fmt.Errorf("%s: no DHT server in the routing table after 10s", h.ID())
		}
		select {
		case <-ctx.Done():
			d.Close()
			h.Close()
			return nil, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	d.GetClosestPeers(lctx, string(h.ID()))
	lcancel()
	return h, d, nil
}

// serve answers the requests of one block stream in turn: a get with
// the header of a full block and then a trickle of bytes at rate per
// second, a has with yes, anything else with an error.
func serve(ctx context.Context, s network.Stream, rate int) {
	defer s.Reset()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	for {
		var hdr [frameHdr]byte
		if _, err := io.ReadFull(s, hdr[:]); err != nil {
			return
		}
		size := binary.BigEndian.Uint32(hdr[1:])
		if hdr[0] != tagData || size < msgHdr || size > maxRequest {
			return
		}
		req := make([]byte, size)
		if _, err := io.ReadFull(s, req); err != nil {
			return
		}
		id := req[1:msgHdr]
		switch req[0] {
		case opGet:
			trickle(ctx, s, id, rate)
			return // The stream is spent; the reader opens another.
		case opHas:
			if send(s, statusOK, id, []byte{1}) != nil {
				return
			}
		default:
			e, _ := spindle.E(spindle.Permission, "not stored here").(*spindle.Error).MarshalBinary()
			if send(s, statusErr, id, e) != nil {
				return
			}
		}
	}
}

// send writes one response frame.
func send(s network.Stream, status byte, id, body []byte) error {
	msg := make([]byte, frameHdr, frameHdr+msgHdr+len(body))
	msg[0] = tagData
	binary.BigEndian.PutUint32(msg[1:], uint32(msgHdr+len(body)))
	msg = append(append(append(msg, status), id...), body...)
	_, err := s.Write(msg)
	return err
}

// trickle sends the start of a response of a full block, then zero bytes
// at rate per second, until the block's length is sent (never, in a
// test's time), the stream breaks, or ctx ends.
func trickle(ctx context.Context, s network.Stream, id []byte, rate int) {
	const tick = 100 * time.Millisecond
	total := spindle.MaxBlockSize
	head := make([]byte, frameHdr, frameHdr+msgHdr)
	head[0] = tagData
	binary.BigEndian.PutUint32(head[1:], uint32(msgHdr+total))
	head = append(append(head, statusOK), id...)
	if _, err := s.Write(head); err != nil {
		return
	}
	chunk := make([]byte, max(1, rate/10))
	t := time.NewTicker(tick)
	defer t.Stop()
	for sent := 0; sent < total; sent += len(chunk) {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		if _, err := s.Write(chunk[:min(len(chunk), total-sent)]); err != nil {
			return
		}
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "slowprovider: "+format+"\n", args...)
	os.Exit(1)
}
