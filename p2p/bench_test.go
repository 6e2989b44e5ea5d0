package p2p_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/blockstest"
	"spindle.dev/blocks/disk"
	"spindle.dev/p2p"
)

// sinkStore is a block store for measuring the network path alone: Put
// checks and hashes the block like every store, then drops it; Get serves
// the blocks it was preloaded with, checked like every store does.
type sinkStore struct{ m map[spindle.Ref][]byte }

func (s *sinkStore) Put(ctx context.Context, data []byte) (spindle.Ref, error) {
	ref, _, err := blocks.Receive(data)
	return ref, err
}

func (s *sinkStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, ok := s.m[ref]
	if !ok {
		return nil, spindle.E(spindle.NotExist)
	}
	if err := blocks.Check(ref, data); err != nil {
		return nil, err
	}
	return data, nil
}

// benchPair returns a client's RemoteStore for a server on another host,
// over real loopback TCP (or QUIC) in this process, and the server's
// store.
func benchPair(b *testing.B, listen string) (*p2p.RemoteStore, *sinkStore) {
	var srv, cli host.Host
	if listen == "unix" {
		dir, err := os.MkdirTemp("", "spbench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		srv = newLocalHost(b, p2p.LocalConfig{Socket: filepath.Join(dir, p2p.SocketFile)})
		cli = newLocalHost(b, p2p.LocalConfig{})
	} else {
		cfg := p2p.Config{ListenAddrs: []string{listen}}
		srv, cli = newHost(b, cfg), newHost(b, cfg)
	}
	store := &sinkStore{m: map[spindle.Ref][]byte{}}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	p2p.ServeBlocks(ctx, srv, store, p2p.BlockServerConfig{CanPut: allowAll})
	if _, err := p2p.Connect(context.Background(), cli, p2p.Addrs(srv)[0]); err != nil {
		b.Fatal(err)
	}
	return remote(b, cli, srv.ID()), store
}

// benchRemote runs op on 1 MiB blocks with 16 calls in flight.
func benchRemote(b *testing.B, listen string, get bool) {
	r, store := benchPair(b, listen)
	ctx := context.Background()
	var refs []spindle.Ref
	if get {
		for i := range 32 {
			data := blockstest.Block(uint64(i), spindle.MaxBlockSize)
			ref := blocks.RefOf(data)
			store.m[ref] = data
			refs = append(refs, ref)
		}
	}
	var seed atomic.Uint64
	b.SetBytes(spindle.MaxBlockSize)
	b.SetParallelism(8) // 16 in flight on 2 cores.
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() {
		// CPU time per block, both ends together: on a loaded machine the
		// wall-clock rate understates what the code can do.
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
	}()
	b.RunParallel(func(pb *testing.PB) {
		var data []byte
		if !get {
			data = blockstest.Block(seed.Add(1)+1000, spindle.MaxBlockSize)
		}
		i := uint64(0)
		for pb.Next() {
			i++
			if get {
				if _, err := r.Get(ctx, refs[i%uint64(len(refs))]); err != nil {
					b.Error(err)
					return
				}
				continue
			}
			data[0], data[1], data[2], data[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			if _, err := r.Put(ctx, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkRemoteGetUnix(b *testing.B) { benchRemote(b, "unix", true) }
func BenchmarkRemotePutUnix(b *testing.B) { benchRemote(b, "unix", false) }
func BenchmarkRemoteGetTCP(b *testing.B)  { benchRemote(b, "/ip4/127.0.0.1/tcp/0", true) }
func BenchmarkRemotePutTCP(b *testing.B)  { benchRemote(b, "/ip4/127.0.0.1/tcp/0", false) }
func BenchmarkRemoteGetQUIC(b *testing.B) { benchRemote(b, "/ip4/127.0.0.1/udp/0/quic-v1", true) }
func BenchmarkRemotePutQUIC(b *testing.B) { benchRemote(b, "/ip4/127.0.0.1/udp/0/quic-v1", false) }

// cpuTime returns the CPU time used by this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRemotePutDiskTCP stores 1 MiB blocks, 16 in flight, in a disk
// store on another host over loopback TCP: the path of a file upload.
func BenchmarkRemotePutDiskTCP(b *testing.B) {
	cfg := p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}}
	srv, cli := newHost(b, cfg), newHost(b, cfg)
	ds, err := disk.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer ds.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p2p.ServeBlocks(ctx, srv, ds, p2p.BlockServerConfig{CanPut: allowAll})
	if _, err := p2p.Connect(ctx, cli, p2p.Addrs(srv)[0]); err != nil {
		b.Fatal(err)
	}
	r := remote(b, cli, srv.ID())
	var seed atomic.Uint64
	b.SetBytes(spindle.MaxBlockSize)
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		data := blockstest.Block(seed.Add(1), spindle.MaxBlockSize)
		i := uint64(0)
		for pb.Next() {
			i++
			data[0], data[1], data[2], data[3] = byte(i), byte(i>>8), byte(i>>16), byte(i>>24)
			if _, err := r.Put(ctx, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkCallTCP measures one small request/response call, on a new
// stream each time, over loopback TCP.
func BenchmarkCallTCP(b *testing.B) {
	cfg := p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}}
	srv, cli := newHost(b, cfg), newHost(b, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p2p.Handle(ctx, srv, echoProto, 0, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		return req, nil
	})
	if _, err := p2p.Connect(ctx, cli, p2p.Addrs(srv)[0]); err != nil {
		b.Fatal(err)
	}
	req := make([]byte, 200)
	for b.Loop() {
		if _, err := p2p.Call(ctx, cli, srv.ID(), echoProto, req, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func newLocalHost(t testing.TB, cfg p2p.LocalConfig) host.Host {
	t.Helper()
	h, err := p2p.NewLocalHost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
