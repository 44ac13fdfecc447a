//go:build !cgo

package nvmlinfo

import (
	"context"
	"fmt"
)

// discover without cgo: go-nvml cannot be built, so NVML is unavailable.
func discover(context.Context, Config) (System, error) {
	return System{}, fmt.Errorf("%w (built without cgo)", ErrUnavailable)
}
