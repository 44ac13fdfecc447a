//go:build nocuda

package cuda

import (
	"errors"
	"testing"
)

// TestNoCUDABuild: a build with the nocuda tag (the container image's
// static binary) loads no driver, with an error that says why.
func TestNoCUDABuild(t *testing.T) {
	_, err := Load("libcuda.so.1")
	if !errors.Is(err, ErrNoDriver) || !errors.Is(err, errUnsupported) {
		t.Fatalf("Load = %v; want ErrNoDriver saying the build has no CUDA binding", err)
	}
}
