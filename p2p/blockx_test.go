package p2p_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/disk"
	"spindle.dev/blocks/mem"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

func allowAll(peer.ID) bool { return true }

// serve serves a fresh memory store from h and returns it.
func serve(t testing.TB, h host.Host, cfg p2p.BlockServerConfig) *mem.Store {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store := new(mem.Store)
	p2p.ServeBlocks(ctx, h, store, cfg)
	return store
}

func remote(t testing.TB, from host.Host, to peer.ID) *p2p.RemoteStore {
	r := p2p.NewRemoteStore(from, to)
	t.Cleanup(func() { r.Close() })
	return r
}

// The remote store passes the suite every block store passes.
func TestRemoteStoreSuite(t *testing.T) {
	blockstest.Test(t, func(t *testing.T) spindle.BlockStore {
		net := p2ptest.NewNet(t, 2)
		serve(t, net.Hosts[0], p2p.BlockServerConfig{CanPut: allowAll})
		return remote(t, net.Hosts[1], net.Hosts[0].ID())
	})
}

func TestBlockExchangeMocknet(t *testing.T) {
	net := p2ptest.NewNet(t, 3)
	serve(t, net.Hosts[0], p2p.BlockServerConfig{CanPut: allowAll})
	testExchange(t, remote(t, net.Hosts[1], net.Hosts[0].ID()), remote(t, net.Hosts[2], net.Hosts[0].ID()))
}

func TestBlockExchangeTCP(t *testing.T)  { testExchangeOver(t, "/ip4/127.0.0.1/tcp/0") }
func TestBlockExchangeQUIC(t *testing.T) { testExchangeOver(t, "/ip4/127.0.0.1/udp/0/quic-v1") }

// testExchangeOver exchanges blocks between hosts listening on listen,
// with a disk store behind the server.
func testExchangeOver(t *testing.T, listen string) {
	cfg := p2p.Config{ListenAddrs: []string{listen}}
	srv, a, b := newHost(t, cfg), newHost(t, cfg), newHost(t, cfg)
	ds, err := disk.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p2p.ServeBlocks(ctx, srv, ds, p2p.BlockServerConfig{CanPut: allowAll})
	for _, h := range []host.Host{a, b} {
		if _, err := p2p.Connect(ctx, h, p2p.Addrs(srv)[0]); err != nil {
			t.Fatal(err)
		}
	}
	testExchange(t, remote(t, a, srv.ID()), remote(t, b, srv.ID()))
}

// testExchange puts blocks through one remote store, many in flight, and
// reads them back through both.
func testExchange(t *testing.T, w, r spindle.BlockStore) {
	ctx := context.Background()
	const n = 40
	refs := make([]spindle.Ref, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ref, err := w.Put(ctx, blockstest.Block(uint64(i), 10000+i*25000))
			if err != nil {
				t.Error(err)
			}
			refs[i] = ref
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for _, s := range []spindle.BlockStore{w, r} {
		for i := range n {
			wg.Go(func() {
				got, err := s.Get(ctx, refs[i])
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(got, blockstest.Block(uint64(i), 10000+i*25000)) {
					t.Errorf("block %d came back altered", i)
				}
			})
		}
		wg.Wait()
	}
}

func TestPutAdmission(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 3)
	srv, friend, stranger := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	store := serve(t, srv, p2p.BlockServerConfig{CanPut: func(p peer.ID) bool { return p == friend.ID() }})
	ref, err := remote(t, friend, srv.ID()).Put(ctx, []byte("mine"))
	if err != nil {
		t.Fatalf("admitted Put: %v", err)
	}
	sr := remote(t, stranger, srv.ID())
	if _, err := sr.Put(ctx, []byte("spam")); !errors.Is(err, spindle.Permission) {
		t.Fatalf("Put by a peer not admitted: %v, want Permission", err)
	}
	if _, err := store.Get(ctx, blocks.RefOf([]byte("spam"))); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("refused block was stored: %v", err)
	}
	if got, err := sr.Get(ctx, ref); err != nil || string(got) != "mine" {
		t.Fatalf("Get by a peer that may not put = %q, %v", got, err)
	}

	// With no CanPut, nobody may put.
	net2 := p2ptest.NewNet(t, 2)
	serve(t, net2.Hosts[0], p2p.BlockServerConfig{})
	if _, err := remote(t, net2.Hosts[1], net2.Hosts[0].ID()).Put(ctx, []byte("x")); !errors.Is(err, spindle.Permission) {
		t.Fatalf("Put with no CanPut: %v, want Permission", err)
	}
}

// hostileServer answers BlockProtocol on h with respond, which gets each
// request's op, id and body and returns the raw frame bytes to send.
func hostileServer(h host.Host, respond func(op byte, id []byte, body []byte) []byte) {
	hostileServerOn(h, p2p.BlockProtocol, respond)
}

// hostileServerOn is hostileServer for the protocol proto.
func hostileServerOn(h host.Host, proto protocol.ID, respond func(op byte, id []byte, body []byte) []byte) {
	h.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(s, hdr[:]); err != nil {
				return
			}
			msg := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
			if _, err := io.ReadFull(s, msg); err != nil {
				return
			}
			if _, err := s.Write(respond(msg[0], msg[1:9], msg[9:])); err != nil {
				return
			}
		}
	})
}

func frame(payload ...[]byte) []byte {
	p := bytes.Join(payload, nil)
	b := rawFrame(1, uint32(len(p)))
	return append(b, p...)
}

func TestHostileBlockServer(t *testing.T) {
	ctx := context.Background()
	good := []byte("the real block")
	ref := blocks.RefOf(good)

	t.Run("wrong bytes", func(t *testing.T) {
		net := p2ptest.NewNet(t, 2)
		hostileServer(net.Hosts[0], func(op byte, id, body []byte) []byte {
			return frame([]byte{0}, id, []byte("forged block"))
		})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		got, err := r.Get(ctx, ref)
		if !errors.Is(err, spindle.Integrity) || got != nil {
			t.Fatalf("Get of a forged block = %q, %v; want Integrity", got, err)
		}
		// A local cache filled from the remote store is not poisoned.
		var cache mem.Store
		if data, err := r.Get(ctx, ref); err == nil {
			cache.Put(ctx, data)
		}
		if _, err := cache.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
			t.Fatalf("forged block reached the cache: %v", err)
		}
		// A Put acknowledged with another ref is caught too.
		if _, err := r.Put(ctx, good); !errors.Is(err, spindle.Integrity) {
			t.Fatalf("Put acknowledged with a wrong ref: %v, want Integrity", err)
		}
	})

	t.Run("oversized frame", func(t *testing.T) {
		net := p2ptest.NewNet(t, 2)
		hostileServer(net.Hosts[0], func(op byte, id, body []byte) []byte {
			return rawFrame(1, 1<<31)
		})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		_, err := r.Get(ctx, ref)
		if !errors.Is(err, spindle.Invalid) {
			t.Fatalf("Get answered by an oversized frame: %v, want Invalid", err)
		}
	})

	t.Run("malformed response", func(t *testing.T) {
		net := p2ptest.NewNet(t, 2)
		hostileServer(net.Hosts[0], func(op byte, id, body []byte) []byte {
			return frame([]byte{9, 9})
		})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		if _, err := r.Get(ctx, ref); !errors.Is(err, spindle.Invalid) {
			t.Fatalf("Get answered by a malformed frame: %v, want Invalid", err)
		}
	})

	t.Run("silent", func(t *testing.T) {
		net := p2ptest.NewNet(t, 2)
		hostileServer(net.Hosts[0], func(op byte, id, body []byte) []byte { return nil })
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, err := r.Get(ctx, ref); !errors.Is(err, spindle.Transient) {
			t.Fatalf("Get from a silent peer: %v, want Transient", err)
		}
	})
}

func TestHostileBlockClient(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 3)
	srv, evil, honest := net.Hosts[0], net.Hosts[1], net.Hosts[2]
	store := serve(t, srv, p2p.BlockServerConfig{CanPut: allowAll})

	for _, bad := range [][]byte{
		rawFrame(1, spindle.MaxStoredBlockSize+100),                                   // Oversized frame.
		frame([]byte{7}, make([]byte, 8), []byte("x")),                                // Unknown op.
		frame([]byte{1, 2, 3}),                                                        // Short request.
		frame([]byte{2}, make([]byte, 8), make([]byte, spindle.MaxStoredBlockSize+1)), // Oversized block.
	} {
		s, err := evil.NewStream(ctx, srv.ID(), p2p.BlockProtocol)
		if err != nil {
			t.Fatal(err)
		}
		s.Write(bad)
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(s); err == nil {
			t.Errorf("server did not reset a stream carrying %d bad bytes", len(bad))
		}
		s.Close()
	}
	// A Get for a malformed ref is answered with Invalid and the stream lives on.
	r := remote(t, evil, srv.ID())
	if _, err := r.Get(ctx, "bafkqaaa"); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Get of a malformed ref: %v, want Invalid", err)
	}

	n := 0
	store.List(ctx, func(spindle.Ref) error { n++; return nil })
	if n != 0 {
		t.Fatalf("store holds %d blocks after hostile requests, want 0", n)
	}
	ref, err := remote(t, honest, srv.ID()).Put(ctx, []byte("fine"))
	if err != nil {
		t.Fatalf("honest Put after hostile requests: %v", err)
	}
	if got, err := store.Get(ctx, ref); err != nil || string(got) != "fine" {
		t.Fatalf("stored block = %q, %v", got, err)
	}
}

// A RemoteStore whose stream breaks opens a new one.
func TestRemoteStoreReconnects(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	serve(t, srv, p2p.BlockServerConfig{CanPut: allowAll})
	r := remote(t, cli, srv.ID())
	ref, err := r.Put(ctx, []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := net.Mock.DisconnectPeers(srv.ID(), cli.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the disconnect", func() bool { return cli.Network().Connectedness(srv.ID()) != network.Connected })
	if got, err := r.Get(ctx, ref); err != nil || string(got) != "a" {
		t.Fatalf("Get after a disconnect = %q, %v", got, err)
	}
	net.Split(t, []int{0}, []int{1})
	// Mocknet closes the connection asynchronously: wait for it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := r.Get(ctx, ref)
		if errors.Is(err, spindle.IO) {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("Get from an unreachable peer: %v, want IO", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// slowStore counts the calls in progress and holds each until released.
type slowStore struct {
	mem.Store
	mu       sync.Mutex
	now, max int
	release  chan struct{}
}

func (s *slowStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	s.mu.Lock()
	s.now++
	s.max = max(s.max, s.now)
	s.mu.Unlock()
	<-s.release
	s.mu.Lock()
	s.now--
	s.mu.Unlock()
	return s.Store.Get(ctx, ref)
}

func TestServerInFlightBound(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	store := &slowStore{release: make(chan struct{})}
	ref, _ := store.Put(ctx, []byte("b"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2p.ServeBlocks(sctx, net.Hosts[0], store, p2p.BlockServerConfig{InFlight: 3})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := r.Get(ctx, ref); err != nil {
				t.Error(err)
			}
		})
	}
	// The server takes 3 requests; each one released lets one queued
	// request in, until fewer than 3 remain.
	for left := 10; left > 0; left-- {
		waitFor(t, fmt.Sprintf("%d requests in the store", min(left, 3)), func() bool {
			store.mu.Lock()
			defer store.mu.Unlock()
			return store.now >= min(left, 3)
		})
		store.release <- struct{}{}
	}
	wg.Wait()
	if store.max != 3 {
		t.Fatalf("server handled %d requests at once, want 3", store.max)
	}
}

// waitFor waits up to 10 s for cond, failing the test if it does not hold
// by then.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countingStore counts the Gets it has served.
type countingStore struct {
	mem.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, ref)
}

// A block whose file on the serving peer's disk is corrupt reaches the
// caller as Integrity, and the serving peer drops its bad copy.
func TestCorruptOnServerDisk(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	ds, err := disk.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2p.ServeBlocks(sctx, net.Hosts[0], ds, p2p.BlockServerConfig{CanPut: allowAll})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	data := blockstest.Block(9, 70000)
	ref, err := r.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := blocks.ParseRef(ref)
	name := ds.Path(d)
	data[100] ^= 1
	if err := os.WriteFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, ref); !errors.Is(err, spindle.Integrity) {
		t.Fatalf("Get of a block corrupt on the server: %v, want Integrity", err)
	}
	if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("server kept its corrupt copy: %v", err)
	}
	if _, err := r.Get(ctx, ref); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("second Get: %v, want NotExist", err)
	}
}

// A peer that sends requests but never reads the answers loses its stream
// and does not keep other peers from being served.
func TestStalledReaderReleasesSlots(t *testing.T) {
	ctx := context.Background()
	tcp := p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}}
	srv, evil, honest := newHost(t, tcp), newHost(t, tcp), newHost(t, tcp)
	store := new(countingStore)
	var refs []spindle.Ref
	for i := range 4 {
		ref, _ := store.Put(ctx, blockstest.Block(uint64(i), spindle.MaxBlockSize))
		refs = append(refs, ref)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2p.ServeBlocks(sctx, srv, store, p2p.BlockServerConfig{InFlight: 4, ServerInFlight: 4, SendTimeout: 300 * time.Millisecond})
	for _, h := range []host.Host{evil, honest} {
		if _, err := p2p.Connect(ctx, h, p2p.Addrs(srv)[0]); err != nil {
			t.Fatal(err)
		}
	}
	// Ask for 64 MiB of blocks and read none of them: more than flow
	// control lets the server send.
	s, err := evil.NewStream(ctx, srv.ID(), p2p.BlockProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	for i := range 64 {
		var id [8]byte
		binary.BigEndian.PutUint64(id[:], uint64(i))
		if _, err := s.Write(frame([]byte{1}, id[:], []byte(refs[i%len(refs)]))); err != nil {
			break
		}
	}
	// The server has taken as many of the stalled peer's requests as it
	// serves at once, and cannot send their answers.
	waitFor(t, "the server to fill its slots", func() bool { return store.gets.Load() >= 4 })
	gctx, gcancel := context.WithTimeout(ctx, 10*time.Second)
	defer gcancel()
	if _, err := remote(t, honest, srv.ID()).Get(gctx, refs[0]); err != nil {
		t.Fatalf("Get while another peer stalls: %v", err)
	}
}

// peerStore records the peer that ServeBlocks names for each call.
type peerStore struct {
	spindle.BlockStore
	mu    sync.Mutex
	peers []peer.ID
}

func (s *peerStore) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	p, ok := p2p.BlockPeer(ctx)
	if !ok {
		return "", errors.New("no peer in the context of Put")
	}
	s.mu.Lock()
	s.peers = append(s.peers, p)
	s.mu.Unlock()
	return s.BlockStore.Put(ctx, data)
}

// The store behind ServeBlocks learns which peer asks.
func TestBlockPeer(t *testing.T) {
	net := p2ptest.NewNet(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ps := &peerStore{BlockStore: new(mem.Store)}
	p2p.ServeBlocks(ctx, net.Hosts[0], ps, p2p.BlockServerConfig{CanPut: allowAll})
	for _, h := range net.Hosts[1:] {
		if _, err := remote(t, h, net.Hosts[0].ID()).Put(ctx, []byte("from "+h.ID().String())); err != nil {
			t.Fatal(err)
		}
	}
	if len(ps.peers) != 2 || ps.peers[0] != net.Hosts[1].ID() || ps.peers[1] != net.Hosts[2].ID() {
		t.Fatalf("BlockPeer named %v, want hosts 1 and 2", ps.peers)
	}
	if _, ok := p2p.BlockPeer(ctx); ok {
		t.Fatal("BlockPeer found a peer in a plain context")
	}
}

// A has request says whether the server holds a block, without sending
// it: no for a block it lacks or holds damaged, an error for a bad ref or
// a peer that may not ask; the server's own Has answers when it has one.
func TestRemoteHas(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 4)
	ds, err := disk.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer ds.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2p.ServeBlocks(sctx, net.Hosts[0], ds, p2p.BlockServerConfig{CanPut: allowAll})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	data := blockstest.Block(11, 70000)
	ref, err := r.Put(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	other := blocks.RefOf([]byte("a block nobody put"))
	if held, err := r.Has(ctx, ref); err != nil || !held {
		t.Fatalf("Has of a block held: %v, %v; want true", held, err)
	}
	if held, err := r.Has(ctx, other); err != nil || held {
		t.Fatalf("Has of a block not held: %v, %v; want false", held, err)
	}
	if _, err := r.Has(ctx, "not a ref"); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Has of a bad ref: %v, want Invalid", err)
	}
	// A damaged copy is not held.
	d, _ := blocks.ParseRef(ref)
	damaged := bytes.Clone(data)
	damaged[100] ^= 1
	if err := os.WriteFile(ds.Path(d), damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	if held, err := r.Has(ctx, ref); err != nil || held {
		t.Fatalf("Has of a block damaged on the server's disk: %v, %v; want false", held, err)
	}

	// The server's Has answers, and CanGet decides who may ask.
	var asked atomic.Int64
	p2p.ServeBlocks(sctx, net.Hosts[2], new(mem.Store), p2p.BlockServerConfig{
		CanGet: func(p peer.ID) bool { return p == net.Hosts[1].ID() },
		Has: func(_ context.Context, r spindle.Ref) (bool, error) {
			asked.Add(1)
			return r == other, nil
		},
	})
	if held, err := remote(t, net.Hosts[1], net.Hosts[2].ID()).Has(ctx, other); err != nil || !held || asked.Load() != 1 {
		t.Fatalf("Has through the server's Has: %v, %v, asked %d times; want true, once", held, err, asked.Load())
	}
	if _, err := remote(t, net.Hosts[3], net.Hosts[2].ID()).Has(ctx, other); !errors.Is(err, spindle.Permission) {
		t.Fatalf("Has by a peer that may not get: %v, want Permission", err)
	}
}

// A has answer that is not one byte 0 or 1 is refused.
func TestHostileHasAnswer(t *testing.T) {
	ctx := context.Background()
	for _, answer := range [][]byte{{}, {2}, {1, 1}} {
		net := p2ptest.NewNet(t, 2)
		hostileServer(net.Hosts[0], func(op byte, id, body []byte) []byte {
			return frame([]byte{0}, id, answer)
		})
		r := remote(t, net.Hosts[1], net.Hosts[0].ID())
		if held, err := r.Has(ctx, blocks.RefOf([]byte("x"))); !errors.Is(err, spindle.Invalid) || held {
			t.Errorf("Has answered %x: %v, %v; want Invalid", answer, held, err)
		}
	}
}

// A remote store counts the bytes its peer sent, over every stream it
// has had.
func TestRemoteStoreReceived(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	serve(t, srv, p2p.BlockServerConfig{CanPut: allowAll})
	r := remote(t, cli, srv.ID())
	if n := r.Received(); n != 0 {
		t.Fatalf("Received before any call = %d", n)
	}
	block := bytes.Repeat([]byte("r"), 100000)
	ref, err := r.Put(ctx, block)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
	first := r.Received()
	if first < int64(len(block)) {
		t.Fatalf("Received after a get of %d bytes = %d", len(block), first)
	}
	if err := net.Mock.DisconnectPeers(srv.ID(), cli.ID()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the disconnect", func() bool { return cli.Network().Connectedness(srv.ID()) != network.Connected })
	if _, err := r.Get(ctx, ref); err != nil {
		t.Fatalf("Get after a disconnect: %v", err)
	}
	if n := r.Received(); n < first+int64(len(block)) {
		t.Fatalf("Received after a second get on a new stream = %d, want at least %d", n, first+int64(len(block)))
	}
}

// A call abandoned while the peer works on it is owed until its answer
// arrives, which the store then drops: the peer was still sending it.
func TestRemoteStoreOwed(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	store := &slowStore{release: make(chan struct{})}
	ref, _ := store.Put(ctx, []byte("owed"))
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p2p.ServeBlocks(sctx, net.Hosts[0], store, p2p.BlockServerConfig{})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	if n := r.Owed(); n != 0 {
		t.Fatalf("Owed before any call = %d", n)
	}
	gctx, gcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := r.Get(gctx, ref)
		done <- err
	}()
	waitFor(t, "the request in the store", func() bool {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.now == 1
	})
	gcancel()
	if err := <-done; !errors.Is(err, spindle.Transient) {
		t.Fatalf("abandoned Get returned %v, want Transient", err)
	}
	if n := r.Owed(); n != 1 {
		t.Fatalf("Owed after one call was abandoned = %d, want 1", n)
	}
	store.release <- struct{}{}
	waitFor(t, "the abandoned answer", func() bool { return r.Owed() == 0 })
	// The stream still serves.
	go func() { store.release <- struct{}{} }()
	if data, err := r.Get(ctx, ref); err != nil || string(data) != "owed" {
		t.Fatalf("Get after the abandoned answer: %q, %v", data, err)
	}
}
