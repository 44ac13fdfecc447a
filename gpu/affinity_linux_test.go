package gpu

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestRunOnCPUs(t *testing.T) {
	cpu := firstCPU(t)
	var inside unix.CPUSet
	bound, err := runOnCPUs([]int{cpu}, func() error { return unix.SchedGetaffinity(0, &inside) })
	if err != nil || !bound {
		t.Fatalf("runOnCPUs = %t, %v; want bound", bound, err)
	}
	if inside.Count() != 1 || !inside.IsSet(cpu) {
		t.Errorf("affinity inside = %d CPUs; want only CPU %d", inside.Count(), cpu)
	}
	var after unix.CPUSet
	must(t, unix.SchedGetaffinity(0, &after))
	if after.Count() == 1 && after.Count() != inside.Count() {
		t.Error("the caller's thread was bound")
	}
	for _, cpus := range [][]int{nil, {-1}, {5000}} {
		if bound, err := runOnCPUs(cpus, func() error { return nil }); bound || err != nil {
			t.Errorf("runOnCPUs(%v) = %t, %v; want unbound", cpus, bound, err)
		}
	}
}
