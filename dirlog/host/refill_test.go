package host

import (
	"bytes"
	"testing"

	"spindle.dev/dirlog"

	"spindle.dev"
)

// A host whose log of ann lost entries it had stored keeps what verifies
// and refills the rest from another dir host: while it does, nobody but
// the refill reads or writes the tree; then it serves the whole log.
func TestRefill(t *testing.T) {
	for _, loss := range []struct {
		what string
		keep int // Records kept of the log, -1 for none at all.
	}{{"cut to 3 of 6 entries", 3}, {"deleted", -1}} {
		t.Run(loss.what, func(t *testing.T) {
			st := new(MemStore)
			e := newEnv(t, st)
			ctx := e.ctx
			e.setup()
			e.do(e.as(ann).Put(ctx, file("ann@example.com/docs/c.txt", 4)))
			want := e.dump(ann)
			// The other dir host holds the whole log.
			src := new(MemStore)
			src.SetBytes(ann, st.Bytes(ann))
			srcEnv := &env{t: t, ctx: ctx, store: src, host: e.host, signers: e.signers}
			srcEnv.open()

			e.s.Close()
			if loss.keep < 0 {
				st.Delete(ann)
			} else {
				b := st.Bytes(ann)
				offs, _, _ := dirlog.ScanFrames(bytes.NewReader(b), 0, func([]byte) error { return nil })
				st.SetBytes(ann, b[:offs[loss.keep]])
			}
			e.open()
			if len(e.s.Damaged()) != 1 {
				t.Fatalf("damaged: %v", e.s.Damage())
			}
			h, err := e.s.BeginRefill(ctx, ann)
			if err != nil {
				t.Fatal(err)
			}
			if wantSeq := max(loss.keep, 0); h.Seq != int64(wantSeq) {
				t.Fatalf("refill starts from %d, want %d", h.Seq, wantSeq)
			}
			_, err = e.as(ann).Lookup(ctx, "ann@example.com/docs/a.txt")
			wantKind(t, err, spindle.Transient, "a lookup while refilling")
			_, err = e.as(ann).Put(ctx, file("ann@example.com/docs/new", 1))
			wantKind(t, err, spindle.Transient, "an append while refilling")
			es, err := srcEnv.s.Entries(ctx, ann, ann, h.Seq+1, 100)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := e.s.AppendBatch(RefillContext(ctx, ann), es); err != nil {
				t.Fatal(err)
			}
			e.s.EndRefill(ann)
			if got := e.dump(ann); got != want {
				t.Fatalf("refilled:\n%s\nwant:\n%s", got, want)
			}
			e.do(e.as(ann).Put(ctx, file("ann@example.com/docs/new", 1)))
			e.reopen()
			if d := e.s.Damage(); len(d) != 0 {
				t.Fatalf("reopened after the refill: %v", d)
			}
		})
	}
}
