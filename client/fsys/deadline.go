package fsys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"spindle.dev"
)

// errTimeout is the error of an operation whose deadline passed.
var errTimeout = errors.New("the node did not answer in time")

// bounded runs f with a context that ends after d, and returns within d
// (plus scheduling) even if f does not heed its context: f then goes on
// in the background and its result is dropped.
//
// The cancellation of ctx is ignored: FUSE cancels a request when the
// calling thread gets a signal, and Go programs get them all the time
// (the runtime preempts goroutines with SIGURG). Failing the request
// then would fail the read or write for nothing; finishing it, within
// d, is what the caller expects.
func bounded[T any](ctx context.Context, d time.Duration, f func(ctx context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	type result struct {
		v   T
		err error
	}
	defer cancel()
	done := make(chan result, 1)
	go func() {
		v, err := f(ctx)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() == context.DeadlineExceeded {
			r.err = timeoutError(d, r.err)
		}
		return r.v, r.err
	case <-ctx.Done():
		// Only the deadline ends ctx while the caller waits.
		var zero T
		return zero, timeoutError(d, nil)
	}
}

func timeoutError(d time.Duration, err error) error {
	if err != nil {
		return spindle.E(spindle.IO, fmt.Errorf("%w within %v: %v", errTimeout, d, err))
	}
	return spindle.E(spindle.IO, fmt.Errorf("%w within %v", errTimeout, d))
}

// A watchdog cancels a context when it has not been fed for its period: it
// bounds a long transfer per block rather than as a whole.
type watchdog struct {
	mu     sync.Mutex
	timer  *time.Timer
	period time.Duration
	fired  bool
}

// newWatchdog returns a context that ends when the watchdog starves, and
// the watchdog. stop must be called when the transfer ends.
func newWatchdog(ctx context.Context, period time.Duration) (context.Context, *watchdog, func()) {
	ctx, cancel := context.WithCancel(ctx)
	w := &watchdog{period: period}
	w.timer = time.AfterFunc(period, func() {
		w.mu.Lock()
		w.fired = true
		w.mu.Unlock()
		cancel()
	})
	return ctx, w, func() { w.timer.Stop(); cancel() }
}

// feed restarts the watchdog's period.
func (w *watchdog) feed() {
	w.mu.Lock()
	if !w.fired {
		w.timer.Reset(w.period)
	}
	w.mu.Unlock()
}

// starved reports whether the watchdog fired.
func (w *watchdog) starved() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}
