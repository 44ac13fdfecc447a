package gpu

import (
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// runOnCPUs runs fn on a fresh OS thread bound to cpus and reports whether
// the binding took. With no cpus, or when the binding is refused (a cpuset
// without those CPUs), fn runs unbound on the caller's thread.
//
// This is how pinned memory is made NUMA-local: cuMemHostAlloc faults its
// pages in on the calling thread, and the kernel's default policy takes
// them from the node of the CPU the thread runs on. It is a preference, not
// a guarantee: a node short of memory falls back to another, and a process
// memory policy (numactl --membind) overrides it. The thread is never
// unlocked, so it exits with its goroutine and its affinity dies with it.
func runOnCPUs(cpus []int, fn func() error) (bound bool, err error) {
	var set unix.CPUSet
	for _, c := range cpus {
		if c >= 0 {
			set.Set(c) // ignores CPUs past the set's 1024
		}
	}
	if set.Count() == 0 {
		return false, fn()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		runtime.LockOSThread()
		bound = unix.SchedSetaffinity(0, &set) == nil
		err = fn()
	})
	wg.Wait()
	return bound, err
}
