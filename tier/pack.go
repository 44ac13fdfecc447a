package tier

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// packs reports whether a new copy of a goes to a segment (see segment.go).
func (c *Cache) packs(a object.Attrs) bool {
	return a.Size > 0 && a.Size < c.cfg.packBelow
}

// fillPacked downloads a into space of the active segment and commits it
// with the group it ends in (see packer): after one fdatasync of the
// segment, with one index batch. need is the reservation, the object's
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
		e, err = c.commitPacked(&packFill{a: a, seg: seg, off: off, blocks: need, done: make(chan struct{})})
	}
	c.segs.done(seg)
	if err != nil {
		if perr := punchRegions(seg, []region{{off, need}}); perr != nil {
			c.cfg.log.Warn("tier: free a failed fill's space", "object", a.Object.String(), "err", perr)
		}
		if rerr := c.segs.release(seg, 1); rerr != nil {
			c.cfg.log.Warn("tier: remove segment", "segment", seg.path, "err", rerr)
		}
		return nil, err
	}
	return e, nil
}

// writePacked allocates a's space at off in seg (so a full disk shows up
// before the download) and downloads a into it.
func (c *Cache) writePacked(ctx context.Context, a object.Attrs, u *object.Urgency, seg *segment, off int64) error {
	if err := c.allocateAt(seg.f, off, a.Size, c.base, 0); err != nil {
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

// packFill is a packed object written and waiting to be committed.
type packFill struct {
	a      object.Attrs
	seg    *segment
	off    int64
	blocks int64 // also its reservation
	e      *entry
	err    error
	done   chan struct{} // closed when e or err is set
}

// maxPackGroup bounds one group commit.
const maxPackGroup = 1024

// packWindow is how long the packer waits for more of the fills in
// progress to join a group before it commits: an fdatasync costs as much
// CPU for one object as for a hundred (about 200 µs on a cloud VM's disk),
// and a planned epoch's fills end a few at a time. A group that holds every
// fill in progress commits at once.
const packWindow = 2 * time.Millisecond

// commitPacked hands pf to the packer and waits for its group to commit.
// It does not give up on a cancelled context: the packer always answers
// (Close waits for fills before it stops the packer).
func (c *Cache) commitPacked(pf *packFill) (*entry, error) {
	c.packQ <- pf
	<-pf.done
	return pf.e, pf.err
}

// packLoop is the packer: it commits the packed objects written since its
// last group, as one group, until Close.
func (c *Cache) packLoop() {
	for {
		var group []*packFill
		select {
		case pf := <-c.packQ:
			group = append(group, pf)
		case <-c.stop:
			return
		}
		c.commitGroup(c.gather(group))
	}
}

// gather adds to group the fills that end within packWindow, while other
// fills are still writing, up to maxPackGroup.
func (c *Cache) gather(group []*packFill) []*packFill {
	var window <-chan time.Time
	for len(group) < maxPackGroup {
		select {
		case pf := <-c.packQ:
			group = append(group, pf)
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
		case pf := <-c.packQ:
			group = append(group, pf)
		case <-window:
			return group
		case <-c.stop:
			return group
		}
	}
	return group
}

// commitGroup makes a group of packed objects durable and live: one
// fdatasync per segment they are in, then their records in one index
// batch, then their entries installed. A crash before the batch loses the
// group's objects (not cached; restart frees their space), never serves a
// torn one.
func (c *Cache) commitGroup(group []*packFill) {
	synced := make(map[*segment]error)
	for _, pf := range group {
		if _, ok := synced[pf.seg]; !ok {
			err := unix.Fdatasync(int(pf.seg.f.Fd()))
			if err != nil {
				err = fmt.Errorf("tier: fdatasync segment: %w", err)
			}
			synced[pf.seg] = err
		}
	}
	ok := group[:0:0]
	for _, pf := range group {
		if pf.err = synced[pf.seg]; pf.err == nil {
			ok = append(ok, pf)
		}
	}
	if err := c.installPacked(ok); err != nil {
		for _, pf := range ok {
			pf.e, pf.err = nil, fmt.Errorf("tier: fill %s: %w", pf.a.Object, err)
		}
	}
	for _, pf := range group {
		close(pf.done)
	}
}

// installPacked indexes a group of synced packed objects in one batch and
// makes them live, each replacing its name's previous generation, and
// turns their reservations into used space.
func (c *Cache) installPacked(group []*packFill) error {
	if len(group) == 0 {
		return nil
	}
	now := time.Now().UnixNano()
	c.idxMu.Lock()
	if c.idxClosed {
		c.idxMu.Unlock()
		return ErrClosed
	}
	keys := make([]string, len(group))
	recs := make([]record, len(group))
	c.mu.Lock()
	for i, pf := range group {
		e := newEntry(c.base, pf.a, pf.blocks, fileIdent{ino: pf.seg.ino}, now)
		e.seg, e.rec.packed, e.rec.seg, e.rec.off = pf.seg, true, pf.seg.num, pf.off
		if old := c.entryLocked(e.key); old != nil { // pins outlive generations
			e.rec.pinned, e.rec.hotPin = old.rec.pinned, old.rec.hotPin
		}
		pf.e, keys[i], recs[i] = e, e.key, e.rec
	}
	c.mu.Unlock()
	if err := c.idx.putBatch(keys, recs); err != nil {
		c.idxMu.Unlock()
		return err
	}
	c.mu.Lock()
	var dead []*entry
	for _, pf := range group {
		e := pf.e
		if old := c.entryLocked(e.key); old != nil {
			dead = c.dropLocked(old, false, dead)
		}
		c.installLocked(e)
		c.base.reserved -= pf.blocks
		c.stats.fills++
		c.stats.bytesFetched += pf.a.Size
		if e.rec.hotPin {
			c.queuePromoteLocked(e)
		}
	}
	over, _ := c.base.lruVictimsLocked(c.base.committedLocked()-c.base.maxBytes, group[len(group)-1].e)
	dead = c.evictLocked(over, dead)
	c.base.signalLocked()
	c.trimWarmLocked()
	c.mu.Unlock()
	c.deleteRecords(over)
	c.idxMu.Unlock()
	c.removeFiles(dead)
	return nil
}
