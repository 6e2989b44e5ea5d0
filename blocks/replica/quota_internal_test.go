package replica

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	tpeer "github.com/libp2p/go-libp2p/core/test"

	"spindle.dev"
)

// The quota journal keeps each peer's charges across a reopen, takes
// back what is released, drops a line cut short by a crash, and is
// written afresh once it has grown.
func TestQuotaJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quotas")
	a, b := tpeer.RandPeerIDFatal(t), tpeer.RandPeerIDFatal(t)
	q, err := openQuotas(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p   peer.ID
		ref spindle.Ref
		n   int64
	}{{a, "r1", 60}, {a, "r1", 60}, {a, "r2", 40}, {b, "r3", 10}} {
		if err := q.charge(c.p, c.ref, c.n); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.charge(a, "r4", 1); !errors.Is(err, spindle.Full) || !strings.Contains(err.Error(), "takes up to 100 from one node") {
		t.Fatalf("a charge past the quota: %v, want Full naming the quota", err)
	}
	if err := q.charge(b, "r1", 60); err != nil {
		t.Fatalf("a block charged to another peer: %v", err)
	}
	if err := q.release("r2", "nosuch"); err != nil {
		t.Fatal(err)
	}
	q.close()
	// A crash in the middle of a line.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("+ " + b.String() + " r9 5")
	f.Close()

	q, err = openQuotas(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.held(a); got != 60 {
		t.Errorf("after a reopen peer a holds %d, want 60", got)
	}
	if got := q.held(b); got != 10 {
		t.Errorf("after a reopen peer b holds %d, want 10 (the torn line dropped)", got)
	}
	for i := range 600 {
		ref := spindle.Ref(strings.Repeat("x", i%7+1) + string(rune('a'+i%26)))
		q.charge(b, ref, 0)
		q.release(ref)
	}
	q.close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(string(data), "\n"); lines > 2*2+1024 {
		t.Errorf("the journal holds %d lines for 2 charges", lines)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("+ "+a.String()+" r1 60\njunk\n"), 0o600)
	if _, err := openQuotas(path, 100); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a damaged journal: %v, want an error naming the line", err)
	}
}

// BenchmarkQuotaCharge times charging one pushed block to its peer: a
// line appended to the journal and fsynced, what each copy another node
// pushes costs besides its own store.
func BenchmarkQuotaCharge(b *testing.B) {
	q, err := openQuotas(filepath.Join(b.TempDir(), "quotas"), 1<<62)
	if err != nil {
		b.Fatal(err)
	}
	defer q.close()
	p := tpeer.RandPeerIDFatal(b)
	i := 0
	for b.Loop() {
		i++
		if err := q.charge(p, spindle.Ref("bafkrei"+strconv.Itoa(i)), 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
