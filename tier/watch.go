package tier

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
)

// watcher watches the data subdirectories of the tiers for files deleted or
// changed behind the cache's back. The watch goroutine owns it.
type watcher struct {
	w    *fsnotify.Watcher
	dirs map[string]*store // watched data subdirectory → its tier
}

// stores returns the cache's tiers: the base tier, then the hot tier.
func (c *Cache) stores() []*store {
	if c.hot != nil {
		return []*store{c.base, c.hot}
	}
	return []*store{c.base}
}

// startWatch starts the watch goroutine over both tiers' data
// subdirectories. If the kernel refuses (inotify limits), the cache runs
// unwatched, with a warning: Open still checks every file it serves.
func (c *Cache) startWatch() {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		c.cfg.log.Warn("tier: not watching the cache directories", "err", err)
		return
	}
	wt := &watcher{w: w, dirs: make(map[string]*store)}
	for _, st := range c.stores() {
		if err := wt.add(st); err != nil {
			c.cfg.log.Warn("tier: not watching the cache directories", "err", err)
			w.Close()
			return
		}
	}
	c.bg.Go(func() { c.watchLoop(wt) })
}

// add watches the data subdirectories of st.
func (wt *watcher) add(st *store) error {
	for _, d := range st.lay.subdirs() {
		if err := wt.w.Add(d); err != nil {
			return err
		}
		wt.dirs[d] = st
	}
	return nil
}

// watchLoop handles watch events until Close. Lost events (a queue
// overflow) or a watch error trigger a rescan of both tiers.
func (c *Cache) watchLoop(wt *watcher) {
	defer func() { c.hooks.Load().onExit("watcher") }()
	defer wt.w.Close()
	for {
		select {
		case ev, ok := <-wt.w.Events:
			if !ok {
				return
			}
			c.handleEvent(wt, ev)
		case err, ok := <-wt.w.Errors:
			if !ok {
				return
			}
			c.cfg.log.Warn("tier: watching the cache directories failed; rescanning", "err", err)
			for _, st := range c.stores() {
				c.rescan(wt, st, "")
			}
		case <-c.stop:
			return
		}
	}
}

// handleEvent checks the copy whose file an event names. Events say only
// that something happened to a path, maybe long ago: the cache's own
// renames and deletions cause them too, and a path may have been
// republished since. So an event is a cue to compare the path with the
// live copy it should hold (inode, size, mtime), never a verdict; only a
// live copy whose file differs is dropped.
func (c *Cache) handleEvent(wt *watcher, ev fsnotify.Event) {
	if !ev.Has(fsnotify.Create | fsnotify.Write | fsnotify.Remove | fsnotify.Rename) {
		return // attribute changes
	}
	if st := wt.dirs[ev.Name]; st != nil { // a watched directory itself
		if ev.Has(fsnotify.Remove | fsnotify.Rename) {
			c.rescan(wt, st, ev.Name)
		}
		return
	}
	st := wt.dirs[filepath.Dir(ev.Name)]
	if st == nil {
		return
	}
	dropped := false
	if id, ok := parseID(filepath.Base(ev.Name)); ok {
		dropped = c.checkCopy(st, id)
	}
	c.hooks.Load().onWatched(ev.Name, dropped)
}

// checkCopy drops the live copy of id in st if its file is not the one
// the cache published, and reports whether it did.
func (c *Cache) checkCopy(st *store, id fileID) bool {
	c.mu.Lock()
	cp := c.byID[id]
	if cp != nil && st == c.hot {
		cp = cp.hot
	}
	c.mu.Unlock()
	if cp == nil {
		return false
	}
	return c.dropIfChanged(cp)
}

// dropIfChanged drops copy cp if its file was deleted or changed, and
// reports whether it did.
func (c *Cache) dropIfChanged(cp *entry) bool {
	p := cp.path()
	err := cp.checkPath()
	if !errors.Is(err, errChanged) {
		return false
	}
	c.cfg.log.Warn("tier: cached file deleted or changed behind the cache's back; dropping it",
		"tier", cp.st.name, "object", cp.attrs().Object.String(), "path", p, "err", err)
	return c.dropDamaged(cp)
}

// rescan recreates st's directories if they were removed, watches them
// again and checks the live copies of st against their files: those in
// data subdirectory dir, or all of them if dir is "".
func (c *Cache) rescan(wt *watcher, st *store, dir string) {
	dirs := st.lay.subdirs()
	if dir != "" {
		dirs = []string{dir}
	}
	for _, d := range append([]string{st.lay.tmp}, dirs...) {
		if err := os.MkdirAll(d, 0o755); err != nil {
			c.cfg.log.Warn("tier: recreate a cache directory", "dir", d, "err", err)
		}
	}
	for _, d := range dirs {
		if err := wt.w.Add(d); err != nil {
			c.cfg.log.Warn("tier: watch a cache directory again", "dir", d, "err", err)
		}
	}
	sub := filepath.Base(dir)
	c.mu.Lock()
	var cps []*entry
	for _, e := range c.entries {
		if st == c.hot {
			e = e.hot
		}
		if e != nil && (dir == "" || e.id.String()[:2] == sub) {
			cps = append(cps, e)
		}
	}
	c.mu.Unlock()
	dropped := 0
	for _, cp := range cps {
		if c.dropIfChanged(cp) {
			dropped++
		}
	}
	c.cfg.log.Info("tier: rescanned the cache directory", "tier", st.name, "dir", dir,
		"copies", len(cps), "dropped", dropped)
	c.hooks.Load().onRescanned(st.name)
}
