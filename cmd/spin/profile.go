package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
)

// cpuProfileEnv names the variable that asks spin for a CPU profile of
// the whole process, written when it exits, for `go tool pprof`. Each
// "%p" in the file name is replaced by the process id, so that a node
// and the commands run against it may share one setting:
//
//	SPINDLE_CPUPROFILE=/tmp/spin.%p.prof spin get @/big > /dev/null
const cpuProfileEnv = "SPINDLE_CPUPROFILE"

// startCPUProfile starts the CPU profile SPINDLE_CPUPROFILE asks for
// and returns the function that stops it and writes the file. Without
// the variable it does nothing; a profile that cannot be made is
// reported on stderr and the command goes on without it.
func startCPUProfile() (stop func()) {
	name := os.Getenv(cpuProfileEnv)
	if name == "" {
		return func() {}
	}
	name = strings.ReplaceAll(name, "%p", strconv.Itoa(os.Getpid()))
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "spin: cpu profile: %v\n", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintf(os.Stderr, "spin: cpu profile: %v\n", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "spin: cpu profile: %v\n", err)
		}
	}
}
