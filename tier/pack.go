package tier

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"syscall"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// packs reports whether a new copy of a goes to a segment (see segment.go).
func (c *Cache) packs(a object.Attrs) bool {
	return a.Size > 0 && a.Size < c.cfg.packBelow
}

// fillPacked downloads a into space of the active segment and makes it a
// live entry at once; the packer makes it durable behind the readers (see
// packLoop): one fdatasync of the segment for a group of objects, then
// their records in one index batch. need is the reservation, the object's
// size rounded up to the segment alignment.
func (c *Cache) fillPacked(ctx context.Context, a object.Attrs, u *object.Urgency, need int64) (*entry, error) {
	seg, off, err := c.segs.alloc(a.Size)
	if err != nil {
		return nil, err
	}
	err = c.roomOnFull(need, func() error { return c.writePacked(ctx, a, u, seg, off) })
	if err == nil && !a.HasCRC32C {
		a.CRC32C, err = sectionCRC(seg, off, a.Size)
		a.HasCRC32C = err == nil
	}
	var e *entry
	if err == nil {
		e, err = c.installPacked(a, seg, off, need)
	}
	if err != nil {
		c.segmentDone(seg) // it holds this object still: never removed here
		// No record names this space: punched at once.
		if perr := punchRegions(seg, []region{{off, need}}); perr != nil {
			c.cfg.log.Warn("tier: free a failed fill's space", "object", a.Object.String(), "err", perr)
		}
		c.releaseSegment(seg, 1)
		return nil, err
	}
	// The fill stays in the segment's count (its file open) until the
	// packer has synced it.
	c.packQ <- e
	return e, nil
}

// writePacked makes sure a's space at off in seg is allocated (so a full
// disk shows up before the download) and downloads a into it.
func (c *Cache) writePacked(ctx context.Context, a object.Attrs, u *object.Urgency, seg *segment, off int64) error {
	if err := c.growSegment(seg, off+a.Size); err != nil {
		return fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	end := c.downloadStarted()
	if err := c.cfg.dl.Fetch(ctx, a, &regionWriter{f: seg.f, off: off, size: a.Size}, u); err != nil {
		end(0)
		return fmt.Errorf("tier: fill %s: %w", a.Object, err)
	}
	end(a.Size)
	return nil
}

// growSegment allocates seg's file space up to end at least, a
// segmentChunk at a time (never past the segment's maximum size unless end
// is), through allocateAt's free-space check; a chunk the filesystem cannot
// hold falls back to end alone.
func (c *Cache) growSegment(seg *segment, end int64) error {
	seg.allocMu.Lock()
	defer seg.allocMu.Unlock()
	if end <= seg.allocated {
		return nil
	}
	to := max(end, min(seg.allocated+segmentChunk, c.segs.max))
	if seg.limit > 0 { // sealed: the fills left end before limit
		to = max(end, min(to, seg.limit))
	}
	err := c.allocateAt(seg.f, seg.allocated, to-seg.allocated, c.base, 0)
	if errors.Is(err, syscall.ENOSPC) && to > end {
		to = end
		err = c.allocateAt(seg.f, seg.allocated, to-seg.allocated, c.base, 0)
	}
	if err != nil {
		return err
	}
	seg.allocated = to
	return nil
}

// regionWriter writes an object's bytes into its region of a segment,
// refusing writes past its end.
type regionWriter struct {
	f         io.WriterAt
	off, size int64
}

func (w *regionWriter) WriteAt(p []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(p)) > w.size {
		return 0, fmt.Errorf("tier: write of %d bytes at %d past the object's %d: %w", len(p), off, w.size, object.ErrShortRead)
	}
	return w.f.WriteAt(p, w.off+off)
}

// sectionCRC returns the CRC32C of the n bytes at off in seg.
func sectionCRC(seg *segment, off, n int64) (uint32, error) {
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.NewSectionReader(seg.f, off, n)); err != nil {
		return 0, fmt.Errorf("tier: checksum packed object: %w", err)
	}
	return h.Sum32(), nil
}

// maxPackGroup bounds one group commit.
const maxPackGroup = 1024

// packWindow is how long the packer gathers packed objects into a group
// while fills are still writing: an fdatasync costs as much CPU for one
// object as for a hundred (about 200 µs on a cloud VM's disk), and nobody
// waits for it (the objects are served from the page cache meanwhile), so
// the window is set by what a crash may lose, not by latency. A group that
// holds every fill in progress commits at once.
const packWindow = 20 * time.Millisecond

// packLoop is the packer: it makes the packed objects filled since its
// last group durable, as one group. At Close (after the fills ended) it
// commits what is left and returns.
func (c *Cache) packLoop() {
	for {
		var group []*entry
		select {
		case e := <-c.packQ:
			group = append(group, e)
		case <-c.stop:
			for {
				select {
				case e := <-c.packQ:
					group = append(group, e)
				default:
					if len(group) > 0 {
						c.commitGroup(group)
					}
					return
				}
			}
		}
		c.commitGroup(c.gather(group))
	}
}

// gather adds to group the fills that end within packWindow, while other
// fills are still writing, up to maxPackGroup.
func (c *Cache) gather(group []*entry) []*entry {
	var window <-chan time.Time
	for len(group) < maxPackGroup {
		select {
		case e := <-c.packQ:
			group = append(group, e)
			continue
		default:
		}
		if c.segs.inFlight() <= len(group) { // nothing else is coming
			return group
		}
		if window == nil {
			t := time.NewTimer(packWindow)
			defer t.Stop()
			window = t.C
		}
		select {
		case e := <-c.packQ:
			group = append(group, e)
		case <-window:
			return group
		case <-c.stop:
			return group
		}
	}
	return group
}

// commitGroup makes a group of live packed entries durable: one
// fdatasync per segment they are in, then the records of those still
// cached in one index batch. A crash before the batch loses the group's
// objects (not cached; restart frees their space), never serves a torn
// one. An entry whose segment could not be synced is dropped.
func (c *Cache) commitGroup(group []*entry) {
	c.hooks.Load().onSyncing(len(group))
	synced := make(map[*segment]error)
	for _, e := range group {
		if _, ok := synced[e.seg]; !ok {
			err := unix.Fdatasync(int(e.seg.f.Fd()))
			if err != nil {
				err = fmt.Errorf("tier: fdatasync segment: %w", err)
			}
			synced[e.seg] = err
		}
	}
	var failed []*entry
	c.idxMu.Lock()
	c.mu.Lock()
	var keys []string
	var recs []record
	var written []*entry
	for _, e := range group {
		if err := synced[e.seg]; err != nil {
			// It stays unsynced, so nothing writes its record before
			// dropDamaged drops it below.
			c.cfg.log.Warn("tier: packed object not made durable; dropping it", "key", e.key, "err", err)
			failed = append(failed, e)
			continue
		}
		if e.state == live && c.entries[e.key] == e && !c.idxClosed {
			keys, recs, written = append(keys, e.key), append(recs, e.rec), append(written, e)
			e.dirty = false // written now, with every change so far
		}
		e.unsynced = false
	}
	c.mu.Unlock()
	// Holding idxMu, no entry can be replaced or dropped until the write
	// ends (a drop deletes its record after this batch).
	err := c.idx.putBatch(keys, recs)
	c.mu.Lock()
	if err != nil {
		c.cfg.log.Warn("tier: index packed objects; the flusher retries", "n", len(keys), "err", err)
		for _, e := range written {
			c.markDirtyLocked(e)
		}
	}
	c.trimWarmLocked() // the entries just written are clean: they may freeze
	c.mu.Unlock()
	c.idxMu.Unlock()
	for _, e := range group {
		c.segmentDone(e.seg)
	}
	for _, e := range failed {
		c.dropDamaged(e)
	}
}

// installPacked makes a packed object written at off in seg a live entry,
// replacing its name's previous generation (an older generation than the
// one cached is transient: see transientLocked), and turns its reservation
// into used space. Its record is the packer's to write (entry.unsynced).
func (c *Cache) installPacked(a object.Attrs, seg *segment, off, blocks int64) (*entry, error) {
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return nil, ErrClosed
	}
	c.mu.Lock()
	e := newEntry(c.base, a, blocks, fileIdent{ino: seg.ino}, time.Now().UnixNano())
	e.seg, e.rec.packed, e.rec.seg, e.rec.off = seg, true, seg.num, off
	var dead, gone []*entry
	old, kept := c.replacingLocked(e, blocks)
	if !kept {
		c.mu.Unlock()
		c.idxMu.Unlock()
		return e, nil
	}
	if old != nil {
		dead = c.dropLocked(old, false, dead)
		gone = append(gone, old) // its record goes now: a crash keeps neither
	}
	e.unsynced = true
	c.markDirtyLocked(e) // not frozen until the packer wrote it
	c.installLocked(e)
	c.base.reserved -= blocks
	c.stats.fills++
	c.stats.bytesFetched += a.Size
	if e.rec.hotPin {
		c.queuePromoteLocked(e)
	}
	over, _ := c.base.lruVictimsLocked(c.base.committedLocked()-c.base.maxBytes, e)
	dead = c.evictLocked(over, dead)
	c.base.signalLocked()
	c.trimWarmLocked()
	c.mu.Unlock()
	c.deleteRecords(append(gone, over...))
	c.idxMu.Unlock()
	c.removeFiles(dead) // file I/O: not under the index lock
	return e, nil
}
