package keyraft

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// BenchmarkLookupServedVerified measures key lookups as a client that
// checks the transparency log gets them from one member, on both cores:
// the member finds the record, makes its inclusion proof against its
// signed tree head and encodes it; the client decodes the proof, checks
// the head's signature and the inclusion proof, and checks the head
// against the newest one it has seen (a Checker). The transport between
// them is left out; node/client's BenchmarkProvedLookup adds it.
func BenchmarkLookupServedVerified(b *testing.B) {
	c, names := lookupCluster(b)
	ctx := ctxT(b)
	// The client follows the cluster's members, as node/client does.
	chk, err := keylog.NewFollowingChecker(nil, c.VerifierKey())
	if err != nil {
		b.Fatal(err)
	}
	head, err := c.Head(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := chk.Update(ctx, head, c); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			name := names[next.Add(1)%int64(len(names))]
			p, err := c.LookupProof(ctx, name)
			if err != nil {
				b.Error(err)
				return
			}
			data, err := p.MarshalBinary()
			if err != nil {
				b.Error(err)
				return
			}
			q, err := keylog.UnmarshalProof(data)
			if err != nil {
				b.Error(err)
				return
			}
			u, err := chk.VerifyLookup(ctx, q, name, c)
			if err != nil || u.Name != name {
				b.Errorf("verify %s: %v", name, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// A lookup proved against the head the checker has already accepted skips
// the head's signature check, and nothing else: a record that does not
// match its proof, a wrong index, or another user's record are refused.
func TestCheckerKnownHead(t *testing.T) {
	c := memCluster(t)
	ctx := ctxT(t)
	ss := populate(t, c, 0, 5)
	chk, err := keylog.NewChecker(c.VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	p := mustProof(t, c, ss[2].name)
	if _, err := chk.VerifyLookup(ctx, p, ss[2].name, c); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chk.Head(), p.Head) {
		t.Fatal("the checker did not take the head")
	}
	other := mustProof(t, c, ss[3].name)
	bad := *p
	bad.Record = other.Record
	wrongIndex := *p
	wrongIndex.Index = 3
	for _, tc := range []struct {
		what string
		p    *keylog.Proof
		name spindle.UserName
	}{
		{"record of another leaf", &bad, ss[2].name},
		{"wrong index", &wrongIndex, ss[2].name},
		{"record of another user", other, ss[2].name},
	} {
		if _, err := chk.VerifyLookup(ctx, tc.p, tc.name, c); !errors.Is(err, spindle.Integrity) {
			t.Errorf("%s against the known head: %v, want Integrity", tc.what, err)
		}
	}
	if u, err := chk.VerifyLookup(ctx, other, ss[3].name, c); err != nil || u.Name != ss[3].name {
		t.Errorf("honest proof against the known head: %v", err)
	}
}
