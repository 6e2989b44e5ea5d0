package keyraft

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"spindle.dev"
)

func TestBatchEncoding(t *testing.T) {
	var recs [][]byte
	var want []*spindle.User
	for i := range 3 {
		u := register(t, newSigner(t, spindle.UserName(fmt.Sprintf("b%d@example.com", i))))
		want = append(want, u)
		recs = append(recs, EncodeRecord(u))
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
		"change with a countersignature": encodeBatch([]batchItem{{enc: EncodeChange(signedChange(t, newSigner(t, ann), &Change{Seq: 1, Kind: ChangeAdmit, Key: newSigner(t, bob).pub})), grant: []byte("sig")}}),
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
	ann1 := EncodeRecord(register(t, newSigner(t, ann)))
	f := newFSM()
	cmd := encodeBatch(items(
		ann1,
		EncodeRecord(register(t, newSigner(t, ann))), // Taken by the record before it.
		ann1, // Repeats it: no change.
		EncodeRecord(register(t, newSigner(t, bob))),
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
	if c.verified(k.pub, u) {
		t.Fatal("empty cache knows a record")
	}
	c.add(k.pub, u)
	if !c.verified(k.pub, u) {
		t.Error("cache forgot a record")
	}
	if c.verified(k.pub, other) || c.verified(newSigner(t, ann).pub, u) {
		t.Error("cache answers for another record or key")
	}
	for i := range maxSigCache + 1 {
		u := *u
		u.Version = int64(i + 2)
		c.add(k.pub, &u)
	}
	if n := len(c.m); n > maxSigCache {
		t.Errorf("cache holds %d entries, more than %d", n, maxSigCache)
	}
	var nilCache *sigCache
	nilCache.add(k.pub, u)
	if nilCache.verified(k.pub, u) {
		t.Error("nil cache knows a record")
	}
}
