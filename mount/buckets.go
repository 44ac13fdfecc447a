package mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// maxMissing bounds how many missing bucket names a dynamic mount
// remembers; past it, the expired ones and then arbitrary ones are dropped.
const maxMissing = 1024

// bucket returns the bucket called name: a configured one or, in a dynamic
// mount, one found before or found now to exist at the source. ENOENT if
// there is no such bucket.
func (f *FS) bucket(ctx context.Context, name string) (*bucketView, syscall.Errno) {
	now := f.now()
	f.mu.Lock()
	b := f.buckets[name]
	until, missing := f.missing[name]
	f.mu.Unlock()
	switch {
	case b != nil:
		return b, 0
	case !f.cfg.dynamic, checkDynamicBucket(name) != "", missing && now.Before(until):
		return nil, syscall.ENOENT
	}
	ch := f.probes.DoChan(name, func() (any, error) { return f.probe(ctx, name) })
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, errno(ctx, r.Err)
		}
		return r.Val.(*bucketView), 0
	case <-ctx.Done():
		return nil, syscall.EINTR
	}
}

// probe checks, on a context detached from ctx, whether bucket name exists
// at the source by asking for its first object (one List request), and
// adds it if it does. A missing bucket is remembered as missing for a
// while (missingTTL), and its error is object.ErrNotFound.
func (f *FS) probe(ctx context.Context, name string) (*bucketView, error) {
	dctx, done, err := f.detach(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	f.stats.probes.Add(1)
	err = firstObject(dctx, f.cfg.src, name)
	if err != nil && !errors.Is(err, object.ErrNotFound) && !errors.Is(err, object.ErrInvalidName) {
		f.cfg.log.Warn("mount: checking a bucket failed", "bucket", name, "err", err)
		return nil, err
	}
	now := f.now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if len(f.missing) >= maxMissing {
			f.pruneMissingLocked(now)
		}
		f.missing[name] = now.Add(f.cfg.missingTTL())
		return nil, fmt.Errorf("mount: bucket %q: %w", name, object.ErrNotFound)
	}
	delete(f.missing, name)
	b := f.buckets[name]
	if b == nil {
		b = &bucketView{name: name, prefixes: []string{""}}
		f.buckets[name] = b
	}
	return b, nil
}

// pruneMissingLocked makes room in f.missing: it drops the expired names,
// then arbitrary ones down to half of maxMissing. f.mu must be held.
func (f *FS) pruneMissingLocked(now time.Time) {
	for name, until := range f.missing {
		if !now.Before(until) {
			delete(f.missing, name)
		}
	}
	for name := range f.missing {
		if len(f.missing) <= maxMissing/2 {
			break
		}
		delete(f.missing, name)
	}
}

// bucketNames returns the names of the buckets shown, sorted.
func (f *FS) bucketNames() []string {
	f.mu.Lock()
	names := make([]string, 0, len(f.buckets))
	for name := range f.buckets {
		names = append(names, name)
	}
	f.mu.Unlock()
	slices.Sort(names)
	return names
}

// firstObject lists bucket until its first object: nil if the bucket
// exists (empty or not), the listing's error otherwise.
func firstObject(ctx context.Context, src Lister, bucket string) error {
	for _, err := range src.List(ctx, bucket, "") {
		return err
	}
	return nil
}

// missingTTL is how long a dynamic mount believes a bucket missing: the
// listing TTL, or DefaultListTTL if that is forever.
func (s settings) missingTTL() time.Duration {
	if s.ttl > 0 {
		return s.ttl
	}
	return DefaultListTTL
}
