package tier

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/cacheagent/cacheagent/object"
)

// The planner learns planned objects' attributes (generation, size,
// CRC32C) from listings of their directories instead of a metadata request
// per object before its download: a dataset of small files (ImageFolder's
// class directories) costs one listing request per thousand objects rather
// than one round trip to GCS, and one billed operation, per object. A
// planned object whose directory holds at least planListMin planned
// objects has that directory listed when the planner first fetches from it
// (and again once the listing is older than planListTTL); its fetch waits
// for the listing's first page, then downloads the listed generation. One
// that the listing missed (written since, or in a directory too large to
// list) is stat'ed as before, and one whose listed generation is gone by
// the time it is downloaded is fetched at its live generation.

const (
	// planListMin is the least number of planned objects in a directory
	// for the planner to list it rather than stat each one.
	planListMin = 4
	// planListSlack bounds a directory's listing beyond twice the objects
	// planned in it: a listing that grows past it (a directory of many
	// more objects than planned, or with deep subdirectories) is given
	// up, and its objects are stat'ed one by one.
	planListSlack = 1000
	// planListTTL is how long listed attributes are fetched by, and how
	// long a directory is not listed again.
	planListTTL = time.Minute
	// planListBatch is how many listed objects are applied at once.
	planListBatch = 1000
)

// planDir is a directory holding planned objects (the key of plans.dirs is
// the index key of its bucket and '/'-terminated prefix).
type planDir struct {
	planned  int       // planned objects directly in it
	listedAt time.Time // when its last listing started; zero: never listed
	// firstPage is closed once the running (or last) listing has applied
	// its first page, or ended; nil before any listing.
	firstPage chan struct{}
}

// dirOf returns the '/'-terminated directory prefix of an object name
// ("" at the top of the bucket).
func dirOf(name string) string { return name[:strings.LastIndexByte(name, '/')+1] }

// addDirLocked counts a newly planned object in its directory; dropDirLocked
// uncounts it.
func (p *plans) addDirLocked(o object.Object) {
	dk := indexKey(o.Bucket, dirOf(o.Name))
	d := p.dirs[dk]
	if d == nil {
		d = &planDir{}
		p.dirs[dk] = d
	}
	d.planned++
}

func (p *plans) dropDirLocked(o object.Object) {
	dk := indexKey(o.Bucket, dirOf(o.Name))
	if d := p.dirs[dk]; d != nil {
		if d.planned--; d.planned <= 0 {
			delete(p.dirs, dk) // a running listing keeps its own pointer
		}
	}
}

// planListing is a directory listing the planner is to start.
type planListing struct {
	bucket, dir string
	want        int // objects planned in it
	d           *planDir
	first       chan struct{} // d.firstPage for this listing
	at          time.Time
}

// startListingsLocked returns the listings to start before fetching todo:
// the directories holding at least planListMin planned objects that were
// never listed, or not for planListTTL. It marks them listed now.
func (p *plans) startListingsLocked(todo []object.Object, now time.Time) []planListing {
	var out []planListing
	for _, o := range todo {
		dir := dirOf(o.Name)
		d := p.dirs[indexKey(o.Bucket, dir)]
		if d == nil || d.planned < planListMin || (!d.listedAt.IsZero() && now.Sub(d.listedAt) < planListTTL) {
			continue
		}
		d.listedAt, d.firstPage = now, make(chan struct{})
		out = append(out, planListing{bucket: o.Bucket, dir: dir, want: d.planned, d: d, first: d.firstPage, at: now})
	}
	return out
}

// listPlanDir lists one directory of planned objects and records the
// attributes of every planned object it yields (those in subdirectories
// too), a batch at a time. It gives up past 2 × want + planListSlack
// objects, and on an error (the objects are then stat'ed one by one).
func (c *Cache) listPlanDir(ctx context.Context, l planListing) {
	var once sync.Once
	firstDone := func() { once.Do(func() { close(l.first) }) }
	defer firstDone()
	limit := 2*l.want + planListSlack
	batch := make([]object.Attrs, 0, planListBatch)
	n := 0
	for a, err := range c.cfg.src.List(ctx, l.bucket, l.dir) {
		if err != nil {
			c.cfg.log.Debug("tier: planner: listing failed; statting its objects", "bucket", l.bucket, "dir", l.dir, "err", err)
			break
		}
		if n++; n > limit {
			c.cfg.log.Debug("tier: planner: listing given up; statting its objects", "bucket", l.bucket, "dir", l.dir,
				"planned", l.want, "listed", n-1)
			break
		}
		batch = append(batch, a)
		if len(batch) == planListBatch {
			c.applyListed(batch, l.at)
			batch = batch[:0]
			firstDone()
		}
	}
	c.applyListed(batch, l.at)
	c.mu.Lock()
	c.plans.stats.Listings++
	c.mu.Unlock()
}

// applyListed records the listed attributes of the planned objects among
// as, listed at time at.
func (c *Cache) applyListed(as []object.Attrs, at time.Time) {
	if len(as) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.plans
	for _, a := range as {
		k := indexKey(a.Bucket, a.Name)
		pl, ok := p.objects[k]
		if !ok {
			continue
		}
		a.Bucket, a.Name = pl.obj.Bucket, pl.obj.Name // the plan's strings: none held twice
		pl.listed, pl.listedAt = a, at
		p.objects[k] = pl
		p.noteSizeLocked(k, a.Size)
	}
}

// listedAttrs returns the listed attributes of planned object o, waiting
// for the first page of its directory's listing if one is running; false
// if there are none (not listed, listed longer than maxAge ago, or at another
// generation than o pins).
func (c *Cache) listedAttrs(ctx context.Context, o object.Object, maxAge time.Duration) (object.Attrs, bool) {
	k := indexKey(o.Bucket, o.Name)
	lookup := func() (object.Attrs, <-chan struct{}) {
		c.mu.Lock()
		defer c.mu.Unlock()
		p := c.plans
		pl, ok := p.objects[k]
		if !ok {
			return object.Attrs{}, nil
		}
		if a := pl.listed; a.Generation != 0 && time.Since(pl.listedAt) < maxAge &&
			(o.Generation == 0 || o.Generation == a.Generation) {
			return a, nil
		}
		if d := p.dirs[indexKey(o.Bucket, dirOf(o.Name))]; d != nil && d.firstPage != nil {
			return object.Attrs{}, d.firstPage
		}
		return object.Attrs{}, nil
	}
	a, wait := lookup()
	if a.Generation != 0 {
		return a, true
	}
	if wait == nil {
		return object.Attrs{}, false
	}
	select {
	case <-wait:
	case <-ctx.Done():
		return object.Attrs{}, false
	}
	a, _ = lookup()
	return a, a.Generation != 0
}
