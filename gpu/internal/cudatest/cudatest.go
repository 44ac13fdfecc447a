//go:build linux

// Package cudatest builds the fake CUDA driver (gpu/testdata/fake_libcuda.c)
// for tests and drives its test controls. It is imported only by tests.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/ebitengine/purego"
)

// Kind is a class of driver object the fake counts.
type Kind int32

// Kinds for Controls.Live, as in fake_libcuda.c.
const (
	DevMem Kind = iota
	HostMem
	Registered
	Stream
	Event
	CtxRefs
	// Leaked counts objects still alive when their context was destroyed.
	Leaked
)

// source returns the path of fake_libcuda.c, beside this package's source.
func source(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cudatest: cannot locate source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "fake_libcuda.c")
}

// Build compiles the fake driver with gcc into a fresh
// t.TempDir()/libcuda.so.1 and returns its path. Each build is a separate
// library with its own state. extra are more gcc flags, such as
// "-DFAKECUDA_OMIT_MEMALLOC". Without gcc the test is skipped, or fails
// when CI=true.
func Build(t testing.TB, extra ...string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("cudatest: gcc is needed to build the fake libcuda: %v", err)
		}
		t.Skipf("cudatest: no gcc to build the fake libcuda (%v); install gcc to run this test", err)
	}
	out := filepath.Join(t.TempDir(), "libcuda.so.1")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-o", out, source(t)}, extra...)
	args = append(args, "-lpthread")
	if b, err := exec.CommandContext(t.Context(), gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cudatest: gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// Controls drives the test controls of a loaded fake driver. It shares the
// driver's state with every other loader of the same path.
type Controls struct {
	fail       func(name string, code, count int32)
	calls      func(name string) int64
	lastFlags  func(name string) uint32
	live       func(kind Kind) int64
	setDevices func(n int32)
	setPending func(n int32)
}

// Open loads the fake driver at path for its controls.
func Open(t testing.TB, path string) *Controls {
	t.Helper()
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		t.Fatalf("cudatest: %v", err)
	}
	c := &Controls{}
	for name, fptr := range map[string]any{
		"fakecuda_fail":        &c.fail,
		"fakecuda_calls":       &c.calls,
		"fakecuda_last_flags":  &c.lastFlags,
		"fakecuda_live":        &c.live,
		"fakecuda_set_devices": &c.setDevices,
		"fakecuda_set_pending": &c.setPending,
	} {
		addr, err := purego.Dlsym(h, name)
		if err != nil {
			t.Fatalf("cudatest: %v", err)
		}
		purego.RegisterFunc(fptr, addr)
	}
	return c
}

// Fail makes the next count calls of the driver function name return code
// (count -1: every call until changed; 0: stop failing).
func (c *Controls) Fail(name string, code, count int) { c.fail(name, int32(code), int32(count)) }

// Calls returns how often name has been called.
func (c *Controls) Calls(name string) int { return int(c.calls(name)) }

// LastFlags returns the flags argument of name's last call.
func (c *Controls) LastFlags(name string) uint32 { return c.lastFlags(name) }

// Live returns how many objects of kind are alive.
func (c *Controls) Live(kind Kind) int { return int(c.live(kind)) }

// SetDevices sets the device count the driver reports (0 to 8).
func (c *Controls) SetDevices(n int) { c.setDevices(int32(n)) }

// SetPending makes the next n cuEventQuery calls report NOT_READY.
func (c *Controls) SetPending(n int) { c.setPending(int32(n)) }

// CheckNoLeaks fails t if any driver object is alive or was leaked.
func (c *Controls) CheckNoLeaks(t testing.TB) {
	t.Helper()
	names := []string{"device memory", "pinned host memory", "registrations", "streams", "events", "context references", "leaked at context release"}
	for k := DevMem; k <= Leaked; k++ {
		if n := c.Live(k); n != 0 {
			t.Errorf("fake libcuda: %d %s; want 0", n, names[k])
		}
	}
}
