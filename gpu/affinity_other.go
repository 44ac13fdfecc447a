//go:build !linux

package gpu

// runOnCPUs runs fn unbound: thread affinity is Linux-only here.
func runOnCPUs(_ []int, fn func() error) (bound bool, err error) { return false, fn() }
