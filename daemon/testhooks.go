//go:build cacheagent_testhooks

package daemon

import (
	"os"

	"github.com/cacheagent/cacheagent/object"
)

// TestHookCorruptServed is the environment variable that, in a daemon
// built with the cacheagent_testhooks tag (the fleet harness's), makes the
// peer server flip a byte of every buffer it sends: a corrupt peer. No
// release build contains this file.
const TestHookCorruptServed = "CACHEAGENT_TESTHOOK_CORRUPT_SERVED"

func init() {
	if os.Getenv(TestHookCorruptServed) == "1" {
		corruptServedForTest = func(_ object.Object, _ int64, p []byte) { p[0] ^= 0x5a }
	}
}
