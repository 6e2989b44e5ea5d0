package host

import (
	"errors"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// TestEntriesAndCheckLog reads a log back in pages, as its owner, and
// checks the signed head against it; a log with an entry left out or
// changed, or a head with another root, fails.
func TestEntriesAndCheckLog(t *testing.T) {
	e := newEnv(t, &MemStore{})
	e.setup()
	c := e.as(ann)
	e.do(c.Rename(e.ctx, "ann@example.com/docs/sub", "ann@example.com/docs/moved"))
	h := e.do2(e.s.Head(e.ctx, ann))
	var all []*dirlog.Entry
	for from := int64(1); ; {
		page, err := e.s.Entries(e.ctx, ann, ann, from, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		if len(page) > 2 || page[0].Seq != from {
			t.Fatalf("page from %d: %d entries starting at %d", from, len(page), page[0].Seq)
		}
		all = append(all, page...)
		from += int64(len(page))
	}
	if err := dirlog.CheckLog(all, h); err != nil {
		t.Fatal(err)
	}
	wantKind(t, dirlog.CheckLog(all[:len(all)-1], h), spindle.Integrity, "a log short of an entry")
	bad := *h
	bad.Root[0] ^= 1
	wantKind(t, dirlog.CheckLog(all, &bad), spindle.Integrity, "a head with another root")
	changed := append([]*dirlog.Entry(nil), all...)
	c2 := *changed[2]
	c2.Time++
	changed[2] = &c2
	wantKind(t, dirlog.CheckLog(changed, h), spindle.Integrity, "a changed entry")

	if _, err := e.s.Entries(e.ctx, bob, ann, 1, 10); !errors.Is(err, spindle.Private) {
		t.Errorf("bob reading ann's log: %v, want Private", err)
	}
	if got, err := e.s.Entries(e.ctx, ann, ann, h.Seq+1, 10); err != nil || len(got) != 0 {
		t.Errorf("entries after the last: %d, %v", len(got), err)
	}
}
