package tier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// TestConcurrentMix runs opens, prefetches, pins, evictions, promotions,
// demotions and budget changes at once on a cache too small for the data
// set, with and without a shm tier, then checks the accounting, and that
// the index and the files agree after a restart.
func TestConcurrentMix(t *testing.T) {
	for _, withShm := range []bool{false, true} {
		t.Run(map[bool]string{false: "disk", true: "shm"}[withShm], func(t *testing.T) {
			env := newDirEnv(t)
			dir := t.TempDir()
			size := blockSize(t, dir)
			cfg := env.config(dir, 8*size)
			if withShm {
				cfg.ShmDir, cfg.ShmMaxBytes = shmDir(t), 3*size
			}
			c := openCache(t, cfg)
			const n = 20
			var objs []object.Attrs
			for i := range n {
				objs = append(objs, env.put(t, "bkt", fmt.Sprintf("o/%d/%02d", i%3, i), pattern(i, int(size)-i)))
			}
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 1000)
			for w := range 4 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(w), 1))
					for range 40 {
						if err := mixOp(ctx, c, objs, r); err != nil && !errors.Is(err, ErrNoSpace) {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("operation failed: %v", err)
			}
			checkInvariants(t, c)
			st, sh := statsOf(c)
			if st.UsedBytes > st.MaxBytes || st.ReservedBytes != 0 || sh.UsedBytes > sh.MaxBytes {
				t.Errorf("Stats() = %+v, shm %+v; want used within the budgets and nothing reserved", st, sh)
			}
			if withShm && sh.Promotions == 0 {
				t.Errorf("shm stats = %+v; want promotions", sh)
			}
			before := c.Entries("bkt", "")
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			c2 := openCache(t, cfg)
			after := c2.Entries("bkt", "")
			if len(after) != len(before) {
				t.Errorf("entries after restart = %d; want %d", len(after), len(before))
			}
			checkIndexMatchesFiles(t, c2)
			checkInvariants(t, c2)
		})
	}
}

// mixOp does one random operation of TestConcurrentMix.
func mixOp(ctx context.Context, c *Cache, objs []object.Attrs, r *rand.Rand) error {
	a := objs[r.IntN(len(objs))]
	prefix := fmt.Sprintf("o/%d/", r.IntN(3))
	switch op := r.IntN(10); {
	case op < 5:
		h, err := c.Open(ctx, a.Object)
		if err != nil {
			return err
		}
		b := make([]byte, h.Size())
		_, err = h.ReadAt(b, 0)
		return errors.Join(err, h.Close())
	case op < 7:
		return c.Prefetch(ctx, []object.Attrs{a, objs[r.IntN(len(objs))]}, object.Warm, nil)
	case op == 7:
		_, err := c.Pin(ctx, "bkt", prefix)
		_, uerr := c.Unpin(ctx, "bkt", prefix)
		return errors.Join(err, uerr)
	case op == 8:
		_, err := c.Evict(ctx, "bkt", prefix)
		return err
	case op == 9 && c.hot != nil && r.IntN(2) == 0:
		_, err := c.Promote(ctx, "bkt", prefix)
		_, derr := c.Demote(ctx, "bkt", prefix)
		return errors.Join(err, derr)
	default:
		c.Lookup(a.Bucket, a.Name)
		c.Stats()
		return nil
	}
}
