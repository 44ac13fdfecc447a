package tier

import (
	"context"
	"errors"

	"github.com/cacheagent/cacheagent/object"
)

// What readers in this process that map cached objects (mmapstore) and
// stage them ahead of use (the loader) ask of a Cache, in the shapes their
// interfaces declare: the adapters live here, beside the cache, so that
// neither consumer imports tier.

// Opener opens objects of a cache with fixed options. It is what
// mmapstore.New takes for an in-process cache (its Files are *Handle).
type Opener struct {
	c    *Cache
	opts []OpenOption
}

// Opener returns an Opener whose Open is c.Open(ctx, o, opts...).
func (c *Cache) Opener(opts ...OpenOption) Opener { return Opener{c: c, opts: opts} }

// Open opens o as Cache.Open does.
func (op Opener) Open(ctx context.Context, o object.Object) (*Handle, error) {
	return op.c.Open(ctx, o, op.opts...)
}

// Stager stages objects of a cache for a reader about to open them: the
// loader's Stager for an in-process cache.
type Stager struct{ c *Cache }

// Stager returns c's Stager.
func (c *Cache) Stager() Stager { return Stager{c: c} }

// Fetch returns once every object is cached, fetching what is missing at
// demand priority (FetchObjects).
func (s Stager) Fetch(ctx context.Context, objs []object.Object) error {
	return s.c.FetchObjects(ctx, objs, object.Demand)
}

// Promote makes cached objects fast to read next (StageObjects); without a
// shm tier there is nothing to do.
func (s Stager) Promote(ctx context.Context, objs []object.Object) error {
	_, _, err := s.c.StageObjects(ctx, objs)
	if errors.Is(err, ErrNoShm) {
		return nil
	}
	return err
}
