package p2p_test

import (
	"context"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/blocks/mem"
	"spindle.dev/p2p"
)

// Two hosts on loopback: one serves a request/response protocol and a
// block store, the other calls it and stores a block there.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	cli, err := p2p.NewHost(ctx, p2p.Config{})
	if err != nil {
		panic(err)
	}
	defer cli.Close()

	p2p.Handle(ctx, srv, "/spindle/hello/1", 1024, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
		if len(req) == 0 {
			return nil, spindle.E(spindle.Op("hello.Greet"), spindle.Invalid, "empty name")
		}
		return append([]byte("hello, "), req...), nil
	})
	p2p.ServeBlocks(ctx, srv, new(mem.Store), p2p.BlockServerConfig{
		CanPut: func(p peer.ID) bool { return p == cli.ID() },
	})

	id, err := p2p.Connect(ctx, cli, p2p.Addrs(srv)[0])
	if err != nil {
		panic(err)
	}
	resp, err := p2p.Call(ctx, cli, id, "/spindle/hello/1", []byte("ann"), 1024)
	fmt.Printf("%s %v\n", resp, err)
	_, err = p2p.Call(ctx, cli, id, "/spindle/hello/1", nil, 1024)
	fmt.Println(err)

	store := p2p.NewRemoteStore(cli, id)
	defer store.Close()
	ref, err := store.Put(ctx, []byte("a block"))
	if err != nil {
		panic(err)
	}
	data, err := store.Get(ctx, ref)
	fmt.Printf("%s %s %v\n", ref, data, err)
	// Output:
	// hello, ann <nil>
	// p2p.Call: invalid operation: hello.Greet: empty name
	// bafkreieszcozqu5c6vyw2krdmm7ina227ks5iijvqdn64cce6u3wpuutza a block <nil>
}
