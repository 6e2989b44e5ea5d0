package main

import (
	"os"
	"runtime"
	"runtime/debug"
)

// firstGC is how much memory a spin process may use before its first
// garbage collection.
const firstGC = 24 << 20

// deferFirstGC lets the process run without collecting garbage until its
// memory reaches firstGC, and with the runtime's policy from then on.
// Under the default policy a small request collects while it starts (its
// heap passes the first goal, 4 MiB, while the libp2p host is set up),
// a cost it need not pay; a large transfer passes firstGC
// early and keeps the memory bounds the default policy gives it. A
// GOGC or GOMEMLIMIT in the environment is left to decide alone.
func deferFirstGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	percent := debug.SetGCPercent(-1)
	limit := debug.SetMemoryLimit(firstGC)
	// A finalizer runs after the collection that finds its object
	// unreachable: the first one.
	runtime.SetFinalizer(new(gcSentinel), func(*gcSentinel) {
		debug.SetGCPercent(percent)
		debug.SetMemoryLimit(limit)
	})
}

// A gcSentinel is large enough not to come from the tiny allocator, whose
// objects' finalizers may never run.
type gcSentinel [32]byte
