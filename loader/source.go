package loader

import (
	"context"
	"time"

	"github.com/cacheagent/cacheagent/mmapstore"
	"github.com/cacheagent/cacheagent/mmapstore/array"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/stats"
)

// Source lends the arrays of cached objects. FromStore adapts an
// *mmapstore.Store (over a tier.Cache in-process, or over the daemon's
// control client); tests may supply their own. Implementations must be safe
// for concurrent use.
type Source interface {
	// Acquire returns a lease on o's array, fetching o first if needed.
	Acquire(ctx context.Context, o object.Object) (Lease, error)
}

// Lease is a loan of one object's array. The array's bytes are valid, and
// must not be modified, until Release. mmapstore.Lease satisfies it.
type Lease interface {
	// Array returns the object parsed as a .npy array.
	Array() (array.Array, error)
	// Release ends the loan.
	Release() error
}

// FromStore returns a Source over s: each Acquire is s.Acquire.
func FromStore(s *mmapstore.Store) Source { return storeSource{s} }

// storeSource adapts *mmapstore.Store to Source.
type storeSource struct{ s *mmapstore.Store }

// Acquire implements Source.
func (ss storeSource) Acquire(ctx context.Context, o object.Object) (Lease, error) {
	l, err := ss.s.Acquire(ctx, o)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return l, nil
}

var _ Lease = mmapstore.Lease{}

// Planner is a cache that takes access plans: it prefetches ahead of the
// reader and evicts what is needed last. A Loader announces, at the start
// of each epoch, the objects it will acquire (the rest of the epoch and the
// whole next one, shard by shard, each shard's arrays in Dataset.Names
// order, a token shard's followed by those of the shards its last windows
// run into), reports its progress through them, and drops the plan when it
// is closed. Plans are advice: the Loader counts a Planner's errors in Stats
// and carries on. Implementations must be safe for concurrent use.
type Planner interface {
	// Plan announces that objs will be acquired in this order, replacing
	// any plan with the same id. Position 0 is objs[0].
	Plan(ctx context.Context, id string, objs []object.Object) error
	// AdvancePlan reports that plan id's reader has reached position pos:
	// it is about to acquire objs[pos]; earlier objects are behind it
	// (though the last few stay leased while in use).
	AdvancePlan(ctx context.Context, id string, pos int) error
	// DropPlan forgets plan id.
	DropPlan(ctx context.Context, id string) error
}

// StatsReporter is a Planner that also takes the Loader's Stats, as the
// daemon does to export every loader's stall time as metrics. A Loader
// whose Planner implements it reports its totals as it advances through
// its plan, at most every ReportInterval, and once more at Close before
// dropping the plan. Reports are advice, counted as plan errors on failure.
type StatsReporter interface {
	// ReportStats reports plan id's reader's Stats: totals since its New.
	ReportStats(ctx context.Context, id string, s stats.Loader) error
}

// ReportInterval is the least time between two reports to a StatsReporter.
const ReportInterval = time.Second

// Stager is a cache that can make objects local ahead of Acquire in two
// steps, which the Loader times separately to tell a stall waiting for the
// network from one waiting for a copy into memory. The Loader stages each
// shard just before it needs it (Config.Lookahead shards ahead), with a
// token shard the shards its last windows run into, so Promote is also how
// a shard reaches the fast tier just before use.
// Implementations must be safe for concurrent use.
type Stager interface {
	// Fetch returns once every object is in the cache (on disk),
	// downloading what is missing.
	Fetch(ctx context.Context, objs []object.Object) error
	// Promote returns once every object is in the cache's fastest tier,
	// or can be read at once where it is (a disk copy wholly in memory,
	// whose promotion the cache makes in the background), or could not
	// be placed there (then it is served from where it is; errors are
	// advisory).
	Promote(ctx context.Context, objs []object.Object) error
}
