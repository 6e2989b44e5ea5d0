//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/libp2p/go-libp2p/core/host"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

// The key cluster's history. A few clients register, update and look up
// a few names of their own, each through the wire protocol as a client's
// node would: registrations and updates go to a member chosen at random
// (which carries them to the leader), lookups to any node as
// wire.KeyLookupLeader (answered by the leader). Each call is recorded
// with its call and return times; porcupine then checks that some order
// of them, each taking effect between its call and its return, explains
// every answer, as keyraft/linearizable_test.go does for the cluster in
// one process. A put that fails may or may not have taken effect (the
// leader may have committed it before the answer was lost): it is
// recorded as such, returning at the end of the history, and the model
// allows both.

const (
	chaosKeyClients = 3
	chaosKeyNames   = 3
	// chaosKeyPuts bounds each client's puts in a minute, below the
	// nodes' limit of key changes from one peer (node.DefaultKeyPutLimit).
	chaosKeyPuts = 8
)

// A keyOp is a call on the key cluster about one name.
type keyOp struct {
	kind    byte // 'r' register, 'u' update, 'l' lookup.
	name    int
	reg     int   // Register: its registration's number; update: the registration it updates.
	version int64 // Update: the version it makes.
}

// A keyOut is what a call returned.
type keyOut struct {
	unknown bool  // A put whose outcome the client could not learn.
	ok      bool  // Put accepted; lookup: found.
	exist   bool  // Register refused: the name is taken.
	reg     int   // Lookup: the registration whose key the record has.
	version int64 // Lookup: the record's version.
}

// A keyState is a name's record: the registration that made it (-1:
// none) and its version.
type keyState struct {
	reg     int
	version int64
}

var chaosKeyModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, o := range history {
			n := o.Input.(keyOp).name
			by[n] = append(by[n], o)
		}
		var out [][]porcupine.Operation
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() []any { return []any{keyState{reg: -1}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(keyState), input.(keyOp), output.(keyOut)
		switch in.kind {
		case 'r':
			switch {
			case out.unknown && s.reg < 0:
				return []any{s, keyState{reg: in.reg, version: 1}}
			case out.unknown:
				return []any{s}
			case out.ok && s.reg < 0:
				return []any{keyState{reg: in.reg, version: 1}}
			case out.exist && s.reg >= 0:
				return []any{s}
			}
		case 'u':
			applies := s.reg == in.reg && s.version == in.version-1
			switch {
			case out.unknown && applies:
				return []any{s, keyState{reg: in.reg, version: in.version}}
			case out.unknown:
				return []any{s}
			case out.ok && applies:
				return []any{keyState{reg: in.reg, version: in.version}}
			}
		case 'l':
			if out.ok && s.reg == out.reg && s.version == out.version || !out.ok && s.reg < 0 {
				return []any{s}
			}
		}
		return nil
	},
	Equal: func(a, b any) bool { return a.(keyState) == b.(keyState) },
	DescribeOperation: func(input, output any) string {
		in, out := input.(keyOp), output.(keyOut)
		return fmt.Sprintf("%c name%d reg%d v%d -> %+v", in.kind, in.name, in.reg, in.version, out)
	},
}

// chaosKeys runs the key clients and keeps their history.
type chaosKeys struct {
	r     *chaosRun
	hosts []host.Host // One per client.
	start time.Time

	mu      sync.Mutex // Guards the fields below.
	history []porcupine.Operation
	regOf   map[spindle.PublicKey]int // Each registration's key → its number.
	regs    int
}

func newChaosKeys(t *testing.T, r *chaosRun) *chaosKeys {
	k := &chaosKeys{r: r, start: time.Now(), regOf: map[spindle.PublicKey]int{}}
	for range chaosKeyClients {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		h, err := p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		k.hosts = append(k.hosts, h)
	}
	return k
}

func keyName(n int) spindle.UserName { return spindle.UserName(fmt.Sprintf("keylin%d@example.com", n)) }

func (k *chaosKeys) now() int64 { return int64(time.Since(k.start)) }

func (k *chaosKeys) record(c int, in keyOp, call int64, out keyOut) {
	ret := k.now()
	if out.unknown {
		ret = math.MaxInt64
	}
	k.mu.Lock()
	k.history = append(k.history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
	k.mu.Unlock()
}

// call sends req to the node i as client c's peer and returns the answer.
func (k *chaosKeys) call(ctx context.Context, c, i int, req *wire.Request) (*wire.Response, error) {
	h := k.hosts[c]
	pid, err := p2p.Connect(ctx, h, spindle.PeerAddr(k.r.nodes[i].addr))
	if err != nil {
		return nil, err
	}
	data, err := wire.Encode(req)
	if err != nil {
		return nil, err
	}
	out, err := p2p.Call(ctx, h, pid, wire.ClientProtocol, data, wire.MaxMessage)
	if err != nil {
		return nil, err
	}
	return wire.DecodeResponse(out)
}

// put sends the signed record u, with a proof that the client holds keys,
// to member i.
func (k *chaosKeys) put(ctx context.Context, c, i int, u *spindle.User, keys *pack.Keys) error {
	if err := keylog.Sign(u, keys); err != nil {
		return err
	}
	a := &wire.AuthMsg{User: u.Name, Time: spindle.Now()}
	h := k.hosts[c]
	pid, err := p2p.Connect(ctx, h, spindle.PeerAddr(k.r.nodes[i].addr))
	if err != nil {
		return err
	}
	a.ClientPeer, a.NodePeer = h.ID().String(), pid.String()
	if a.Sig, err = keys.Sign(a.Digest()); err != nil {
		return err
	}
	_, err = k.call(ctx, c, i, &wire.Request{Method: wire.KeyPut, Data: keylog.EncodeRecord(u), Auth: a})
	return err
}

// loop is key client c: every second or so a registration, an update of
// a record it owns, or a lookup.
func (k *chaosKeys) loop(c int, stop <-chan struct{}) {
	r := k.r
	rng := rand.New(rand.NewPCG(r.sched.Seed, uint64(400+c)))
	type owned struct {
		rec  *spindle.User
		keys *pack.Keys
		reg  int
	}
	mine := map[int]owned{}
	var puts []time.Time
	for range 100000 {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(500+rng.IntN(1000)) * time.Millisecond):
		}
		puts = slices.DeleteFunc(puts, func(at time.Time) bool { return time.Since(at) > time.Minute })
		n := rng.IntN(chaosKeyNames)
		own, isOwner := mine[n]
		canPut := len(puts) < chaosKeyPuts
		ctx, cancel := context.WithTimeout(context.Background(), chaosOpTimeout)
		r.keyOps.Add(1)
		token := r.calmToken()
		switch p := rng.IntN(4); {
		case canPut && isOwner && p == 0:
			u := keylog.Next(own.rec)
			in := keyOp{kind: 'u', name: n, reg: own.reg, version: u.Version}
			call := k.now()
			puts = append(puts, time.Now())
			err := k.put(ctx, c, rng.IntN(3), u, own.keys)
			if err != nil {
				// Perhaps applied: the version is no longer known.
				r.keyErrs.Add(1)
				r.failed("key update", token, err)
				k.record(c, in, call, keyOut{unknown: true})
				delete(mine, n)
				break
			}
			k.record(c, in, call, keyOut{ok: true})
			own.rec = u
			mine[n] = own
		case canPut && !isOwner && p == 1:
			keys, _, err := pack.Generate(keyName(n))
			if err != nil {
				r.t.Error(err)
				cancel()
				return
			}
			k.mu.Lock()
			reg := k.regs
			k.regs++
			k.regOf[keys.PublicKey()] = reg
			k.mu.Unlock()
			u := &spindle.User{Name: keyName(n), PublicKey: keys.PublicKey(), Version: 1}
			in := keyOp{kind: 'r', name: n, reg: reg}
			call := k.now()
			puts = append(puts, time.Now())
			err = k.put(ctx, c, rng.IntN(3), u, keys)
			switch {
			case err == nil:
				k.record(c, in, call, keyOut{ok: true})
				mine[n] = owned{rec: u, keys: keys, reg: reg}
			case errors.Is(err, spindle.Exist):
				k.record(c, in, call, keyOut{exist: true})
			default:
				r.keyErrs.Add(1)
				r.failed("key registration", token, err)
				k.record(c, in, call, keyOut{unknown: true})
			}
		default:
			in := keyOp{kind: 'l', name: n}
			call := k.now()
			resp, err := k.call(ctx, c, rng.IntN(len(r.nodes)), &wire.Request{Method: wire.KeyLookupLeader, User: keyName(n)})
			switch {
			case err == nil:
				u, derr := keylog.DecodeRecord(resp.Data)
				if derr != nil {
					r.violate("key lookup of %s: a record that does not decode: %v", keyName(n), derr)
					break
				}
				k.mu.Lock()
				reg, known := k.regOf[u.PublicKey]
				k.mu.Unlock()
				if !known {
					r.violate("key lookup of %s found a key no client registered", keyName(n))
					break
				}
				k.record(c, in, call, keyOut{ok: true, reg: reg, version: u.Version})
			case errors.Is(err, spindle.NotExist):
				k.record(c, in, call, keyOut{})
			default:
				// A lookup that failed changed nothing: left out.
				r.keyErrs.Add(1)
				r.failed("key lookup", token, err)
			}
		}
		cancel()
	}
}

// check runs porcupine on the history.
func (k *chaosKeys) check() {
	r := k.r
	k.mu.Lock()
	history := slices.Clone(k.history)
	k.mu.Unlock()
	counts := map[string]int{}
	for _, o := range history {
		in, out := o.Input.(keyOp), o.Output.(keyOut)
		kind := map[byte]string{'r': "registrations", 'u': "updates", 'l': "lookups"}[in.kind]
		counts[kind]++
		if out.unknown {
			counts["unknown outcomes"]++
		}
	}
	r.logf("key cluster history: %d operations %v", len(history), counts)
	r.checks.Add(1)
	res, info := porcupine.CheckOperationsVerbose(chaosKeyModel.ToModel(), history, time.Minute)
	switch res {
	case porcupine.Illegal:
		longest := 0
		for _, part := range info.PartialLinearizationsOperations() {
			longest = max(longest, len(part))
		}
		r.violate("the key cluster's history of %d operations is not linearizable (a longest linearizable prefix of a partition: %d operations)", len(history), longest)
		for _, o := range history {
			r.t.Logf("  client %d [%d, %d] %s", o.ClientId, o.Call, o.Return, chaosKeyModel.DescribeOperation(o.Input, o.Output))
		}
	case porcupine.Unknown:
		r.logf("porcupine could not decide within a minute; the key history is not judged")
	}
}
