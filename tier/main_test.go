package tier

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

// TestMain lets TIER_WARM_ENTRIES bound the warm set of every cache the
// tests open (TIER_WARM_ENTRIES=1 runs the whole suite with nearly every
// packed entry frozen between uses).
func TestMain(m *testing.M) {
	if v := os.Getenv("TIER_WARM_ENTRIES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "TIER_WARM_ENTRIES=%q: want a positive number\n", v)
			os.Exit(2)
		}
		defaultWarmEntries = n
	}
	os.Exit(m.Run())
}
