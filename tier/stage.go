package tier

import (
	"context"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// promoteYield is the longest the promoter waits for the cache to go
// quiet before it promotes a queued object anyway: promotions give way to
// downloads and to readers (all of them copy bytes, and on a machine short
// of cores a promotion slows the epoch it runs beside) but are not starved
// by a download or a reader that never stops.
//
// promoteQuiet is how long no reader may have opened an object for the
// cache to count as quiet.
const (
	promoteYield = time.Second
	promoteQuiet = 100 * time.Millisecond
)

// downloads counts the cache's downloads in flight, says when the count
// falls to zero, and keeps the time readers last opened an object: what
// the promoter waits on.
type downloads struct {
	n        atomic.Int64
	idle     chan struct{} // capacity 1: the count fell to zero
	lastOpen atomic.Int64  // unix nanoseconds
}

func newDownloads() *downloads { return &downloads{idle: make(chan struct{}, 1)} }

// signalIdle says the count fell to zero.
func (d *downloads) signalIdle() {
	select {
	case d.idle <- struct{}{}:
	default:
	}
}

// noteOpen records that a reader opened an object at now (unix ns).
func (d *downloads) noteOpen(now int64) {
	if now > d.lastOpen.Load() {
		d.lastOpen.Store(now)
	}
}

// yield waits until no download is in flight and no reader has opened an
// object for quiet, at most max, or until stop is closed.
func (d *downloads) yield(max, quiet time.Duration, stop <-chan struct{}) {
	deadline := time.Now().Add(max)
	for {
		now := time.Now()
		left := deadline.Sub(now)
		busy := d.n.Load() > 0
		wait := time.Duration(d.lastOpen.Load() + int64(quiet) - now.UnixNano())
		if !busy && wait <= 0 || left <= 0 {
			return
		}
		if busy || wait > left {
			wait = left // the idle signal ends the wait sooner
		}
		t := time.NewTimer(wait)
		select {
		case <-d.idle:
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		}
		t.Stop()
	}
}

// StageObjects makes each of objs that is cached (at its generation, if
// one is given) fast to read next, the way a reader about to map them
// wants: an object whose disk copy is wholly in memory (the page cache,
// as after a fresh download) can be read at once, much sooner than after
// a promotion on the reader's path (though more slowly than an shm copy),
// so its promotion is queued for the promoter, which makes it in the background
// once the cache is quiet; any other is promoted here,
// synchronously, as PromoteObjects does. It returns how many it promoted
// and how many it queued; failures are joined (ErrNoSpace for those that
// do not fit). Without a shm tier it returns ErrNoShm.
func (c *Cache) StageObjects(ctx context.Context, objs []object.Object) (promoted, queued int, err error) {
	end, err := c.begin()
	if err != nil {
		return 0, 0, err
	}
	defer end()
	if c.hot == nil {
		return 0, 0, c.noShm()
	}
	es := c.planEntries(objs)
	now := es[:0]
	for _, e := range es {
		if c.hooks.Load().isResident(e.key, e.path(), e.rec.off, e.rec.size) {
			c.mu.Lock()
			if e := c.currentLocked(e); e != nil && e.hot == nil && !e.promoting {
				c.queuePromoteLocked(e)
			}
			c.mu.Unlock()
			queued++
			continue
		}
		now = append(now, e)
	}
	promoted, err = c.promoteAll(ctx, now)
	return promoted, queued, err
}

// planEntries returns the live base entries of objs that have no shm copy.
func (c *Cache) planEntries(objs []object.Object) []*entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var es []*entry
	for _, o := range objs {
		e := c.entryLocked(indexKey(o.Bucket, o.Name))
		if e != nil && e.hot == nil && (o.Generation == 0 || o.Generation == e.rec.gen) {
			es = append(es, e)
		}
	}
	return es
}

// resident reports whether every page of the size bytes at off (a multiple
// of the page size) of the file at path
// is in memory (mincore). Any error says no: the caller then copies.
func resident(path string, off, size int64) bool {
	if size <= 0 || int64(int(size)) != size {
		return false
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), off, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false
	}
	defer unix.Munmap(m)
	page := int64(os.Getpagesize())
	vec := make([]byte, (size+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(m))), uintptr(len(m)),
		uintptr(unsafe.Pointer(unsafe.SliceData(vec)))) // x/sys/unix has no Mincore wrapper
	if errno != 0 {
		return false
	}
	for _, v := range vec {
		if v&1 == 0 {
			return false
		}
	}
	return true
}
