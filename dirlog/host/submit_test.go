package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// Writers submitting at once all get in: Submit signs again on a fresh
// head whenever another writer took the place it signed for.
func TestSubmitConcurrentWriters(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	before := e.do2head(e.as(ann).Head(e.ctx, ann))
	const writers, each = 8, 5
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				name := spindle.PathName(fmt.Sprintf("ann@example.com/docs/w%d-%d", w, i))
				d, err := dirlog.Submit(e.ctx, e.s, e.signers[ann], dirlog.OpPut, file(name, 1), "")
				if err != nil {
					t.Errorf("Submit %s: %v", name, err)
					return
				}
				if d.Name != name || d.Writer != ann {
					t.Errorf("Submit returned %s by %s, want %s by %s", d.Name, d.Writer, name, ann)
				}
			}
		})
	}
	wg.Wait()
	after := e.do2head(e.as(ann).Head(e.ctx, ann))
	if after.Seq != before.Seq+writers*each {
		t.Fatalf("head moved from %d to %d, want %d entries more", before.Seq, after.Seq, writers*each)
	}
	if h := e.do2head(e.s.Head(e.ctx, ann)); h.Seq != after.Seq || h.Hash != after.Hash {
		t.Fatalf("Client.Head %d %s differs from Server.Head %d %s", after.Seq, after.Hash, h.Seq, h.Hash)
	}
	got, err := e.s.Glob(e.ctx, ann, "ann@example.com/docs/w*")
	if err != nil || len(got) != writers*each {
		t.Fatalf("%d files after concurrent submits, %v; want %d", len(got), err, writers*each)
	}

	// A rename through Submit moves the item.
	e.do(dirlog.Submit(e.ctx, e.s, e.signers[ann], dirlog.OpRename, &spindle.DirEntry{Name: "ann@example.com/docs/w0-0"}, "ann@example.com/docs/moved"))
	e.do(e.s.Lookup(e.ctx, ann, "ann@example.com/docs/moved"))
}

// movingSequencer is a Sequencer whose head has always moved by the time
// an entry arrives, or that refuses every entry with err.
type movingSequencer struct {
	dirlog.Sequencer
	err     error
	appends atomic.Int32
}

func (m *movingSequencer) Append(ctx context.Context, e *dirlog.Entry) (*spindle.DirEntry, error) {
	m.appends.Add(1)
	return nil, m.err
}

// Submit gives up after maxTries when the head keeps moving, and at once
// on an error that signing again cannot cure.
// submitTries is dirlog's bound on how often Submit signs again.
const submitTries = 16

func TestSubmitGivesUp(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	for _, c := range []struct {
		err   error
		kind  spindle.Kind
		tries int32
	}{
		{spindle.E(spindle.Transient, "log head moved"), spindle.Transient, submitTries},
		{spindle.E(spindle.Permission, "no"), spindle.Permission, 1},
	} {
		m := &movingSequencer{Sequencer: e.s, err: c.err}
		_, err := dirlog.Submit(e.ctx, m, e.signers[ann], dirlog.OpPut, file("ann@example.com/docs/x", 1), "")
		wantKind(t, err, c.kind, "submit to a sequencer that refuses")
		if got := m.appends.Load(); got != c.tries {
			t.Errorf("%v: %d appends, want %d", c.kind, got, c.tries)
		}
	}
	// A name that does not parse never reaches the sequencer.
	m := &movingSequencer{Sequencer: e.s}
	_, err := dirlog.Submit(e.ctx, m, e.signers[ann], dirlog.OpPut, file("not a name", 1), "")
	wantKind(t, err, spindle.Invalid, "submit of a bad name")
	if m.appends.Load() != 0 {
		t.Error("a bad name reached the sequencer")
	}
	// A cancelled context ends the retries.
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	m = &movingSequencer{Sequencer: e.s, err: spindle.E(spindle.Transient, "moved")}
	_, err = dirlog.Submit(ctx, m, e.signers[ann], dirlog.OpPut, file("ann@example.com/docs/x", 1), "")
	wantKind(t, err, spindle.Transient, "submit with a cancelled context")
	if got := m.appends.Load(); got >= submitTries {
		t.Errorf("%d appends after the context was cancelled", got)
	}
}
