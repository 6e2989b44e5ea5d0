package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// convergeWait bounds how long a mirror may take to catch up by itself,
// with no write to nudge it: a few pulls, and well under idleInterval,
// the 30 s a mirror used to wait after a failed first pull.
const convergeWait = 15 * time.Second

// waitConverged waits, at most convergeWait, until m holds the head seq
// holds, and checks that seq took no write meanwhile: the mirror caught up
// by itself.
func waitConverged(t *testing.T, owner spindle.UserName, seq, m *Node) {
	t.Helper()
	want := headOf(t, seq, owner)
	start := time.Now()
	waitFor(t, convergeWait, func() string {
		st, _ := m.MirrorStatus(context.Background(), owner)
		return fmt.Sprintf("mirror %s of %s at %d (status %+v), sequencer at %d, with no write", m.Host().ID(), owner, heldSeq(m, owner), st, want.Seq)
	}, func() bool {
		h, err := m.dir.Head(context.Background(), owner)
		return err == nil && h.Seq == want.Seq && h.Hash == want.Hash
	})
	if now := headOf(t, seq, owner); now.Seq != want.Seq {
		t.Fatalf("the sequencer moved from %d to %d while the mirror caught up: a write nudged it", want.Seq, now.Seq)
	}
	t.Logf("mirror at %d after %v", want.Seq, time.Since(start).Round(time.Millisecond))
}

// heldSeq returns the head of owner's log on n, or -1 if n does not serve
// it (damaged, being refilled).
func heldSeq(n *Node, owner spindle.UserName) int64 {
	h, err := n.dir.Head(context.Background(), owner)
	if err != nil {
		return -1
	}
	return h.Seq
}

// A restarted node, which may have missed nudges, a compaction or its own
// log, needs no write to catch up: ann's mirror H2 holds her sequencer
// H1's head within seconds of its restart after writes it missed; after a
// repair that kept an empty log; after its lookups of ann's key record
// failed for a while; after losing its log file altogether;
// after H1 compacted past H2's head; and a mirror H3 listed while it
// dropped every nudge starts copying all the same.
func TestMirrorCatchesUpWithoutWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four networked nodes and restarts one")
	}
	k, h := mirrorNodes(t, 2)
	h1, h3 := h[0], h[1]
	kaddr := p2p.Addrs(k.Host())[0]
	home := t.TempDir()
	h2 := homeNode(t, home, kaddr)
	defer func() { h2.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, _ := dialWithKeys(t, h1, annU)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	put := func(name string) {
		t.Helper()
		if _, err := annC.Put(ctx, ann(name), strings.NewReader(name), spindle.EEPack, nil); err != nil {
			t.Fatalf("ann puts %s: %v", name, err)
		}
	}
	put("a")
	waitMirrored(t, annU, h1, h2)
	logFile := filepath.Join(home, "dirlogs", string(annU)+".log")
	if _, err := os.Stat(logFile); err != nil {
		t.Fatalf("H2 holds no log file of ann: %v", err)
	}
	// restart stops H2, changes its home with fn while it is down, and
	// starts it again.
	restart := func(fn func()) {
		t.Helper()
		id := h2.Host().ID()
		h2.Close()
		fn()
		h2 = homeNode(t, home, kaddr)
		if h2.Host().ID() != id {
			t.Fatalf("H2 restarted as %s, was %s", h2.Host().ID(), id)
		}
	}

	// settle brings H2 level with H1 before a case, nudging it, so that
	// each case starts from a mirror that holds the head.
	settle := func(t *testing.T) {
		t.Helper()
		h2.mirrors.track(annU)
		waitMirrored(t, annU, h1, h2)
	}

	t.Run("restarted after missing writes", func(t *testing.T) {
		before := headOf(t, h2, annU)
		restart(func() { put("while-down-1"); put("while-down-2") })
		if got := headOf(t, h2, annU); got.Seq != before.Seq {
			t.Fatalf("H2 restarted at %d, stopped at %d", got.Seq, before.Seq)
		}
		waitConverged(t, annU, h1, h2)
	})

	t.Run("repaired to an empty log", func(t *testing.T) {
		settle(t)
		restart(func() {
			// A log cut back to nothing, as a repair that keeps no entry
			// leaves it: here its header and a torn first record, which
			// the node cuts as it opens the log.
			if err := os.Truncate(logFile, int64(len("SPDLOG1\n")+5)); err != nil {
				t.Fatal(err)
			}
		})
		if got := heldSeq(h2, annU); got > 0 {
			t.Fatalf("H2 restarted at %d with its log cut back to nothing", got)
		}
		waitConverged(t, annU, h1, h2)
	})

	t.Run("key lookups fail for a while", func(t *testing.T) {
		// As on a key cluster member whose replica has not caught up
		// since its restart: K answers H2's lookups of ann's record with
		// an error, while ann writes and H1 nudges H2.
		settle(t)
		var failing atomic.Bool
		var failed atomic.Int32
		failing.Store(true)
		h2id := h2.Host().ID()
		p2p.Handle(context.Background(), k.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
			var req wiretest.Request
			if failing.Load() && remote == h2id && wire.Decode(data, &req) == nil && req.User == annU && (req.Method == wire.KeyLookup || req.Method == wire.KeyLookupLeader) {
				failed.Add(1)
				return nil, spindle.E(spindle.Transient, req.User, "the test makes this lookup fail")
			}
			return k.ServeClient(ctx, remote, data)
		})
		defer p2p.Handle(context.Background(), k.Host(), wire.ClientProtocol, wire.MaxMessage, k.ServeClient)
		put("while-lookups-fail")
		var st MirrorStatus
		waitFor(t, mirrorWait, func() string { return fmt.Sprintf("H2's mirror status %+v: no failed lookup of ann's record", st) }, func() bool {
			st, _ = h2.MirrorStatus(ctx, annU)
			return st.Err != nil && failed.Load() > 0
		})
		t.Logf("H2 reports: %v", st.Err)
		failing.Store(false)
		waitConverged(t, annU, h1, h2)
	})

	t.Run("log file lost", func(t *testing.T) {
		settle(t)
		restart(func() {
			if err := os.Remove(logFile); err != nil {
				t.Fatal(err)
			}
		})
		if got := heldSeq(h2, annU); got > 0 {
			t.Fatalf("H2 restarted at %d without its log", got)
		}
		waitConverged(t, annU, h1, h2)
	})

	t.Run("sequencer compacted while down", func(t *testing.T) {
		settle(t)
		before := headOf(t, h2, annU)
		restart(func() {
			put("before-compaction")
			if _, err := h1.dir.Compact(ctx, annU); err != nil {
				t.Fatal(err)
			}
			put("after-compaction")
		})
		if cp, err := h1.dir.Checkpoint(ctx, annU, annU); err != nil || cp == nil || cp.Seq <= before.Seq {
			t.Fatalf("H1's checkpoint %+v, %v: want one past H2's head %d", cp, err, before.Seq)
		}
		waitConverged(t, annU, h1, h2)
		if cp, err := h2.dir.Checkpoint(ctx, annU, annU); err != nil || cp == nil {
			t.Errorf("H2 caught up without starting from H1's checkpoint: %+v, %v", cp, err)
		}
	})

	t.Run("mirror listed while dropping nudges", func(t *testing.T) {
		var dropping atomic.Bool
		var dropped atomic.Int32
		dropping.Store(true)
		p2p.Handle(context.Background(), h3.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
			var req wiretest.Request
			if dropping.Load() && wire.Decode(data, &req) == nil && req.Method == wire.DirNudge {
				dropped.Add(1)
				return nil, spindle.E(spindle.IO, "nudge dropped by the test")
			}
			return h3.ServeClient(ctx, remote, data)
		})
		if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2, h3)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, mirrorWait, func() string { return "no nudge reached H3 after ann listed it" }, func() bool { return dropped.Load() > 0 })
		// Whatever nudge was sent for the record is gone; later ones pass.
		time.Sleep(time.Second)
		dropping.Store(false)
		waitConverged(t, annU, h1, h3)
	})
}

// The operator's status lists each log a node hosts with the node's role,
// its head, its lag and the last pull error: ann's mirror H2, refusing
// an entry its sequencer H1 sends, reports itself one behind H1 with the
// error naming H1, and H1 reports where H2 stands; once H1 is honest
// again H2 reports no lag and no error. (TestStatusAccess checks that a
// writer asking over the network gets the status without the logs.)
func TestMirrorStatusListsLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three networked nodes")
	}
	_, h := mirrorNodes(t, 2)
	h1, h2 := h[0], h[1]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const annU = spindle.UserName("ann@example.com")
	annC, _ := dialWithKeys(t, h1, annU)
	if err := annC.SetDirHosts(ctx, hostAddrs(h1, h2)); err != nil {
		t.Fatal(err)
	}
	if _, err := annC.Put(ctx, ann("a"), strings.NewReader("a"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	waitMirrored(t, annU, h1, h2)

	// H1 sends H2 the next entry with a bad signature.
	var lying atomic.Bool
	lying.Store(true)
	p2p.Handle(context.Background(), h1.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := h1.ServeClient(ctx, remote, data)
		var req wiretest.Request
		var resp wiretest.Response
		if err != nil || !lying.Load() || wire.Decode(data, &req) != nil || req.Method != wire.DirMirror || wire.Decode(out, &resp) != nil || len(resp.Log) == 0 {
			return out, err
		}
		e, derr := dirlog.UnmarshalEntry(resp.Log[0])
		if derr != nil {
			return out, err
		}
		e.Sig[len(e.Sig)/2] ^= 1
		resp.Log[0] = e.Marshal()
		return wire.Encode(&resp)
	})
	defer p2p.Handle(context.Background(), h1.Host(), wire.ClientProtocol, wire.MaxMessage, h1.ServeClient)
	if _, err := annC.Put(ctx, ann("b"), strings.NewReader("b"), spindle.EEPack, nil); err != nil {
		t.Fatal(err)
	}
	seq1 := headOf(t, h1, annU).Seq
	seq2 := headOf(t, h2, annU).Seq
	if seq2 != seq1-1 {
		t.Fatalf("H2 at %d, H1 at %d: want H2 one behind", seq2, seq1)
	}
	logOf := func(n *Node) wire.LogStatus {
		t.Helper()
		resp, err := n.serveStatus(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range resp.Status.Logs {
			if l.User == annU {
				return l
			}
		}
		t.Fatalf("%s's status lists no log of %s: %+v", n.Host().ID(), annU, resp.Status.Logs)
		return wire.LogStatus{}
	}
	var l2 wire.LogStatus
	waitFor(t, mirrorWait, func() string { return fmt.Sprintf("H2's status of ann's log: %+v; want lag 1 and an error", l2) }, func() bool {
		l2 = logOf(h2)
		return l2.Lag == 1 && l2.Err != ""
	})
	t.Logf("H2: %+v", l2)
	if l2.Role != RoleMirror || l2.Seq != seq2 || l2.Source != h1.Host().ID().String() || l2.SourceSeq != seq1 || l2.Pulled == nil {
		t.Errorf("H2's status of ann's log: %+v; want a mirror at %d, pulled from H1 %s at %d", l2, seq2, h1.Host().ID(), seq1)
	}
	if !strings.Contains(l2.Err, h1.Host().ID().String()) || strings.ContainsAny(l2.Err, "\n\\") {
		t.Errorf("H2's last pull error %q: want one line naming H1 %s", l2.Err, h1.Host().ID())
	}
	var l1 wire.LogStatus
	waitFor(t, mirrorWait, func() string { return fmt.Sprintf("H1's status of ann's log: %+v; want H2 at %d", l1, seq2) }, func() bool {
		l1 = logOf(h1)
		return len(l1.Hosts) == 1 && l1.Hosts[0].Asked != nil && l1.Hosts[0].Seq == seq2
	})
	if l1.Role != RoleSequencer || l1.Seq != seq1 || l1.Lag != 0 || l1.Err != "" || l1.Hosts[0].Peer != h2.Host().ID().String() {
		t.Errorf("H1's status of ann's log: %+v; want the sequencer at %d, H2 %s listed", l1, seq1, h2.Host().ID())
	}

	lying.Store(false)
	waitFor(t, mirrorWait, func() string {
		return fmt.Sprintf("H2's status of ann's log: %+v; want level with H1 at %d, no error", l2, seq1)
	}, func() bool {
		l2 = logOf(h2)
		return l2.Seq == seq1 && l2.Lag == 0 && l2.Err == ""
	})
}
