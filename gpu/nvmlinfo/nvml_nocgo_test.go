//go:build !cgo

package nvmlinfo

import (
	"errors"
	"testing"
)

func TestDiscoverWithoutCgo(t *testing.T) {
	_, err := Discover(t.Context(), Config{})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Discover = %v; want ErrUnavailable", err)
	}
	if got, want := err.Error(), "nvmlinfo: NVML unavailable (built without cgo)"; got != want {
		t.Errorf("Discover error = %q; want %q", got, want)
	}
}
