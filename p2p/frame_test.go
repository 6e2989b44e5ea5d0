package p2p_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

const echoProto protocol.ID = "/spindle/test-echo/1"

func TestCall(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	p2p.Handle(ctx, srv, echoProto, 1000, func(ctx context.Context, remote peer.ID, req []byte) ([]byte, error) {
		if remote != cli.ID() {
			return nil, fmt.Errorf("request from %s, want %s", remote, cli.ID())
		}
		switch string(req) {
		case "deny":
			return nil, spindle.E(spindle.Op("test.Deny"), spindle.Permission, spindle.UserName("bob@example.com"), "no")
		case "big":
			return make([]byte, 2000), nil
		}
		return append([]byte("echo "), req...), nil
	})

	resp, err := p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("hi"), 1000)
	if err != nil || string(resp) != "echo hi" {
		t.Fatalf("Call = %q, %v", resp, err)
	}
	resp, err = p2p.Call(ctx, cli, srv.ID(), echoProto, nil, 1000)
	if err != nil || string(resp) != "echo " {
		t.Fatalf("Call with an empty request = %q, %v", resp, err)
	}

	_, err = p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("deny"), 1000)
	if !errors.Is(err, spindle.Permission) {
		t.Fatalf("Call returning a remote error: %v, want Permission", err)
	}
	want := spindle.E(spindle.Op("p2p.Call"), spindle.Permission, spindle.UserName("bob@example.com"))
	if !spindle.Match(want, err) {
		t.Errorf("remote error %v lost its user", err)
	}

	// The response exceeds what the caller accepts.
	_, err = p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("big"), 1000)
	if !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Call with an oversized response: %v, want Invalid", err)
	}

	// The request exceeds what the server accepts: the caller's Send
	// refuses it when both sides use one limit, and the server resets the
	// stream when the caller does not.
	_, err = p2p.Call(ctx, cli, srv.ID(), echoProto, make([]byte, 1001), 1000)
	if !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Call with an oversized request: %v, want Invalid", err)
	}
	_, err = p2p.Call(ctx, cli, srv.ID(), echoProto, make([]byte, 5000), 10000)
	if err == nil {
		t.Fatal("Call with a request over the server's limit succeeded")
	}

	// The server still works.
	if resp, err := p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("again"), 1000); err != nil || string(resp) != "echo again" {
		t.Fatalf("Call after hostile requests = %q, %v", resp, err)
	}
}

func TestCallCancel(t *testing.T) {
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	block := make(chan struct{})
	defer close(block)
	p2p.Handle(context.Background(), srv, echoProto, 0, func(ctx context.Context, _ peer.ID, req []byte) ([]byte, error) {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return req, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("x"), 0)
	if !errors.Is(err, spindle.Transient) {
		t.Fatalf("cancelled Call: %v, want Transient", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("cancelled Call took %v", d)
	}
}

// rawFrame encodes a frame header by hand, as a hostile peer would.
func rawFrame(tag byte, n uint32) []byte {
	b := []byte{tag, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], n)
	return b
}

func TestHostileFrames(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	errc := make(chan error, 10)
	p2p.HandleStream(ctx, srv, echoProto, 1000, func(ctx context.Context, c *p2p.Conn) error {
		for {
			msg, err := c.Recv()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				errc <- err
				return err
			}
			if err := c.Send(msg); err != nil {
				return err
			}
		}
	})
	for _, tc := range []struct {
		name  string
		bytes []byte
	}{
		{"oversized", rawFrame(1, 1<<30)},
		{"just over", append(rawFrame(1, 1001), make([]byte, 1001)...)},
		{"bad tag", append(rawFrame(7, 3), "abc"...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := cli.NewStream(ctx, srv.ID(), echoProto)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.Write(tc.bytes)
			select {
			case err := <-errc:
				if !errors.Is(err, spindle.Invalid) {
					t.Fatalf("server Recv: %v, want Invalid", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("server did not reject the frame")
			}
			s.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadAll(s); err == nil {
				t.Fatal("stream was not reset")
			}
		})
	}
	// A truncated frame is an IO error, not Invalid.
	s, err := cli.NewStream(ctx, srv.ID(), echoProto)
	if err != nil {
		t.Fatal(err)
	}
	s.Write(append(rawFrame(1, 10), "abc"...))
	s.CloseWrite()
	select {
	case err := <-errc:
		if !errors.Is(err, spindle.IO) {
			t.Fatalf("server Recv of a truncated frame: %v, want IO", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not report the truncated frame")
	}
	s.Close()

	// Honest clients are still served.
	c, err := p2p.Open(ctx, cli, srv.ID(), echoProto, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send([]byte("ok")); err != nil {
		t.Fatal(err)
	}
	if msg, err := c.Recv(); err != nil || string(msg) != "ok" {
		t.Fatalf("echo after hostile streams = %q, %v", msg, err)
	}
}

// A streaming handler sends many replies to one request, as Watch does.
func TestStreamedReplies(t *testing.T) {
	ctx := context.Background()
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	p2p.HandleStream(ctx, srv, echoProto, 0, func(ctx context.Context, c *p2p.Conn) error {
		req, err := c.Recv()
		if err != nil {
			return err
		}
		n := int(req[0])
		for i := range n {
			if err := c.Send(bytes.Repeat([]byte{byte(i)}, 100000)); err != nil {
				return err
			}
		}
		return spindle.E(spindle.NotExist, "no more")
	})
	c, err := p2p.Open(ctx, cli, srv.ID(), echoProto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send([]byte{50}); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		msg, err := c.Recv()
		if err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if len(msg) != 100000 || msg[0] != byte(i) {
			t.Fatalf("reply %d is wrong", i)
		}
	}
	if _, err := c.Recv(); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("final Recv: %v, want the handler's NotExist", err)
	}
	if _, err := c.Recv(); err != io.EOF {
		t.Fatalf("Recv after the end: %v, want io.EOF", err)
	}
}

func TestHandlerStopsWithContext(t *testing.T) {
	net := p2ptest.NewNet(t, 2)
	srv, cli := net.Hosts[0], net.Hosts[1]
	sctx, stop := context.WithCancel(context.Background())
	started := make(chan struct{})
	p2p.HandleStream(sctx, srv, echoProto, 0, func(ctx context.Context, c *p2p.Conn) error {
		close(started)
		<-ctx.Done() // A long-lived handler, such as Watch.
		return ctx.Err()
	})
	ctx := context.Background()
	c, err := p2p.Open(ctx, cli, srv.ID(), echoProto, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send([]byte("watch")); err != nil {
		t.Fatal(err)
	}
	<-started
	stop()
	if _, err := c.Recv(); err == nil || err == io.EOF {
		t.Fatalf("Recv on a stream whose server stopped: %v, want a reset", err)
	}
	if _, err := p2p.Call(ctx, cli, srv.ID(), echoProto, []byte("x"), 0); err == nil {
		t.Fatal("Call after the handler was removed succeeded")
	}
}
