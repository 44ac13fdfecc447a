package tier

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// scanWorkers is how many data subdirectories reconcile reads at once.
const scanWorkers = 4

// found is a data file that matches an index record.
type found struct {
	e      *entry
	blocks int64
	ident  fileIdent
	access int64 // e.rec.access, beside the rest for sorting
}

// dirScan is what reconcile found in one data subdirectory.
type dirScan struct {
	found   []found
	orphans int // files removed because no record names them
}

// reconcile makes the index and the data files agree before the cache is
// used: temp files are removed; files no record names (orphans) are
// removed; records whose file is missing or has the wrong size are dropped
// (with the file). What is left is adopted without being downloaded again.
// Then the same for the shm tier, whose files are adopted only for records
// that say so. Runs before the Cache is shared.
func (c *Cache) reconcile(ctx context.Context) error {
	start := time.Now()
	temps, err := c.base.clearTemp()
	if err != nil {
		return err
	}
	expected, packed, cold, bad, err := c.loadIndex()
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			cold.release()
		}
	}()
	adopt, orphans, drop, err := c.scanTier(ctx, c.base, expected)
	if err != nil {
		return err
	}
	pk, err := c.reconcileSegments(packed, cold)
	if err != nil {
		return err
	}
	adopt = append(adopt, pk.adopt...)
	drop = append(drop, pk.drop...)
	drop = append(drop, bad...)
	if err := c.idx.deleteBatch(drop); err != nil {
		return err
	}
	c.adopt(adopt)
	if err := c.adoptCold(cold, pk); err != nil {
		return err
	}
	ok = true
	var hot hotReconcile
	if c.hot != nil {
		if hot, err = c.reconcileHot(ctx); err != nil {
			return err
		}
	}
	over := c.trim()
	if c.hot != nil {
		c.trimHot()
	}
	all := c.Stats()
	st := all.Base()
	shm, _ := all.Shm() // zero without a shm tier
	c.cfg.log.Info("tier: cache opened", "dir", c.base.lay.root, "tier", c.base.name, "entries", st.Entries,
		"used", st.UsedBytes, "max", st.MaxBytes, "temp_removed", temps, "orphans_removed", orphans,
		"records_dropped", len(drop), "evicted_over_budget", st.Evictions,
		"segments", pk.segments, "segments_removed", pk.removed, "segment_dead_bytes", pk.dead,
		"shm_entries", shm.Entries, "shm_used", shm.UsedBytes, "shm_temp_removed", hot.temps,
		"shm_orphans_removed", hot.orphans, "shm_copies_lost", hot.lost,
		"took", time.Since(start).Round(time.Millisecond))
	if over > 0 {
		c.cfg.log.Warn("tier: pinned entries exceed the budget", "over", over)
	}
	return nil
}

// scanTier checks the data files of st against expected: it returns the
// files to adopt, the number of orphans removed, and the keys of expected
// entries whose file is missing or wrong (and removed). It empties
// expected.
func (c *Cache) scanTier(ctx context.Context, st *store, expected map[fileID]*entry) (
	adopt []found, orphans int, missing []string, err error) {
	scans, err := c.scanData(ctx, st.lay, expected)
	if err != nil {
		return nil, 0, nil, err
	}
	n := 0
	for _, s := range scans {
		n += len(s.found)
	}
	adopt = make([]found, 0, n)
	for _, s := range scans {
		adopt = append(adopt, s.found...)
		orphans += s.orphans
	}
	for _, f := range adopt {
		delete(expected, f.e.id)
	}
	for id, e := range expected { // records without a (good) file
		missing = append(missing, e.key)
		delete(expected, id)
	}
	return adopt, orphans, missing, nil
}

// hotReconcile is what reconcileHot did, for the start-up log.
type hotReconcile struct {
	temps, orphans, lost int
}

// reconcileHot adopts the shm files of entries whose record says they are
// in shm and whose file has their size; it removes every other file there,
// and clears the flag of records whose shm copy is gone (a reboot cleared
// the tmpfs, or the copy was damaged).
func (c *Cache) reconcileHot(ctx context.Context) (hotReconcile, error) {
	var r hotReconcile
	var err error
	if r.temps, err = c.hot.clearTemp(); err != nil {
		return r, err
	}
	stray := filepath.Join(c.hot.lay.root, indexName)
	if _, err := os.Lstat(stray); err == nil { // left by a shm-only cache
		c.cfg.log.Warn("tier: removing the index of a former shm-only cache", "dir", stray)
		if err := os.RemoveAll(stray); err != nil {
			return r, fmt.Errorf("tier: reconcile shm: %w", err)
		}
	}
	expected := make(map[fileID]*entry)
	c.mu.Lock()
	for _, e := range c.entries {
		if e.rec.inShm {
			expected[e.id] = e
		}
	}
	c.mu.Unlock()
	adopt, orphans, lost, err := c.scanTier(ctx, c.hot, expected)
	if err != nil {
		return r, err
	}
	r.orphans, r.lost = orphans, len(lost)
	sortByAccess(adopt)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, key := range lost {
		e := c.entries[key]
		e.rec.inShm = false
		c.markDirtyLocked(e)
	}
	for _, f := range adopt {
		c.installHotLocked(f.e, c.newHotCopyLocked(f.e, f.blocks, f.ident))
	}
	return r, nil
}

// coldLoad is the cold sets start-up loads: unpinned and pinned records.
type coldLoad struct{ unpinned, pinned *coldSet }

// of returns the set for a record pinned or not.
func (l coldLoad) of(pinned bool) *coldSet {
	if pinned {
		return l.pinned
	}
	return l.unpinned
}

// release unmaps both sets.
func (l coldLoad) release() {
	l.unpinned.release()
	l.pinned.release()
}

// loadIndex reads every record: those with a file of their own into
// entries keyed by file id; packed ones at rest (not in shm nor pinned hot,
// with the blocks their size takes) into the cold sets without making
// entries of them, the other packed ones into entries in a list. bad lists
// the keys of records that do not decode (or collide), to be dropped.
func (c *Cache) loadIndex() (map[fileID]*entry, []*entry, coldLoad, []string, error) {
	expected := make(map[fileID]*entry)
	var packed []*entry
	var bad []string
	cold := coldLoad{newColdSet(), newColdSet()}
	align := max(c.base.bsize, int64(os.Getpagesize()), pageSize) // as newSegments has it
	var coldErr error
	err := c.idx.scan(func(k, v []byte) {
		r, err := decodeRecord(v)
		if c.hot == nil {
			r.inShm = false // no shm tier now: any copy there is not ours to use
		}
		if err == nil && r.packed && !r.hotPin && !r.inShm && r.blocks == roundUp(r.size, align) &&
			coldErr == nil {
			var buf [256]byte
			if val := appendRecord(buf[:0], r); fits(k, val) && validKey(k) {
				_, coldErr = cold.of(r.pinned).add(k, val)
				return
			}
		}
		key := string(k)
		bucket, name, ok := splitKey(key)
		if !ok || err != nil {
			c.cfg.log.Warn("tier: dropping malformed index record", "key", key, "err", err)
			bad = append(bad, key)
			return
		}
		e := &entry{key: key, st: c.base, id: idOf(bucket, name, r.gen), rec: r}
		if r.packed {
			packed = append(packed, e)
			return
		}
		if _, dup := expected[e.id]; dup {
			bad = append(bad, key)
			return
		}
		expected[e.id] = e
	})
	if err == nil {
		err = coldErr
	}
	if err != nil {
		cold.release()
	}
	return expected, packed, cold, bad, err
}

// validKey reports whether splitKey accepts index key k.
func validKey(k []byte) bool {
	_, _, ok := splitKey(unsafe.String(unsafe.SliceData(k), len(k)))
	return ok
}

// adoptCold makes the cold records that reconcileSegments kept the cache's
// cold sets, the unpinned least recently used first, and accounts for them.
func (c *Cache) adoptCold(cold coldLoad, pk segmentReconcile) error {
	// Unpinned first, by last access; records loaded in key order keep it
	// on a tie.
	slices.SortFunc(pk.cold, func(a, b packedRec) int {
		switch {
		case a.pinned != b.pinned:
			if a.pinned {
				return 1
			}
			return -1
		case a.access != b.access:
			return cmp.Compare(a.access, b.access)
		}
		return cmp.Compare(a.pos, b.pos)
	})
	cold.unpinned.reorder(cold.unpinned.len(), func(i int) uint64 { return pk.cold[i].pos })
	var pinnedBytes int64
	for _, p := range pk.cold[cold.unpinned.len():] {
		pinnedBytes += roundUp(p.size, c.segs.align)
	}
	for _, cs := range []*coldSet{cold.unpinned, cold.pinned} {
		if err := cs.tidy(); err != nil { // the chunks that dropped records left sparse
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cold, c.pinnedCold = cold.unpinned, cold.pinned
	c.base.used += pk.coldUsed + pk.dead
	c.base.dead += pk.dead
	c.base.pinnedBytes += pinnedBytes
	c.base.copies += len(pk.cold)
	return nil
}

// scanData reads the 256 data subdirectories of lay in parallel, removing
// orphans and mismatched files. expected is only read.
func (c *Cache) scanData(ctx context.Context, lay layout, expected map[fileID]*entry) ([]dirScan, error) {
	scans := make([]dirScan, 256)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(scanWorkers)
	for i := range scans {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, err := scanDir(lay, fmt.Sprintf("%02x", i), expected)
			scans[i] = s
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("tier: reconcile: %w", err)
	}
	return scans, nil
}

// scanDir checks the files of one data subdirectory against the index.
func scanDir(lay layout, sub string, expected map[fileID]*entry) (dirScan, error) {
	var s dirScan
	dir := filepath.Join(lay.data, sub)
	d, err := os.Open(dir)
	if err != nil {
		return s, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return s, fmt.Errorf("read %s: %w", dir, err)
	}
	fd := int(d.Fd())
	for _, name := range names {
		id, ok := parseID(name)
		e := expected[id]
		if !ok || name[:2] != sub || e == nil {
			s.orphans++
			if err := removeAt(fd, dir, name); err != nil {
				return s, err
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return s, fmt.Errorf("stat %s: %w", filepath.Join(dir, name), err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.rec.size {
			if err := removeAt(fd, dir, name); err != nil {
				return s, err
			}
			continue
		}
		s.found = append(s.found, found{e: e, blocks: st.Blocks * 512,
			ident: fileIdent{ino: st.Ino, mtime: st.Mtim.Nano()}})
	}
	return s, nil
}

// removeAt removes name from the directory open as fd, recursively if it is
// a directory. Symbolic links are removed, never followed.
func removeAt(fd int, dir, name string) error {
	err := unix.Unlinkat(fd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = os.RemoveAll(filepath.Join(dir, name))
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// adopt installs the entries found on disk, least recently used first.
func (c *Cache) adopt(fs []found) {
	sortByAccess(fs)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) == 0 { // size the maps once
		c.entries = make(map[string]*entry, len(fs))
		c.byID = make(map[fileID]*entry, len(fs))
	}
	for _, f := range fs {
		if f.e.rec.blocks != f.blocks {
			f.e.rec.blocks = f.blocks
			c.markDirtyLocked(f.e) // written by the next flush
		}
		f.e.ident = f.ident
		c.installLocked(f.e)
	}
}

// sortByAccess sorts found files least recently used first.
func sortByAccess(fs []found) {
	for i := range fs {
		fs[i].access = fs[i].e.rec.access
	}
	slices.SortFunc(fs, func(a, b found) int {
		if a.access != b.access {
			return cmp.Compare(a.access, b.access)
		}
		return strings.Compare(a.e.key, b.e.key)
	})
}
