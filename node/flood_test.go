package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

// floodConns is how many idle TCP connections the flood tests open: more
// than libp2p's default limit on connections that have not finished their
// handshake (about 35 for a node's memory), which locked every client out
// for the 15 s of libp2p's handshake deadline.
const floodConns = 96

// tcpAddr returns the node's TCP address, as host:port and as the peer
// address a client dials.
func tcpAddr(t *testing.T, n *Node) (string, spindle.PeerAddr) {
	t.Helper()
	for _, a := range n.Addrs() {
		m, err := ma.NewMultiaddr(string(a))
		if err != nil {
			continue
		}
		if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
			continue
		}
		na, err := manet.ToNetAddr(m.Decapsulate(ma.StringCast("/p2p/" + n.host.ID().String())))
		if err != nil {
			t.Fatal(err)
		}
		return na.String(), a
	}
	t.Fatal("node has no TCP address")
	return "", ""
}

// flood opens count idle TCP connections to addr that never start a
// handshake, and closes them when the test ends.
func flood(t *testing.T, addr string, count int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, count)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range count {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("flood connection %d: %v", len(conns), err)
		}
		conns = append(conns, c)
	}
	return conns
}

// Idle connections that never authenticate cannot lock a real client out:
// with a bounded flood of them open, from the client's own address, the
// client connects, signs in and is served within a few seconds.
func TestIdleFloodLeavesRoomForClients(t *testing.T) {
	n := startNode(t, t.TempDir())
	defer n.Close()
	hostPort, peerAddr := tcpAddr(t, n)
	flood(t, hostPort, floodConns)
	// Let the node accept them all before the client comes.
	time.Sleep(200 * time.Millisecond)

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	keys, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: peerAddr, Logger: testLogger(t)})
	if err != nil {
		t.Fatalf("client locked out by %d idle connections: %v", floodConns, err)
	}
	defer c.Close()
	if err := c.Signup(ctx); err != nil {
		t.Fatalf("signup behind %d idle connections: %v", floodConns, err)
	}
	if _, err := c.Put(ctx, "@/x", strings.NewReader("x"), 0, nil); err != nil {
		t.Fatalf("put behind %d idle connections: %v", floodConns, err)
	}
	t.Logf("client served in %v with %d idle connections open", time.Since(start), floodConns)
}
