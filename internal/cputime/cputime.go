// Package cputime reads the process's CPU time, as the benchmarks report
// CPU per object: user and system time together, by getrusage.
package cputime

import (
	"syscall"
	"time"
)

// Self returns the process's user and system CPU time so far (all its
// threads); 0 if the kernel refuses.
func Self() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
