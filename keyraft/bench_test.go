package keyraft

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// records returns n signed version-1 records of fresh users.
func records(b *testing.B, prefix string, n int) []*spindle.User {
	us := make([]*spindle.User, n)
	for i := range us {
		s := newSigner(b, spindle.UserName(fmt.Sprintf("%s%d@example.com", prefix, i)))
		us[i] = register(b, s, "/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWBenchHost")
	}
	return us
}

// BenchmarkPut measures committed registrations on a one-member cluster
// with bolt on disk: each Put is checked, appended to the Raft log,
// fsynced, applied and added to the transparency log.
func BenchmarkPut(b *testing.B) {
	c := diskCluster(b, b.TempDir(), true)
	defer c.Close()
	us := records(b, "seq", b.N)
	ctx := ctxT(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Put(ctx, us[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

// BenchmarkPutParallel is BenchmarkPut with concurrent clients, which Raft
// batches into fewer disk writes.
func BenchmarkPutParallel(b *testing.B) {
	c := diskCluster(b, b.TempDir(), true)
	defer c.Close()
	us := records(b, "par", b.N)
	ctx := ctxT(b)
	var next atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Put(ctx, us[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
}

// BenchmarkLookup measures a lookup in a cluster of 1,000 users.
func BenchmarkLookup(b *testing.B) {
	c, names := lookupCluster(b)
	ctx := ctxT(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Lookup(ctx, names[i%len(names)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupProof measures a lookup with its inclusion proof and
// signed tree head, and the client's verification of it.
func BenchmarkLookupProof(b *testing.B) {
	c, names := lookupCluster(b)
	ctx := ctxT(b)
	v := mustVerifiers(b, c)
	b.Run("serve", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := c.LookupProof(ctx, names[i%len(names)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify", func(b *testing.B) {
		p, err := c.LookupProof(ctx, names[7])
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, _, err := keylog.VerifyLookup(p, names[7], v); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func lookupCluster(b *testing.B) (*Cluster, []spindle.UserName) {
	c := diskCluster(b, b.TempDir(), true)
	b.Cleanup(func() { c.Close() })
	us := records(b, "look", 1000)
	var names []spindle.UserName
	var wg sync.WaitGroup
	errs := make(chan error, len(us))
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(us); i += 8 {
				errs <- c.Put(ctxT(b), us[i])
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, u := range us {
		names = append(names, u.Name)
	}
	return c, names
}

// BenchmarkPutThreeMembers measures registrations per second committed by
// a three-member cluster (loopback TCP, bolt on disk with fsync on every
// member, raft's default timing) from 64 and 256 concurrent clients, which
// the leader batches. It also reports how many registrations shared a Raft
// log entry on average, and the CPU time the process spent per
// registration (cpu-µs/put: user and system time from the start of the
// timed part until every member has applied every registration, divided by
// their number), which does not depend on how busy the machine is: the
// three members share one process, one machine and its disk, so each
// registration's signature is verified three times here, once by each.
func BenchmarkPutThreeMembers(b *testing.B) {
	for _, clients := range []int{64, 256} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) { benchPutThree(b, clients) })
	}
}

func benchPutThree(b *testing.B, clients int) {
	ms := openMembersTuned(b, 3, true, func(c *raft.Config) { c.CommitTimeout = 5 * time.Millisecond })
	live := &liveSet{ms: ms}
	leader := leaderOf(b, ms)
	us := records(b, "three", b.N)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var next atomic.Int64
	start := leader.c.raft.LastIndex()
	b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := putRouted(ctx, live, us[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	l := leaderOf(b, ms)
	for _, m := range ms {
		eventually(b, m.id+" applies every registration", func() bool { return sizeOf(m.c) == sizeOf(l.c) })
	}
	cpu := cpuTime() - cpu0
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "puts/s")
	b.ReportMetric(float64(b.N)/float64(max(1, l.c.raft.LastIndex()-start)), "puts/entry")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/put")
}

// cpuTime returns the CPU time, user and system, this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkFailover measures, in one process, the time from the leader of
// a three-member cluster (loopback TCP, bolt on disk, raft's default
// timing: a 1 s heartbeat timeout) stopping without warning to the first
// registration the survivors accept, with a client that retries every
// 10 ms. Each iteration builds a fresh cluster; only the failover is timed.
func BenchmarkFailover(b *testing.B) {
	var total time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		ms := openMembersTuned(b, 3, true, nil)
		live := &liveSet{ms: append([]*member(nil), ms...)}
		leader := leaderOf(b, ms)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := putRouted(ctx, live, records(b, fmt.Sprintf("before%d-", i), 1)[0]); err != nil {
			b.Fatal(err)
		}
		u := records(b, fmt.Sprintf("after%d-", i), 1)[0]
		b.StartTimer()
		start := time.Now()
		live.kill(b, leader)
		if err := putRouted(ctx, live, u); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		cancel()
		for _, m := range ms {
			m.c.Close()
		}
		b.StartTimer()
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
}

// BenchmarkApplyBatch measures how fast a member that did not see the
// Puts (a follower, or a member replaying its log) applies batches of 512
// fresh registrations: each batch decoded, every record's signature
// verified and checked in order, and added to the transparency log. It
// reports records applied per second.
func BenchmarkApplyBatch(b *testing.B) {
	const n = MaxBatch
	var cmds [][]byte
	for i := range 8 {
		var encs [][]byte
		for _, u := range records(b, fmt.Sprintf("apply%d-", i), n) {
			encs = append(encs, keylog.EncodeRecord(u))
		}
		cmds = append(cmds, encodeBatch(items(encs...)))
	}
	var f *fsm
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i%len(cmds) == 0 {
			b.StopTimer()
			f = newFSM() // The names are fresh again.
			b.StartTimer()
		}
		res, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Data: cmds[i%len(cmds)]}).(batchResult)
		if !ok || len(res) != n {
			b.Fatalf("Apply answered %#v", res)
		}
		if _, ok := res[n-1].(applied); !ok {
			b.Fatalf("last record of batch %d: %v", i, res[n-1])
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}
