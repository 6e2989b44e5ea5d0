package keyraft

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
)

// A member gathers the cosignature of the witness its configuration
// names on each head; a witness that has another tree than the member
// believes (here: the member forgot what it learnt) is asked again from
// the witness's own; a cosignature that does not verify does not count.
func TestMemberGathersWitness(t *testing.T) {
	ctx := ctxT(t)
	var wit atomic.Pointer[witness.Witness]
	var calls, lie atomic.Int32
	ask := func(ctx context.Context, id string, req *witness.Request) ([]byte, error) {
		calls.Add(1)
		w := wit.Load()
		if id != "w1" || w == nil {
			return nil, spindle.E(spindle.NotExist, "no such witness")
		}
		sig, err := w.Cosign(ctx, req)
		if err == nil && lie.Load() > 0 {
			// Another signature: a character in the middle of its base64
			// (the last one's low bits may be padding).
			if i := len(sig) - 20; sig[i] == 'A' {
				sig[i] = 'B'
			} else {
				sig[i] = 'A'
			}
		}
		return sig, err
	}
	_, trans := raft.NewInmemTransport(raft.ServerAddress("m0"))
	c, err := Open(ctx, Config{ID: "m0", Bootstrap: true, Logger: testLogger(t), transport: trans, tune: fast, Witness: ask})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); trans.Close() })
	w, err := witness.Open(witness.Config{Dir: t.TempDir(), ID: "w1", Boot: c.VerifierKey()})
	if err != nil {
		t.Fatal(err)
	}
	wit.Store(w)

	op := newSigner(t, "op@example.com")
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub, Arg: c.VerifierKey()}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 2, Kind: keylog.ChangeAddWitness, Arg: w.VerifierKey()}))
	mustChange(t, c, signedChange(t, op, &keylog.Change{Seq: 3, Kind: keylog.ChangeWitnessQuorum, Arg: "1"}))
	ws := map[string]string{"w1": w.VerifierKey()}

	witnessed := func(what string) {
		t.Helper()
		head, err := c.Head(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if _, err := keylog.VerifyWitnesses(head, ws, 1); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if err := c.Put(ctx, register(t, newSigner(t, "ann@example.com"))); err != nil {
		t.Fatal(err)
	}
	witnessed("first head")

	c.witMu.Lock()
	c.witViews = map[string]witnessView{}
	c.witMu.Unlock()
	if err := c.Put(ctx, register(t, newSigner(t, "bob@example.com"))); err != nil {
		t.Fatal(err)
	}
	before := calls.Load()
	witnessed("with the member's view of the witness lost")
	if n := calls.Load() - before; n != 2 {
		t.Errorf("the witness was asked %d times for the head, want 2 (stale, then from its tree)", n)
	}

	lie.Store(1)
	if err := c.Put(ctx, register(t, newSigner(t, "carol@example.com"))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Head(ctx); !errors.Is(err, spindle.Transient) {
		t.Fatalf("a head with a cosignature that does not verify: %v, want Transient", err)
	}
}

// BenchmarkWitnessedHead is a registration and a head that covers it, on
// a cluster of one, without witnesses and with one (in the same process:
// the witness's checks and its fsync, not a network round trip).
func BenchmarkWitnessedHead(b *testing.B) {
	for _, witnessed := range []bool{false, true} {
		name := "members"
		if witnessed {
			name = "witness"
		}
		b.Run(name, func(b *testing.B) {
			ctx := ctxT(b)
			var wit atomic.Pointer[witness.Witness]
			ask := func(ctx context.Context, id string, req *witness.Request) ([]byte, error) {
				return wit.Load().Cosign(ctx, req)
			}
			_, trans := raft.NewInmemTransport(raft.ServerAddress("m0"))
			c, err := Open(ctx, Config{ID: "m0", Bootstrap: true, Logger: testLogger(b), transport: trans, tune: fast, Witness: ask})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close(); trans.Close() })
			op := newSigner(b, "op@example.com")
			change := func(ch *keylog.Change) {
				if err := keylog.SignChange(ch, op); err != nil {
					b.Fatal(err)
				}
				if err := c.Change(ctx, ch); err != nil {
					b.Fatal(err)
				}
			}
			change(&keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.pub, Arg: c.VerifierKey()})
			if witnessed {
				w, err := witness.Open(witness.Config{Dir: b.TempDir(), ID: "w1", Boot: c.VerifierKey()})
				if err != nil {
					b.Fatal(err)
				}
				wit.Store(w)
				change(&keylog.Change{Seq: 2, Kind: keylog.ChangeAddWitness, Arg: w.VerifierKey()})
				change(&keylog.Change{Seq: 3, Kind: keylog.ChangeWitnessQuorum, Arg: "1"})
			}
			users := make([]*spindle.User, b.N)
			for i := range users {
				users[i] = register(b, newSigner(b, spindle.UserName(fmt.Sprintf("u%d@example.com", i))))
			}
			b.ResetTimer()
			for _, u := range users {
				if err := c.Put(ctx, u); err != nil {
					b.Fatal(err)
				}
				if _, err := c.Head(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
