package p2p_test

import (
	"context"
	"sync"
	"testing"

	"spindle.dev"
	"spindle.dev/blocks"
	"spindle.dev/blocks/mem"
	"spindle.dev/p2p"
	"spindle.dev/p2p/p2ptest"
)

// recheckStore records, for each Get, whether ServeBlocks marked it as a
// get again (p2p.Recheck).
type recheckStore struct {
	mem.Store
	mu    sync.Mutex
	marks []bool
}

func (s *recheckStore) Get(ctx context.Context, ref spindle.Ref) ([]byte, error) {
	s.mu.Lock()
	s.marks = append(s.marks, p2p.Recheck(ctx))
	s.mu.Unlock()
	return s.Store.Get(ctx, ref)
}

// Refetch reaches the server's store as a get marked as asked again;
// Get and Fetch as gets that are not. A peer that speaks only version 1
// is sent a plain get instead, which it serves.
func TestRefetchMarksGetAgain(t *testing.T) {
	ctx := context.Background()
	data := []byte("a block fetched again")
	ref := blocks.RefOf(data)
	net := p2ptest.NewNet(t, 3)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	store := new(recheckStore)
	if _, err := store.Put(ctx, data); err != nil {
		t.Fatal(err)
	}
	p2p.ServeBlocks(sctx, net.Hosts[0], store, p2p.BlockServerConfig{})
	r := remote(t, net.Hosts[1], net.Hosts[0].ID())
	for _, get := range []func(context.Context, spindle.Ref) ([]byte, error){r.Get, r.Fetch, r.Refetch} {
		if got, err := get(ctx, ref); err != nil || string(got) != string(data) {
			t.Fatalf("get = %q, %v", got, err)
		}
	}
	store.mu.Lock()
	marks := store.marks
	store.mu.Unlock()
	if len(marks) != 3 || marks[0] || marks[1] || !marks[2] {
		t.Fatalf("Get, Fetch, Refetch reached the store marked as asked again %v; want [false false true]", marks)
	}
	if _, err := r.Refetch(ctx, "bafkqaaa"); err == nil {
		t.Fatal("Refetch of a malformed ref succeeded")
	}

	var ops []byte
	hostileServerOn(net.Hosts[2], p2p.BlockProtocolV1, func(op byte, id, body []byte) []byte {
		ops = append(ops, op)
		return frame([]byte{0}, id, data)
	})
	old := remote(t, net.Hosts[1], net.Hosts[2].ID())
	if got, err := old.Refetch(ctx, ref); err != nil || string(got) != string(data) {
		t.Fatalf("Refetch from a version 1 peer = %q, %v", got, err)
	}
	if len(ops) != 1 || ops[0] != 1 {
		t.Fatalf("a version 1 peer was sent ops %v for a Refetch; want one get (1)", ops)
	}
}
