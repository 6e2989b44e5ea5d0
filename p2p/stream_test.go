package p2p_test

import (
	"bufio"
	"context"
	"io"
	"testing"

	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

const raftProto protocol.ID = "/spindle/test-raft/1"

func TestListenDial(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	a, b := net.Hosts[0], net.Hosts[1]
	l, err := p2p.Listen(a, raftProto)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Addr().String() != a.ID().String() {
		t.Errorf("listener address %s, want %s", l.Addr(), a.ID())
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, _ := bufio.NewReader(c).ReadString('\n')
				io.WriteString(c, c.RemoteAddr().String()+" said "+line)
			}()
		}
	}()
	dial := p2p.Dialer(b, raftProto)
	for _, addr := range []string{string(p2p.PeerAddrOf(a.ID())), string(p2p.Addrs(a)[0])} {
		c, err := dial(ctx, addr)
		if err != nil {
			t.Fatalf("dial %s: %v", addr, err)
		}
		io.WriteString(c, "hello\n")
		got, err := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if want := b.ID().String() + " said hello\n"; got != want || err != nil {
			t.Fatalf("reply = %q, %v; want %q", got, err, want)
		}
	}
	l.Close()
	// libp2p negotiates the protocol lazily, so the refusal shows on the
	// first read.
	c, err := dial(ctx, a.ID().String())
	if err == nil {
		io.WriteString(c, "hello\n")
		_, err = bufio.NewReader(c).ReadString('\n')
		c.Close()
	}
	if err == nil {
		t.Fatal("exchange after the listener closed succeeded")
	}
}
