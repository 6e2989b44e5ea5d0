package main

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// deferFirstGC turns collection off up to firstGC, and the first
// collection gives the runtime's policy back.
func TestDeferFirstGC(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1) // A negative limit only reads it.
	if before != math.MaxInt64 {
		t.Skipf("memory limit is %d already", before)
	}
	percent := debug.SetGCPercent(100)
	defer func() {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(before)
	}()

	deferFirstGC()
	if got := debug.SetMemoryLimit(-1); got != firstGC {
		t.Fatalf("memory limit after deferFirstGC is %d, want %d", got, firstGC)
	}
	runtime.GC()
	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) != before {
		if time.Now().After(deadline) {
			t.Fatalf("memory limit is still %d after a collection, want %d back", debug.SetMemoryLimit(-1), before)
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent after the first collection is %d, want 100 back", got)
	}
}
