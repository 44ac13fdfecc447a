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

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// scanWorkers is how many data subdirectories reconcile reads at once.
const scanWorkers = 4

// found is a data file that matches an index record.
type found struct {
	e      *entry
	blocks int64
}

// dirScan is what reconcile found in one data subdirectory.
type dirScan struct {
	found    []found
	orphans  int      // files removed because no record names them
	mismatch []*entry // records whose file had the wrong size or type (file removed)
}

// reconcile makes the index and the data files agree before the cache is
// used: temp files are removed; files no record names (orphans) are
// removed; records whose file is missing or has the wrong size are dropped
// (with the file). What is left is adopted without being downloaded again.
// Runs before the Cache is shared.
func (c *Cache) reconcile(ctx context.Context) error {
	start := time.Now()
	temps, err := c.clearTemp()
	if err != nil {
		return err
	}
	expected, bad, err := c.loadIndex()
	if err != nil {
		return err
	}
	scans, err := c.scanData(ctx, expected)
	if err != nil {
		return err
	}
	var adopt []found
	orphans := 0
	drop := bad
	for _, s := range scans {
		adopt = append(adopt, s.found...)
		orphans += s.orphans
		for _, e := range s.mismatch {
			drop = append(drop, e.key)
			delete(expected, e.id)
		}
	}
	for _, f := range adopt {
		delete(expected, f.e.id)
	}
	for _, e := range expected { // records without a file
		drop = append(drop, e.key)
	}
	if err := c.idx.deleteBatch(drop); err != nil {
		return err
	}
	c.adopt(adopt)
	over := c.trim()
	st := c.Stats()
	c.cfg.log.Info("tier: cache opened", "dir", c.lay.root, "entries", st.Entries, "used", st.UsedBytes,
		"max", st.MaxBytes, "temp_removed", temps, "orphans_removed", orphans, "records_dropped", len(drop),
		"evicted_over_budget", st.Evictions, "took", time.Since(start).Round(time.Millisecond))
	if over > 0 {
		c.cfg.log.Warn("tier: pinned entries exceed the budget", "over", over)
	}
	return nil
}

// clearTemp removes everything in the temp directory: fills interrupted by
// a crash.
func (c *Cache) clearTemp() (int, error) {
	des, err := os.ReadDir(c.lay.tmp)
	if err != nil {
		return 0, fmt.Errorf("tier: reconcile: %w", err)
	}
	for _, de := range des {
		if err := os.RemoveAll(filepath.Join(c.lay.tmp, de.Name())); err != nil {
			return 0, fmt.Errorf("tier: reconcile: remove temp file: %w", err)
		}
	}
	return len(des), nil
}

// loadIndex reads every record into an entry, keyed by file id. bad lists
// the keys of records that do not decode (or collide), to be dropped.
func (c *Cache) loadIndex() (map[fileID]*entry, []string, error) {
	expected := make(map[fileID]*entry)
	var bad []string
	err := c.idx.scan(func(k, v []byte) {
		key := string(k)
		bucket, name, ok := splitKey(key)
		r, err := decodeRecord(v)
		if !ok || err != nil {
			c.cfg.log.Warn("tier: dropping malformed index record", "key", key, "err", err)
			bad = append(bad, key)
			return
		}
		e := &entry{key: key, id: idOf(bucket, name, r.gen), rec: r}
		if _, dup := expected[e.id]; dup {
			bad = append(bad, key)
			return
		}
		expected[e.id] = e
	})
	return expected, bad, err
}

// scanData reads the 256 data subdirectories in parallel, removing orphans
// and mismatched files. expected is only read.
func (c *Cache) scanData(ctx context.Context, expected map[fileID]*entry) ([]dirScan, error) {
	scans := make([]dirScan, 256)
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(scanWorkers)
	for i := range scans {
		g.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			s, err := c.scanDir(fmt.Sprintf("%02x", i), expected)
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
func (c *Cache) scanDir(sub string, expected map[fileID]*entry) (dirScan, error) {
	var s dirScan
	dir := filepath.Join(c.lay.data, sub)
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
			s.mismatch = append(s.mismatch, e)
			if err := removeAt(fd, dir, name); err != nil {
				return s, err
			}
			continue
		}
		s.found = append(s.found, found{e: e, blocks: st.Blocks * 512})
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
	slices.SortFunc(fs, func(a, b found) int {
		if a.e.rec.access != b.e.rec.access {
			return cmp.Compare(a.e.rec.access, b.e.rec.access)
		}
		return strings.Compare(a.e.key, b.e.key)
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range fs {
		if f.e.rec.blocks != f.blocks {
			f.e.rec.blocks = f.blocks
			f.e.dirty = true // written by the next flush
		}
		c.installLocked(f.e)
	}
}
