package node

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// call sends req to n as a client on this machine (through the socket)
// if local, else as a peer on the network, and returns the answer.
func call(t testing.TB, n *Node, local bool, req *wire.Request) (*wire.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if local {
		ctx = context.WithValue(ctx, socketKey{}, true)
	}
	data, err := wire.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	out, err := n.ServeClient(ctx, peer.ID("caller"), data)
	if err != nil {
		t.Fatal(err)
	}
	return wire.DecodeResponse(out)
}

// change signs a configuration change of kind with op's key, following
// the configuration st, and returns its encoding.
func change(t testing.TB, op *pack.Keys, st *wire.ClusterStatus, kind, arg string, key spindle.PublicKey) []byte {
	t.Helper()
	ch := &keylog.Change{Seq: st.Seq + 1, Kind: kind, Arg: arg, Key: key}
	if err := keylog.SignChange(ch, op); err != nil {
		t.Fatal(err)
	}
	return keylog.EncodeChange(ch)
}

func status(t testing.TB, n *Node) *wire.ClusterStatus {
	t.Helper()
	resp, err := call(t, n, false, &wire.Request{Method: wire.KeyStatus})
	if err != nil {
		t.Fatal(err)
	}
	if resp.KeyStatus == nil {
		t.Fatal("key.status answered without a status")
	}
	return resp.KeyStatus
}

// A node started with -keyserver joins the cluster when an admitted node
// operator asks, serves keys from its own replica, and leaves again; a
// node operator nobody admitted cannot make it join.
func TestKeyJoinLeave(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes and a two-member key cluster")
	}
	l := netNode(t, "", nil)
	t.Cleanup(func() { l.Close() })
	m := keyNode(t, p2p.Addrs(l.Host())[0])
	op, _, err := pack.Generate("op@example.com")
	if err != nil {
		t.Fatal(err)
	}
	stranger, _, err := pack.Generate("eve@example.com")
	if err != nil {
		t.Fatal(err)
	}

	// The first operator, and the admission of op's key, through M.
	st := status(t, m)
	if st.ID != l.Host().ID().String() || len(st.Voters) != 1 || st.Seq != 0 {
		t.Fatalf("status through the non-member: %+v", st)
	}
	for _, kind := range []string{keylog.ChangeInit, keylog.ChangeAdmit} {
		arg := ""
		if kind == keylog.ChangeInit {
			arg = l.VerifierKey()
		}
		if _, err := call(t, m, false, &wire.Request{Method: wire.KeyChange, Data: change(t, op, st, kind, arg, op.PublicKey())}); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		st = status(t, m)
	}
	if st.Seq != 2 || !slices.Contains(st.Admitted, op.PublicKey()) || !slices.Contains(st.Operators, op.PublicKey()) {
		t.Fatalf("after init and admit: %+v", st)
	}

	// Only members ask a member to cosign a tree head.
	hresp, err := call(t, l, false, &wire.Request{Method: wire.KeyHead})
	if err != nil {
		t.Fatal(err)
	}
	text, _, _ := bytes.Cut(hresp.Data, []byte("\n\n"))
	text = append(text, '\n')
	if _, err := call(t, l, false, &wire.Request{Method: wire.KeyCosign, Data: text}); !errors.Is(err, spindle.Permission) {
		t.Errorf("cosign asked by a stranger: %v, want Permission", err)
	}
	creq, _ := wire.Encode(&wire.Request{Method: wire.KeyCosign, Data: text})
	out, err := l.ServeClient(context.Background(), l.Host().ID(), creq)
	if err != nil {
		t.Fatal(err)
	}
	if signed, err := wire.DecodeResponse(out); err != nil || !bytes.HasPrefix(signed.Data, text) {
		t.Errorf("cosign asked by a member: %v, %+v", err, signed)
	}

	// Hostile changes, each refused with nothing changed: garbage, a
	// change signed by a key that is no operator's, a replayed one.
	initChange := change(t, op, &wire.ClusterStatus{Seq: 0}, keylog.ChangeInit, l.VerifierKey(), op.PublicKey())
	for _, c := range []struct {
		what string
		data []byte
		kind spindle.Kind
	}{
		{"garbage", []byte("not a change"), spindle.Invalid},
		{"an admission signed by a stranger", change(t, stranger, st, keylog.ChangeAdmit, "", stranger.PublicKey()), spindle.Permission},
		{"a policy change signed by a stranger", change(t, stranger, st, keylog.ChangePolicy, keylog.PolicyDomain, ""), spindle.Permission},
		{"the init change replayed", initChange, spindle.Invalid},
	} {
		if _, err := call(t, m, false, &wire.Request{Method: wire.KeyChange, Data: c.data}); !errors.Is(err, c.kind) {
			t.Errorf("%s: %v, want %v", c.what, err, c.kind)
		}
	}
	if after := status(t, l); after.Seq != st.Seq || after.Policy != keylog.PolicyOpen || len(after.Admitted) != 1 {
		t.Fatalf("refused changes changed the configuration: %+v", after)
	}

	// Joining is for the operator, through the socket.
	if _, err := call(t, m, false, &wire.Request{Method: wire.KeyJoin}); !errors.Is(err, spindle.Permission) {
		t.Fatalf("key.join over the network: %v, want Permission", err)
	}
	resp, err := call(t, m, true, &wire.Request{Method: wire.KeyJoin})
	if err != nil {
		t.Fatal(err)
	}
	vkey := string(resp.Data)
	// A node operator nobody admitted is refused, and nothing changes.
	_, err = call(t, m, true, &wire.Request{Method: wire.KeyJoin, Data: change(t, stranger, resp.KeyStatus, keylog.ChangeAddMember, vkey, stranger.PublicKey())})
	if !errors.Is(err, spindle.Permission) {
		t.Fatalf("join vouched for by a key nobody admitted: %v, want Permission", err)
	}
	if after := status(t, l); after.Seq != st.Seq || len(after.Voters) != 1 || len(after.Members) != 1 {
		t.Fatalf("a refused join changed the cluster: %+v", after)
	}
	if m.kst().keys != nil {
		t.Fatal("a refused join made the node a member")
	}
	// The admitted operator's join.
	_, err = call(t, m, true, &wire.Request{Method: wire.KeyJoin, Data: change(t, op, resp.KeyStatus, keylog.ChangeAddMember, vkey, op.PublicKey())})
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	if m.kst().keys == nil || m.VerifierKey() != vkey {
		t.Fatal("the node joined but is no member")
	}
	st = status(t, l)
	if len(st.Voters) != 2 || st.Members[m.Host().ID().String()] != vkey {
		t.Fatalf("after the join, the leader's status: %+v", st)
	}
	// A record put through the leader reaches the new member's replica.
	ann, _, err := pack.Generate("ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	u := &spindle.User{Name: "ann@example.com", PublicKey: ann.PublicKey(), Version: 1}
	if err := keylog.Sign(u, ann); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Through the leader, whichever it is: a two-member cluster may
	// elect again under load.
	waitFor(t, time.Minute, func() string { return "no member takes ann's record" }, func() bool {
		for _, n := range []*Node{l, m} {
			if err := n.kst().keys.Put(ctx, u); err == nil {
				return true
			} else if !errors.Is(err, spindle.Transient) {
				t.Fatalf("put: %v", err)
			}
		}
		return false
	})
	waitFor(t, time.Minute, func() string { return "the new member does not have ann's record" }, func() bool {
		_, err := m.kst().keys.Lookup(ctx, "ann@example.com")
		return err == nil
	})

	// Leaving: for the operator, through the socket.
	st = status(t, m)
	leave := change(t, op, st, keylog.ChangeRemoveMember, m.Host().ID().String(), "")
	if _, err := call(t, m, false, &wire.Request{Method: wire.KeyLeave, Data: leave}); !errors.Is(err, spindle.Permission) {
		t.Fatalf("key.leave over the network: %v, want Permission", err)
	}
	if _, err := call(t, m, true, &wire.Request{Method: wire.KeyLeave, Data: leave}); err != nil {
		t.Fatalf("leave: %v", err)
	}
	if m.kst().keys != nil {
		t.Fatal("the node left but is still a member")
	}
	waitFor(t, time.Minute, func() string { return "the leader still counts the member that left" }, func() bool {
		st := status(t, l)
		return len(st.Voters) == 1 && len(st.Members) == 1
	})
	// It serves keys from the remaining member.
	if _, err := m.kst().ks.Lookup(ctx, "ann@example.com"); err != nil {
		t.Fatalf("lookup through the node that left: %v", err)
	}
}
