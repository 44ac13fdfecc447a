//go:build !linux || nocuda

package cuda

import (
	"errors"
	"runtime"
)

// errUnsupported says why this build cannot load the driver: CUDA needs
// Linux and a build without the nocuda tag (which leaves out purego, so
// that a CGO_ENABLED=0 build is a static binary: the container image's).
var errUnsupported = func() error {
	if runtime.GOOS != "linux" {
		return errors.New("the CUDA binding supports Linux only")
	}
	return errors.New("this build has no CUDA binding (built with the nocuda tag)")
}()

func dlopen(string) (uintptr, error)         { return 0, errUnsupported }
func dlsym(uintptr, string) (uintptr, error) { return 0, errUnsupported }
func dlclose(uintptr)                        {}
func register(any, uintptr)                  {}
