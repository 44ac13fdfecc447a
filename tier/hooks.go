package tier

import "context"

// testHooks lets tests observe and gate the cache's background work
// deterministically. Tests install them with Cache.hooks.Store; nil fields
// (and a nil *testHooks) are skipped. Hooks run on the cache's goroutines
// and must not call back into the cache.
type testHooks struct {
	// copy runs before a promotion allocates and fills its temp file; an
	// error fails it.
	copy func(ctx context.Context, key string) error
	// promoted runs after a background promotion ends.
	promoted func(key string, err error)
	// watched runs after the watcher handled an event for path; dropped
	// reports that it dropped a copy.
	watched func(path string, dropped bool)
	// rescanned runs after the watcher rescanned a tier.
	rescanned func(tier Kind)
	// exited runs when a background goroutine ("promoter", "watcher",
	// "planner") ends.
	exited func(goroutine string)
	// planned runs after each prefetch round of the planner, and with 0
	// objects when the planner goes idle.
	planned func(objects int, err error)
	// resident, if set, answers for StageObjects whether the disk copy of
	// key is in memory, in place of asking the kernel.
	resident func(key string) bool
	// warmEntries, if positive, bounds the warm set in place of
	// defaultWarmEntries.
	warmEntries int
	// syncing runs when the packer starts to make a group of n packed
	// objects durable, before its fdatasync.
	syncing func(n int)
	// fetchRate, if positive, is the fetch rate (bytes per second) the
	// planner's lookahead uses in place of the measured one.
	fetchRate float64
	// verifying runs when Verify has opened and checked the file of
	// key's copy, before it reads it.
	verifying func(key string)
	// punching runs when a flush of evicted packed objects' regions has
	// synced the index, before it punches n regions.
	punching func(n int)
}

// fetchRateOr returns the fetch rate the planner is to use: the hooks'
// fixed one, or measured.
func (h *testHooks) fetchRateOr(measured float64) float64 {
	if h != nil && h.fetchRate > 0 {
		return h.fetchRate
	}
	return measured
}

func (h *testHooks) onVerifying(key string) {
	if h != nil && h.verifying != nil {
		h.verifying(key)
	}
}

func (h *testHooks) onPunching(n int) {
	if h != nil && h.punching != nil {
		h.punching(n)
	}
}

func (h *testHooks) onSyncing(n int) {
	if h != nil && h.syncing != nil {
		h.syncing(n)
	}
}

func (h *testHooks) onCopy(ctx context.Context, key string) error {
	if h == nil || h.copy == nil {
		return nil
	}
	return h.copy(ctx, key)
}

func (h *testHooks) onPromoted(key string, err error) {
	if h != nil && h.promoted != nil {
		h.promoted(key, err)
	}
}

func (h *testHooks) onWatched(path string, dropped bool) {
	if h != nil && h.watched != nil {
		h.watched(path, dropped)
	}
}

func (h *testHooks) onRescanned(tier Kind) {
	if h != nil && h.rescanned != nil {
		h.rescanned(tier)
	}
}

func (h *testHooks) onExit(goroutine string) {
	if h != nil && h.exited != nil {
		h.exited(goroutine)
	}
}

func (h *testHooks) onPlanned(objects int, err error) {
	if h != nil && h.planned != nil {
		h.planned(objects, err)
	}
}

// isResident reports whether e's base file, at path, is wholly in memory.
func (h *testHooks) isResident(key, path string, off, size int64) bool {
	if h != nil && h.resident != nil {
		return h.resident(key)
	}
	return resident(path, off, size)
}
