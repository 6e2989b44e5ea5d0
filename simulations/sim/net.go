// Package sim runs Spindle's real components at network scale: real
// libp2p hosts, the real private DHT (p2p.NewDHT), real replicated block
// stores (blocks/replica) and real key-cluster members (keyraft), all in
// one process over libp2p's in-memory network (mocknet). Nothing in the
// components knows it is simulated: scenarios use their exported
// configuration only.
//
// The seed fixes everything the scenario chooses: peer identities, link
// latencies, who looks up what, the churn schedule, the file contents.
// What the network then does runs in real time, so timings vary from run
// to run; counts that do not depend on timing (successes, copies held)
// are the same for the same seed.
package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"spindle.dev"
	"spindle.dev/blocks/mem"
	"spindle.dev/blocks/replica"
	"spindle.dev/p2p"
	"spindle.dev/p2p/dht"
)

// NetConfig describes a simulated network.
type NetConfig struct {
	Nodes int
	Seed  uint64
	// RTT, if set, draws the round-trip time of the link between nodes i
	// and j; each direction then takes half of it.
	RTT func(rng *rand.Rand) time.Duration
	// Replica configures each node's replicated store. With Replicas 0
	// the nodes run the DHT only.
	Replica replica.Config
	// Ready bounds the wait for routing tables to fill.
	Ready time.Duration
}

// A Node is one simulated machine: a host, its DHT and, if the network
// has them, its memory block store and the replicated store in front of
// it.
type Node struct {
	Index int
	Host  host.Host
	DHT   *kad.IpfsDHT
	Local *mem.Store
	Store *replica.Store

	// Served counts the blocks this node's server sent to other nodes.
	Served atomic.Int64

	cancel context.CancelFunc
	online bool
}

// counted is a node's block server that counts the blocks it serves.
type counted struct {
	spindle.BlockStore
	n *Node
}

func (c counted) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	data, err := c.BlockStore.Get(ctx, ref)
	if err == nil {
		c.n.Served.Add(1)
	}
	return data, err
}

// A Net is a simulated network of Nodes.
type Net struct {
	Mock  mocknet.Mocknet
	Nodes []*Node
	rtt   map[[2]int]time.Duration // One per linked pair, i < j.
	mu    sync.Mutex               // Guards links and Node.online.
}

// seededReader turns a seed into a deterministic stream of bytes, for keys.
func seededReader(seed uint64, i int) io.Reader {
	var s [32]byte
	for b := range 8 {
		s[b] = byte(seed >> (8 * b))
		s[8+b] = byte(uint64(i) >> (8 * b))
	}
	s[31] = 0x5d
	return rand.NewChaCha8(s)
}

// NewNet starts cfg.Nodes nodes, links them all, joins each to the DHT
// through node 0, and waits until every routing table holds
// min(Nodes−1, 20) peers. Close stops it.
func NewNet(ctx context.Context, cfg NetConfig) (*Net, error) {
	if cfg.Nodes < 2 {
		return nil, fmt.Errorf("a network needs at least 2 nodes, not %d", cfg.Nodes)
	}
	if cfg.Ready == 0 {
		cfg.Ready = 5 * time.Minute
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x51d1e))
	n := &Net{Mock: mocknet.New(), rtt: make(map[[2]int]time.Duration)}
	for i := range cfg.Nodes {
		sk, _, err := crypto.GenerateEd25519Key(seededReader(cfg.Seed, i))
		if err != nil {
			n.Close()
			return nil, err
		}
		a := ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i>>16&255, i>>8&255, i&255))
		h, err := n.Mock.AddPeer(sk, a)
		if err != nil {
			n.Close()
			return nil, err
		}
		n.Nodes = append(n.Nodes, &Node{Index: i, Host: h, online: true})
	}
	for i := range n.Nodes {
		for j := i + 1; j < len(n.Nodes); j++ {
			var d time.Duration
			if cfg.RTT != nil {
				d = cfg.RTT(rng)
			}
			n.rtt[[2]int{i, j}] = d
			if err := n.link(i, j); err != nil {
				n.Close()
				return nil, err
			}
		}
	}
	boot := []spindle.PeerAddr{addrOf(n.Nodes[0].Host)}
	if err := n.start(ctx, n.Nodes[0], nil, cfg.Replica); err != nil {
		n.Close()
		return nil, err
	}
	if err := parallel(ctx, 16, len(n.Nodes)-1, func(i int) error {
		return n.start(ctx, n.Nodes[i+1], boot, cfg.Replica)
	}); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.WaitTables(ctx, cfg.Ready); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// addrOf returns the full address (multiaddr with /p2p/) of h.
func addrOf(h host.Host) spindle.PeerAddr {
	return spindle.PeerAddr(fmt.Sprintf("%s/p2p/%s", h.Addrs()[0], h.ID()))
}

func (n *Net) link(i, j int) error {
	l, err := n.Mock.LinkPeers(n.Nodes[i].Host.ID(), n.Nodes[j].Host.ID())
	if err != nil {
		return err
	}
	l.SetOptions(mocknet.LinkOptions{Latency: n.rtt[[2]int{i, j}] / 2})
	return nil
}

func (n *Net) start(ctx context.Context, nd *Node, boot []spindle.PeerAddr, rc replica.Config) error {
	d, err := dht.New(ctx, nd.Host, boot)
	if err != nil {
		return err
	}
	nd.DHT = d
	if rc.Replicas == 0 {
		return nil
	}
	nd.Local = new(mem.Store)
	s, err := replica.New(nd.Host, d, nd.Local, rc)
	if err != nil {
		return err
	}
	nd.Store = s
	sctx, cancel := context.WithCancel(context.Background())
	nd.cancel = cancel
	srv, scfg := s.Server(func(peer.ID) bool { return false }, nil)
	p2p.ServeBlocks(sctx, nd.Host, counted{srv, nd}, scfg)
	return nil
}

// WaitTables waits until every online node's routing table holds
// min(online−1, 20) peers, running lookups of the node's own ID to fill
// it.
func (n *Net) WaitTables(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var online []*Node
	for _, nd := range n.Nodes {
		if n.Online(nd.Index) {
			online = append(online, nd)
		}
	}
	want := min(len(online)-1, 20)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for _, nd := range online {
		wg.Go(func() {
			for nd.DHT.RoutingTable().Size() < want {
				if time.Now().After(deadline) || ctx.Err() != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("routing table of node %d holds %d of %d peers after %v", nd.Index, nd.DHT.RoutingTable().Size(), want, within)
					}
					mu.Unlock()
					return
				}
				sem <- struct{}{}
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				nd.DHT.GetClosestPeers(lctx, string(nd.Host.ID()))
				cancel()
				<-sem
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Online reports whether node i is on the network.
func (n *Net) Online(i int) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.Nodes[i].online
}

// SetOnline takes node i off the network (its machine is switched off:
// every link to it is cut and its connections closed; it keeps its disk)
// or puts it back, linked to every online node and connected to a few.
func (n *Net) SetOnline(ctx context.Context, i int, on bool) error {
	n.mu.Lock()
	nd := n.Nodes[i]
	if nd.online == on {
		n.mu.Unlock()
		return nil
	}
	nd.online = on
	var peers []int
	for j, o := range n.Nodes {
		if j != i && o.online {
			peers = append(peers, j)
		}
	}
	n.mu.Unlock()
	p := nd.Host.ID()
	if !on {
		for _, j := range peers {
			q := n.Nodes[j].Host.ID()
			n.Mock.UnlinkPeers(p, q)
			n.Mock.DisconnectPeers(p, q)
			n.Mock.DisconnectPeers(q, p)
		}
		return nil
	}
	for _, j := range peers {
		a, b := min(i, j), max(i, j)
		if err := n.link(a, b); err != nil {
			return err
		}
	}
	// Rejoin as a restarted node does: through a few known peers.
	for k, j := range peers {
		if k == 3 {
			break
		}
		q := n.Nodes[j].Host
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		nd.Host.Connect(cctx, peer.AddrInfo{ID: q.ID(), Addrs: q.Addrs()})
		cancel()
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	nd.DHT.GetClosestPeers(lctx, string(p))
	cancel()
	return nil
}

// Close stops every node and the network.
func (n *Net) Close() {
	var wg sync.WaitGroup
	for _, nd := range n.Nodes {
		wg.Go(func() {
			if nd.cancel != nil {
				nd.cancel()
			}
			if nd.Store != nil {
				nd.Store.Close()
			}
			if nd.DHT != nil {
				nd.DHT.Close()
			}
		})
	}
	wg.Wait()
	n.Mock.Close()
}

// HomeRTT draws round-trip times between home machines: log-normal,
// median about 60 ms, clipped to 20–200 ms.
func HomeRTT(rng *rand.Rand) time.Duration {
	ms := 60 * math.Exp(0.55*rng.NormFloat64())
	return time.Duration(min(max(ms, 20), 200) * float64(time.Millisecond))
}
