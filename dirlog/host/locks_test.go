package host

import (
	"fmt"
	"sync"
	"testing"

	"spindle.dev"
)

// TestCrossGroupsConcurrent has two owners whose Access files each name a
// group in the other's tree append, rewrite those groups and read each
// other's trees all at once: every read consults both logs, each under
// its own lock, and nothing deadlocks or races (run with -race).
func TestCrossGroupsConcurrent(t *testing.T) {
	e := newEnv(t, &MemStore{})
	a, b := e.as(ann), e.as(bob)
	ctx := e.ctx
	e.do(a.MakeDirectory(ctx, "ann@example.com/"))
	e.do(b.MakeDirectory(ctx, "bob@example.com/"))
	e.do(a.MakeDirectory(ctx, "ann@example.com/Group"))
	e.do(b.MakeDirectory(ctx, "bob@example.com/Group"))
	e.do(a.Put(ctx, control("ann@example.com/Group/pals", "bob@example.com\n")))
	e.do(b.Put(ctx, control("bob@example.com/Group/team", "ann@example.com\n")))
	e.do(a.Put(ctx, control("ann@example.com/Access", "*: ann@example.com\nread, list: bob@example.com/Group/team\n")))
	e.do(b.Put(ctx, control("bob@example.com/Access", "*: bob@example.com\nread, list: ann@example.com/Group/pals\n")))

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	run := func(f func(i int) error) {
		wg.Go(func() {
			for i := range n {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	run(func(i int) error {
		_, err := a.Put(ctx, file(spindle.PathName(fmt.Sprintf("ann@example.com/f%d", i%5)), int64(i+1)))
		return err
	})
	run(func(i int) error {
		_, err := b.Put(ctx, file(spindle.PathName(fmt.Sprintf("bob@example.com/f%d", i%5)), int64(i+1)))
		return err
	})
	run(func(i int) error {
		_, err := a.Put(ctx, control("ann@example.com/Group/pals", "bob@example.com\n"))
		return err
	})
	run(func(i int) error {
		_, err := b.Put(ctx, control("bob@example.com/Group/team", "ann@example.com\n"))
		return err
	})
	run(func(i int) error {
		_, err := e.s.Glob(ctx, ann, "bob@example.com/*")
		return err
	})
	run(func(i int) error {
		_, err := e.s.Glob(ctx, bob, "ann@example.com/*")
		return err
	})
	run(func(i int) error {
		_, _, err := e.s.LookupProved(ctx, bob, "ann@example.com/Access")
		return err
	})
	run(func(i int) error {
		_, err := e.s.Head(ctx, ann)
		return err
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
