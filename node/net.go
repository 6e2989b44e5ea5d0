package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	kad "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"spindle.dev"
	"spindle.dev/p2p/dht"
)

// A node joins the network through its DHT: Spindle's private Kademlia
// DHT (p2p.NewDHT), in server mode on every node. The peers it meets
// there it remembers in Home/peers, most recently seen first, so that a
// restarted node rejoins without being told where the network is.

// PeersFile is the name of the file, under a node's home, that holds the
// peers it remembers.
const PeersFile = "peers"

// MaxRemembered bounds the peers in the peers file, most recently seen
// first.
const MaxRemembered = 64

const (
	// maxRememberedAddrs bounds the addresses kept for each remembered
	// peer: with MaxRemembered, the file stays under some 50 KB.
	maxRememberedAddrs = 8
	// maxPeersFile bounds what is read of a peers file.
	maxPeersFile = 256 << 10
	// rememberEvery is how often the node notes the peers of its
	// routing table (and rewrites the file if they changed), so that a
	// node that crashes still rejoins.
	rememberEvery = 10 * time.Second
	// joinTimeout bounds how long the node tries each peer it joins
	// through; New waits that long at most for the -bootstrap peers.
	joinTimeout = 10 * time.Second
	// joinParallel bounds the peers dialled at once when rejoining.
	joinParallel = 16
	// fallbackPeers bounds the remembered peers the DHT falls back on.
	fallbackPeers = 16
)

// ParseBootstrap parses the addresses of the peers to join a network
// through: multiaddrs ending in /p2p/<peer ID>, as spin node prints
// them. A bare peer ID (which names no address to dial) and a Unix
// socket (which serves only clients on the node's machine) are refused.
// The error, of kind Invalid, names the first bad address.
func ParseBootstrap(addrs []spindle.PeerAddr) ([]peer.AddrInfo, error) {
	out, err := parseBootstrap(addrs)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, err)
	}
	return out, nil
}

// parseBootstrap is ParseBootstrap with errors fit to show a user as
// they are.
func parseBootstrap(addrs []spindle.PeerAddr) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	for _, a := range addrs {
		s := strings.TrimSpace(string(a))
		if id, err := peer.Decode(s); err == nil {
			return nil, fmt.Errorf("bootstrap address %q has no network address: give the full address the peer's spin node printed, /ip4/…/tcp/…/p2p/%s", s, id)
		}
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("bad bootstrap address %q: want a multiaddr ending in /p2p/<peer ID>, as spin node prints them (%v)", s, err)
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			return nil, fmt.Errorf("bad bootstrap address %q: want a multiaddr ending in /p2p/<peer ID>, as spin node prints them (%v)", s, err)
		}
		if len(ai.Addrs) == 0 {
			return nil, fmt.Errorf("bootstrap address %q has no network address: give the full address the peer's spin node printed, /ip4/…/tcp/…/p2p/%s", s, ai.ID)
		}
		if _, err := m.ValueForProtocol(ma.P_UNIX); err == nil {
			return nil, fmt.Errorf("bootstrap address %q is a Unix socket, which serves only clients on its machine: give one of the node's network addresses", s)
		}
		out = mergeAddrInfo(out, *ai)
	}
	return out, nil
}

// mergeAddrInfo adds ai to list, joining the addresses of one peer.
func mergeAddrInfo(list []peer.AddrInfo, ai peer.AddrInfo) []peer.AddrInfo {
	for i := range list {
		if list[i].ID == ai.ID {
			for _, a := range ai.Addrs {
				if !slices.ContainsFunc(list[i].Addrs, a.Equal) {
					list[i].Addrs = append(list[i].Addrs, a)
				}
			}
			return list
		}
	}
	return append(list, peer.AddrInfo{ID: ai.ID, Addrs: slices.Clone(ai.Addrs)})
}

// startDHT starts the node's DHT and joins the network: through the
// -bootstrap peers, waiting (at most joinTimeout) until each answered or
// failed, and through the peers remembered from an earlier run, in the
// background, so that a restart is not held up by peers that have gone.
// The DHT itself falls back on both whenever its routing table empties.
func (n *Node) startDHT(ctx context.Context) error {
	boot, err := ParseBootstrap(n.cfg.Bootstrap)
	if err != nil {
		return err
	}
	n.boot = boot
	n.book = &peerBook{log: n.log}
	if n.cfg.Home != "" {
		n.book.file = filepath.Join(n.cfg.Home, PeersFile)
		n.book.load()
	}
	d, err := dht.New(ctx, n.host, nil, append(dht.MembersOnly(n.isNetMember), kad.BootstrapPeersFunc(n.bootstrapPeers), kad.NamespacedValidator(HeadNamespace, headValidator{hosts: n.dirHosts.get}), kad.NamespacedValidator(KeyGossipNamespace, keyGossipValidator{}))...)
	if err != nil {
		return err
	}
	n.dht.Store(d)
	if len(boot) > 0 {
		jctx, cancel := context.WithTimeout(ctx, joinTimeout)
		reached := n.join(jctx, boot, true)
		cancel()
		if reached == 0 {
			n.log.Warn("joined no network: no -bootstrap peer answered; the node keeps trying them", "peers", len(boot))
		} else {
			n.log.Info("joined the network", "reached", reached, "bootstrap", len(boot))
		}
	}
	old := n.book.list()
	n.bg.Go(func() {
		if len(old) > 0 {
			reached := n.join(n.ctx, old, false)
			n.log.Info("rejoined through remembered peers", "reached", reached, "remembered", len(old))
		}
		n.rememberLoop()
	})
	return nil
}

// bootstrapPeers returns the peers the DHT falls back on when its
// routing table is empty: the -bootstrap peers, then the fallbackPeers
// seen most recently. (The DHT tries them every two minutes while it has
// none, and logs each that does not answer.)
func (n *Node) bootstrapPeers() []peer.AddrInfo {
	out := slices.Clone(n.boot)
	for i, ai := range n.book.list() {
		if i == fallbackPeers {
			break
		}
		out = mergeAddrInfo(out, ai)
	}
	return out
}

// join connects to peers, joinParallel at a time and each within
// joinTimeout, and then has the DHT look for the peers nearest to this
// one, which fills its routing table. It returns how many answered.
// Failures are logged, at Warn for peers the operator named.
func (n *Node) join(ctx context.Context, peers []peer.AddrInfo, named bool) int {
	var (
		mu      sync.Mutex
		reached int
		wg      sync.WaitGroup
		slots   = make(chan struct{}, joinParallel)
	)
	for _, ai := range peers {
		if ai.ID == n.host.ID() {
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			cctx, cancel := context.WithTimeout(ctx, joinTimeout)
			defer cancel()
			if err := n.host.Connect(cctx, ai); err != nil {
				if named {
					n.log.Warn("cannot reach bootstrap peer", "peer", ai.ID, "addrs", ai.Addrs, "err", oneLine(err.Error()))
				} else {
					n.log.Debug("cannot reach remembered peer", "peer", ai.ID, "err", oneLine(err.Error()))
				}
				return
			}
			mu.Lock()
			reached++
			mu.Unlock()
		})
	}
	wg.Wait()
	if d := n.DHT(); d != nil && reached > 0 {
		d.RefreshRoutingTable() // Returns at once; the refresh runs on.
	}
	return reached
}

// rememberLoop notes the peers of the routing table a second after the
// node joined, when the first have answered, and then every
// rememberEvery until the node closes.
func (n *Node) rememberLoop() {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
			n.remember()
			t.Reset(rememberEvery)
		}
	}
}

// remember notes the peers now in the routing table as the most recently
// seen, and rewrites the peers file if that changed what it holds.
func (n *Node) remember() {
	d := n.DHT()
	if d == nil {
		return
	}
	var seen []peer.AddrInfo
	for _, p := range d.RoutingTable().ListPeers() {
		addrs := n.host.Peerstore().Addrs(p)
		if len(addrs) > maxRememberedAddrs {
			addrs = addrs[:maxRememberedAddrs]
		}
		seen = append(seen, peer.AddrInfo{ID: p, Addrs: addrs})
	}
	if err := n.book.update(seen); err != nil {
		n.log.Warn("cannot save the peers this node met", "file", n.book.file, "err", err)
	}
}

// relayCandidates returns the peers of the routing table with their
// addresses: the relays a node behind NAT may use (see p2p.NATConfig).
func (n *Node) relayCandidates() []peer.AddrInfo {
	d := n.DHT()
	if d == nil {
		return nil
	}
	var out []peer.AddrInfo
	for _, p := range d.RoutingTable().ListPeers() {
		out = append(out, peer.AddrInfo{ID: p, Addrs: n.host.Peerstore().Addrs(p)})
	}
	return out
}

// A peerBook is the list of peers a node remembers, most recently seen
// first, and the file that keeps it.
type peerBook struct {
	file string // "" for a node without a home.
	log  *slog.Logger

	mu    sync.Mutex
	peers []peer.AddrInfo
	saved []byte // What the file holds.
}

// load reads the book's file. A line that is not a peer address is
// skipped with a warning: the file is the node's own, and damage to it
// costs only the peers it held.
func (b *peerBook) load() {
	f, err := os.Open(b.file)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, maxPeersFile))
		f.Close()
	}
	if err != nil {
		b.log.Warn("cannot read the peers remembered; starting without them", "file", b.file, "err", err)
		return
	}
	peers, bad := parsePeers(data)
	if bad > 0 {
		b.log.Warn("skipped lines of the peers file that are not peer addresses", "file", b.file, "lines", bad)
	}
	b.mu.Lock()
	b.peers, b.saved = peers, data
	b.mu.Unlock()
}

// parsePeers parses the text of a peers file: one multiaddr ending in
// /p2p/<peer ID> a line, the lines of each peer together, most recently
// seen first; blank lines and lines starting with # are skipped. It
// returns at most MaxRemembered peers, and how many lines it could not
// parse.
func parsePeers(data []byte) (peers []peer.AddrInfo, bad int) {
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m, err := ma.NewMultiaddr(line)
		if err != nil {
			bad++
			continue
		}
		ai, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil || len(ai.Addrs) == 0 {
			bad++
			continue
		}
		if !slices.ContainsFunc(peers, func(p peer.AddrInfo) bool { return p.ID == ai.ID }) && len(peers) == MaxRemembered {
			continue
		}
		peers = mergeAddrInfo(peers, *ai)
	}
	for i := range peers {
		if len(peers[i].Addrs) > maxRememberedAddrs {
			peers[i].Addrs = peers[i].Addrs[:maxRememberedAddrs]
		}
	}
	return peers, bad
}

// formatPeers returns the text of a peers file that holds peers.
func formatPeers(peers []peer.AddrInfo) []byte {
	var b strings.Builder
	b.WriteString("# Peers this Spindle node has met, most recently seen first; the node rewrites this file.\n")
	for _, ai := range peers {
		for _, a := range ai.Addrs {
			fmt.Fprintf(&b, "%s/p2p/%s\n", a, ai.ID)
		}
	}
	return []byte(b.String())
}

// list returns the peers remembered, most recently seen first.
func (b *peerBook) list() []peer.AddrInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.peers)
}

// update puts the peers seen now first, in the order the book had them
// (peers new to it after those it knew), the others after them, keeps
// MaxRemembered, and rewrites the file if its text changed.
func (b *peerBook) update(seen []peer.AddrInfo) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	isSeen := make(map[peer.ID]peer.AddrInfo, len(seen))
	for _, ai := range seen {
		if len(ai.Addrs) > 0 {
			isSeen[ai.ID] = ai
		}
	}
	var now, before []peer.AddrInfo
	for _, ai := range b.peers {
		if s, ok := isSeen[ai.ID]; ok {
			now = append(now, s)
			delete(isSeen, ai.ID)
		} else {
			before = append(before, ai)
		}
	}
	for _, ai := range seen {
		if s, ok := isSeen[ai.ID]; ok {
			now = append(now, s)
			delete(isSeen, ai.ID)
		}
	}
	peers := append(now, before...)
	if len(peers) > MaxRemembered {
		peers = peers[:MaxRemembered]
	}
	b.peers = peers
	text := formatPeers(peers)
	if b.file == "" || string(text) == string(b.saved) {
		return nil
	}
	if err := spindle.ReplaceFile(b.file, text, 0o600, true); err != nil {
		return err
	}
	b.saved = text
	return nil
}

// reachability returns what AutoNAT found of the host's reachability
// from outside: "public", "private" or "unknown".
func (n *Node) reachability() string {
	if h, ok := n.host.(interface{ Reachability() network.Reachability }); ok {
		switch h.Reachability() {
		case network.ReachabilityPublic:
			return "public"
		case network.ReachabilityPrivate:
			return "private"
		}
	}
	return "unknown"
}

// loopbackOnly reports whether the listen addresses (empty: p2p's
// defaults) are all on the loopback interface, where no router has a
// port to map.
func loopbackOnly(listen []string) bool {
	for _, a := range listen {
		m, err := ma.NewMultiaddr(a)
		if err != nil || !manet.IsIPLoopback(m) {
			return false
		}
	}
	return true
}
