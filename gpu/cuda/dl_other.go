//go:build !linux

package cuda

import "errors"

var errUnsupportedOS = errors.New("the CUDA binding supports Linux only")

func dlopen(string) (uintptr, error)         { return 0, errUnsupportedOS }
func dlsym(uintptr, string) (uintptr, error) { return 0, errUnsupportedOS }
func dlclose(uintptr)                        {}
