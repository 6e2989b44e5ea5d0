package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// witnessNode starts a node that witnesses the key cluster at keys.
func witnessNode(t testing.TB, keys spindle.PeerAddr) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := New(ctx, Config{Home: t.TempDir(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, KeyServers: []spindle.PeerAddr{keys}, Witness: true, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// Once the operator names two witnesses and a quorum of one, the member
// gathers a witness's cosignature on every head it serves, and clients,
// which follow the policy through the log, take only such heads; with
// one witness down the other makes the quorum; with both down no new
// head is served, and the member says why.
func TestKeyClusterGathersWitnesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts networked nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := netNode(t, "", nil)
	t.Cleanup(func() { l.Close() })
	laddr := p2p.Addrs(l.Host())[0]
	w1, w2 := witnessNode(t, laddr), witnessNode(t, laddr)
	op, _, err := pack.Generate("op@example.com")
	if err != nil {
		t.Fatal(err)
	}
	apply := func(kind, arg string, key spindle.PublicKey) {
		t.Helper()
		if _, err := call(t, l, false, &wiretest.Request{Method: wire.KeyChange, Data: change(t, op, status(t, l), kind, arg, key)}); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	apply(keylog.ChangeInit, l.VerifierKey(), op.PublicKey())
	apply(keylog.ChangeAddWitness, w1.witness.Load().VerifierKey(), "")
	apply(keylog.ChangeAddWitness, w2.witness.Load().VerifierKey(), "")
	apply(keylog.ChangeWitnessQuorum, "1", "")
	if st := status(t, l); st.Quorum != 1 || len(st.Witnesses) != 2 {
		t.Fatalf("status after naming the witnesses: %d witnesses, quorum %d", len(st.Witnesses), st.Quorum)
	}

	// A client that follows the cluster from the start.
	ann := fwdDial(t, l, newKeys(t, "ann@example.com"))
	if err := ann.Signup(ctx); err != nil {
		t.Fatal(err)
	}
	witnessed := func(what string) {
		t.Helper()
		resp, err := call(t, l, false, &wiretest.Request{Method: wire.KeyHead})
		if err != nil {
			t.Fatal(err)
		}
		st := status(t, l)
		if ids, err := keylog.VerifyWitnesses(resp.Data, st.Witnesses, 1); err != nil || len(ids) == 0 {
			t.Fatalf("%s: the head served is not witnessed: %v", what, err)
		}
	}
	witnessed("both witnesses up")
	// Each witness gossips the head it cosigned, for clients to compare.
	head, _ := w1.witness.Load().Head()
	hi, err := keylog.ParseHead(head)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, err := w1.DHT().GetValue(ctx, KeyGossipKey(hi.N))
		hs, derr := keylog.DecodeGossip(hi.N, v)
		if err == nil && derr == nil && slices.ContainsFunc(hs, func(h []byte) bool { return bytes.Equal(h, head) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness's head of %d records is not in the DHT: %v, %v", hi.N, err, derr)
		}
	}
	if _, err := ann.LookupUser(ctx, "ann@example.com"); err != nil {
		t.Fatal(err)
	}

	w1.Close()
	bob := fwdDial(t, l, newKeys(t, "bob@example.com"))
	if err := bob.Signup(ctx); err != nil {
		t.Fatalf("sign-up with one witness of two down: %v", err)
	}
	if _, err := ann.LookupUser(ctx, "bob@example.com"); err != nil {
		t.Fatalf("lookup with one witness of two down: %v", err)
	}
	witnessed("one witness down")

	w2.Close()
	carol := fwdDial(t, l, newKeys(t, "carol@example.com"))
	err = carol.Signup(ctx)
	if err == nil {
		_, err = ann.LookupUser(ctx, "carol@example.com")
	}
	if err == nil || !errors.Is(err, spindle.Transient) && !errors.Is(err, spindle.NotExist) {
		t.Fatalf("a new record with both witnesses down: %v, want a failure for want of a witnessed head", err)
	}
	t.Logf("with both witnesses down: %v", err)
}

func newKeys(t testing.TB, user spindle.UserName) *pack.Keys {
	t.Helper()
	k, _, err := pack.Generate(user)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// BenchmarkKeyPutWitnessed is a sign-up and a lookup of its key from a
// client that follows the cluster, on a member alone, without witnesses
// and with one witness node over loopback TCP: the cost of a round of
// cosigning that asks a witness across the network.
func BenchmarkKeyPutWitnessed(b *testing.B) {
	for _, witnessed := range []bool{false, true} {
		name := "members"
		if witnessed {
			name = "witness"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			const many = 1 << 20 // No sign-up limits: every client is on 127.0.0.1.
			l, err := New(ctx, Config{Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Logger: testLogger(b), SignupsPerAddr: many, SignupsPerPrefix: many, Signups: many})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			op := newKeys(b, "op@example.com")
			apply := func(kind, arg string, key spindle.PublicKey) {
				if _, err := call(b, l, false, &wiretest.Request{Method: wire.KeyChange, Data: change(b, op, status(b, l), kind, arg, key)}); err != nil {
					b.Fatalf("%s: %v", kind, err)
				}
			}
			apply(keylog.ChangeInit, l.VerifierKey(), op.PublicKey())
			if witnessed {
				w := witnessNode(b, p2p.Addrs(l.Host())[0])
				apply(keylog.ChangeAddWitness, w.witness.Load().VerifierKey(), "")
				apply(keylog.ChangeWitnessQuorum, "1", "")
			}
			reader := fwdDial(b, l, newKeys(b, "reader@example.com"))
			if err := reader.Signup(ctx); err != nil {
				b.Fatal(err)
			}
			users := make([]*client.Client, b.N)
			for i := range users {
				users[i] = fwdDial(b, l, newKeys(b, spindle.UserName(fmt.Sprintf("u%d@example.com", i))))
			}
			b.ResetTimer()
			for i, u := range users {
				if err := u.Signup(ctx); err != nil {
					b.Fatal(err)
				}
				if _, err := reader.LookupUser(ctx, spindle.UserName(fmt.Sprintf("u%d@example.com", i))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
