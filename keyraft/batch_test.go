package keyraft

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

func TestBatchEncoding(t *testing.T) {
	var recs [][]byte
	var want []*spindle.User
	for i := range 3 {
		u := register(t, newSigner(t, spindle.UserName(fmt.Sprintf("b%d@example.com", i))))
		want = append(want, u)
		recs = append(recs, keylog.EncodeRecord(u))
	}
	b := encodeBatch(items(recs...))
	got, err := decodeBatch(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d records, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i].u == nil || !sameRecord(got[i].u, want[i]) {
			t.Errorf("record %d differs", i)
		}
	}
	bad := map[string][]byte{
		"empty":                          nil,
		"not a batch":                    append([]byte{cmdPut}, recs[0]...),
		"no records":                     encodeBatch(nil),
		"change with a countersignature": encodeBatch([]batchItem{{enc: keylog.EncodeChange(signedChange(t, newSigner(t, ann), &keylog.Change{Seq: 1, Kind: keylog.ChangeAdmit, Key: newSigner(t, bob).pub})), grant: []byte("sig")}}),
		"trailing":                       append(bytes.Clone(b), 0),
		"truncated":                      b[:len(b)-1],
		"damaged record":                 flipByte(b, 4),
		"count too large":                append([]byte{cmdBatch}, 0x81, 0x04), // 513
		"long varint":                    append([]byte{cmdBatch, 0x81, 0x00}, b[2:]...),
	}
	for what, data := range bad {
		if _, err := decodeBatch(data); !errors.Is(err, spindle.Invalid) {
			t.Errorf("%s: decodeBatch = %v, want Invalid", what, err)
		}
	}
}

// TestBatchesShareAnEntry holds the batcher on its first batch while 99
// more Puts queue up, and checks that those 99 are proposed as one Raft
// log entry and all committed.
func TestBatchesShareAnEntry(t *testing.T) {
	ctx := ctxT(t)
	var (
		mu    sync.Mutex
		sizes []int
	)
	first := make(chan struct{})
	release := make(chan struct{})
	hook := func(n int) {
		mu.Lock()
		sizes = append(sizes, n)
		k := len(sizes)
		mu.Unlock()
		if k == 1 {
			close(first)
			<-release
		}
	}
	_, trans := raft.NewInmemTransport("m0")
	t.Cleanup(func() { trans.Close() })
	c, err := Open(ctx, Config{ID: "m0", Bootstrap: true, Logger: testLogger(t), transport: trans, tune: fast, proposeHook: hook})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// The term's barrier (see Cluster.leading) first, so that only the
	// batches add log entries below.
	if err := c.leading(ctx, ""); err != nil {
		t.Fatal(err)
	}
	start := c.raft.LastIndex()

	const n = 100
	us := make([]*spindle.User, n)
	for i := range us {
		us[i] = register(t, newSigner(t, spindle.UserName(fmt.Sprintf("q%d@example.com", i))))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = c.Put(ctx, us[0]) })
	<-first
	for i := 1; i < n; i++ {
		wg.Go(func() { errs[i] = c.Put(ctx, us[i]) })
	}
	eventually(t, "99 Puts queued", func() bool { return len(c.putq) == n-1 })
	close(release)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Put %d: %v", i, err)
		}
	}
	mu.Lock()
	got := slices.Clone(sizes)
	mu.Unlock()
	if !slices.Equal(got, []int{1, n - 1}) {
		t.Errorf("batch sizes %v, want [1 %d]", got, n-1)
	}
	if d := c.raft.LastIndex() - start; d != 2 {
		t.Errorf("the Puts took %d raft log entries, want 2", d)
	}
	if sz := sizeOf(c); sz != n {
		t.Errorf("log holds %d records, want %d", sz, n)
	}
}

// TestBatchOutcomesPerRecord puts, in one batch, records that the state
// refuses only once earlier records of the batch are applied: each Put
// gets its own outcome and the refused ones change nothing.
func TestBatchOutcomesPerRecord(t *testing.T) {
	ann1 := keylog.EncodeRecord(register(t, newSigner(t, ann)))
	f := newFSM()
	cmd := encodeBatch(items(
		ann1,
		keylog.EncodeRecord(register(t, newSigner(t, ann))), // Taken by the record before it.
		ann1, // Repeats it: no change.
		keylog.EncodeRecord(register(t, newSigner(t, bob))),
	))
	res, ok := f.Apply(&raft.Log{Index: 7, Data: cmd}).(batchResult)
	if !ok || len(res) != 4 {
		t.Fatalf("Apply of a batch answered %#v", res)
	}
	if a, ok := res[0].(applied); !ok || a.index != 0 {
		t.Errorf("first record: %#v, want applied at 0", res[0])
	}
	if err, _ := res[1].(error); !errors.Is(err, spindle.Exist) {
		t.Errorf("second registration of ann: %v, want Exist", res[1])
	}
	if a, ok := res[2].(applied); !ok || a.index != -1 {
		t.Errorf("repeated record: %#v, want applied at -1", res[2])
	}
	if a, ok := res[3].(applied); !ok || a.index != 1 {
		t.Errorf("bob: %#v, want applied at 1", res[3])
	}
	if f.st.size() != 2 {
		t.Errorf("state holds %d records, want 2", f.st.size())
	}
	// A damaged batch is refused whole.
	if err, _ := f.Apply(&raft.Log{Index: 8, Data: cmd[:len(cmd)-2]}).(error); !errors.Is(err, spindle.Invalid) {
		t.Errorf("damaged batch: %v, want Invalid", err)
	}
	if f.st.size() != 2 {
		t.Errorf("damaged batch changed the state")
	}
}

// TestBatchSignersChangeWithinBatch applies a batch whose records change
// the keys that later records of the same batch must be signed with: the
// parallel verification before the batch (fsm.preverify) sees the state
// before it, so it verifies some signatures under keys that no longer
// count by the time their records are checked. Every outcome must be the
// one of checking the records one by one: a record signed with the key a
// rotation earlier in the batch replaced is refused, though its signature
// verified under the key the state named before the batch.
func TestBatchSignersChangeWithinBatch(t *testing.T) {
	key1, key2 := newSigner(t, ann), newSigner(t, ann)
	v1 := register(t, key1)
	v2 := update(t, v1, key2.pub, key1)
	forged := update(t, v2, key1.pub, key1) // Signed with the replaced key.
	v3 := update(t, v2, key2.pub, key2)
	cam := &spindle.User{Name: annCam, PublicKey: newSigner(t, annCam).pub, Version: 1}
	if err := keylog.Sign(cam, key2); err != nil {
		t.Fatal(err)
	}
	badBob := register(t, newSigner(t, bob))
	badBob.Signature = register(t, newSigner(t, bob)).Signature
	recs := []*spindle.User{v1, v2, forged, v3, cam, badBob}
	var encs [][]byte
	for _, u := range recs {
		encs = append(encs, keylog.EncodeRecord(u))
	}

	f := newFSM()
	res, ok := f.Apply(&raft.Log{Index: 1, Data: encodeBatch(items(encs...))}).(batchResult)
	if !ok || len(res) != len(recs) {
		t.Fatalf("Apply of a batch answered %#v", res)
	}
	if runtime.GOMAXPROCS(0) > 1 && !f.st.sigs.verified(key1.pub, encs[2]) {
		t.Error("the forged record's signature was not verified ahead under the key the state named before the batch; the test shows nothing")
	}
	// The same records, each in a command of its own, one by one.
	one := newFSM()
	for i, enc := range encs {
		got := one.Apply(&raft.Log{Index: uint64(i + 1), Data: append([]byte{cmdPut}, enc...)})
		gotErr, _ := got.(error)
		batchErr, _ := res[i].(error)
		if spindle.KindOf(gotErr) != spindle.KindOf(batchErr) || (gotErr == nil) != (batchErr == nil) {
			t.Errorf("record %d (%s v%d): in a batch %v, alone %v", i, recs[i].Name, recs[i].Version, res[i], got)
		}
	}
	if err, _ := res[2].(error); !errors.Is(err, spindle.Permission) {
		t.Errorf("record signed with the replaced key: %v, want Permission", res[2])
	}
	if err, _ := res[5].(error); !errors.Is(err, spindle.Permission) {
		t.Errorf("record with another key's signature: %v, want Permission", res[5])
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, one)) {
		t.Error("the batch and the records one by one leave different states")
	}
	if f.st.size() != 4 {
		t.Errorf("state holds %d records, want 4 (v1, v2, v3, the camera)", f.st.size())
	}
}

func TestPutAfterClose(t *testing.T) {
	c := memCluster(t)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Put(ctxT(t), register(t, newSigner(t, ann))) }()
	select {
	case err := <-done:
		if !errors.Is(err, spindle.Transient) {
			t.Errorf("Put after Close: %v, want Transient", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Put after Close hangs")
	}
}

// items makes batch items of encoded records without countersignatures.
func items(recs ...[]byte) []batchItem {
	its := make([]batchItem, len(recs))
	for i, r := range recs {
		its[i] = batchItem{enc: r}
	}
	return its
}

// The signature memo answers only for the exact key and record verified,
// and stays bounded.
func TestSigCache(t *testing.T) {
	var c sigCache
	k := newSigner(t, ann)
	u := register(t, k)
	other := register(t, k) // Same user and key, another signature.
	if c.verified(k.pub, keylog.EncodeRecord(u)) {
		t.Fatal("empty cache knows a record")
	}
	c.add(k.pub, keylog.EncodeRecord(u))
	if !c.verified(k.pub, keylog.EncodeRecord(u)) {
		t.Error("cache forgot a record")
	}
	if c.verified(k.pub, keylog.EncodeRecord(other)) || c.verified(newSigner(t, ann).pub, keylog.EncodeRecord(u)) {
		t.Error("cache answers for another record or key")
	}
	var last *spindle.User
	for i := range maxSigCache + 1 {
		u := *u
		u.Version = int64(i + 2)
		c.add(k.pub, keylog.EncodeRecord(&u))
		last = &u
	}
	if n := len(c.cur) + len(c.old); n > maxSigCache {
		t.Errorf("cache holds %d entries, more than %d", n, maxSigCache)
	}
	if !c.verified(k.pub, keylog.EncodeRecord(last)) {
		t.Error("cache forgot the record added last")
	}
	var nilCache *sigCache
	nilCache.add(k.pub, keylog.EncodeRecord(u))
	if nilCache.verified(k.pub, keylog.EncodeRecord(u)) {
		t.Error("nil cache knows a record")
	}
}
