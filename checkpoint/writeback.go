package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// Staging makes a fresh staging directory, Dir/staging/<random>, and gives
// it to owner (GiveDir): a save of it renames its files into the store,
// nothing copied, and the files written into it start going to disk as
// they are written (see writeback). The store removes every staging
// directory when it opens.
func (s *Store) Staging(owner *Owner) (string, error) {
	var b [8]byte
	rand.Read(b[:])
	dir := filepath.Join(s.cfg.Dir, "staging", hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", fmt.Errorf("checkpoint: %w", err)
	}
	if err := GiveDir(dir, owner); err != nil {
		os.Remove(dir)
		return "", err
	}
	if s.wb != nil {
		if err := s.wb.watch(dir); err != nil {
			s.log.Debug("checkpoint: writeback watch", "dir", dir, "err", err)
		}
	}
	return dir, nil
}

// writeback starts the disk's writes of the files written into the store's
// staging directories while they are written, so that a save's fsyncs find
// their bytes on disk already: the save's stall is then writing the files
// with the disk writing alongside, not writing them and then flushing
// them. It only starts writeback (sync_file_range's SYNC_FILE_RANGE_WRITE,
// which waits for nothing but a full device queue): durability is still
// the save's fsync of each file. Without inotify a save flushes
// everything itself, as it does for a directory outside staging.
type writeback struct {
	w    *fsnotify.Watcher
	root string // <Dir>/staging: the staging directories are its children
	log  *slog.Logger

	kicked func(p string, err error) // testKicked when made
	limit  int                       // most directories watched at once

	mu    sync.Mutex
	dirty map[string]struct{} // files written since the flusher last took them
	wake  chan struct{}       // capacity 1: files are dirty
}

// writebackWatches bounds the directories a writeback watches at once:
// the staging directories' owners make their subdirectories, and
// inotify's watches are counted per user of the agent, whose other
// watchers (the configuration, the disk tier) must not run out. A
// directory past it is flushed by its save alone.
var writebackWatches = 1024

// testKicked, if set before a store opens, is called after each file's
// writeback is started (or could not be).
var testKicked func(p string, err error)

// newWriteback returns a writeback of the staging directories in root,
// watching none yet.
func newWriteback(root string, log *slog.Logger) (*writeback, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return &writeback{w: w, root: root, log: log, kicked: testKicked, limit: writebackWatches, dirty: make(map[string]struct{}), wake: make(chan struct{}, 1)}, nil
}

// watch starts the writeback of the files written under dir, a staging
// directory the store just made (empty), or a directory in one.
func (b *writeback) watch(dir string) error {
	if len(b.w.WatchList()) >= b.limit {
		return fmt.Errorf("%d directories watched already", b.limit)
	}
	return b.w.Add(dir)
}

// run handles the watcher's events until ctx ends, marking written files
// dirty and watching new directories, and starts their writeback on a
// second goroutine; it closes the watcher before it returns.
func (b *writeback) run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer b.w.Close()
	wg.Go(func() { b.flushLoop(ctx) })
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-b.w.Errors:
			if !ok {
				return
			}
			// An overflowed queue loses events: those files are
			// flushed by their save's fsync alone.
			b.log.Debug("checkpoint: writeback watcher", "err", err)
		case ev, ok := <-b.w.Events:
			if !ok {
				return
			}
			switch {
			case ev.Has(fsnotify.Write):
				b.mark(ev.Name)
			case ev.Has(fsnotify.Create):
				b.created(ev.Name)
			}
		}
	}
}

// created handles a new entry at p: a directory is watched, with what was
// put in it before the watch began; a file (moved in whole, or created
// empty) is dirty. A symlink is neither: nothing outside the staging
// directory is touched.
func (b *writeback) created(p string) {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
	case fi.Mode().IsRegular():
		b.mark(p)
	case fi.IsDir():
		if err := b.watch(p); err != nil {
			b.log.Debug("checkpoint: writeback watch", "dir", p, "err", err)
			return
		}
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			b.created(filepath.Join(p, e.Name()))
		}
	}
}

// mark records the file at p as written.
func (b *writeback) mark(p string) {
	b.mu.Lock()
	b.dirty[p] = struct{}{}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// flushLoop starts the writeback of the dirty files until ctx ends. Files
// written again while it works are taken at the next turn: a file being
// written is kicked once per turn, not once per write.
func (b *writeback) flushLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		}
		b.mu.Lock()
		dirty := b.dirty
		b.dirty = make(map[string]struct{}, len(dirty))
		b.mu.Unlock()
		for p := range dirty {
			err := startWriteback(b.root, p)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				b.log.Debug("checkpoint: writeback", "file", p, "err", err)
			}
			if b.kicked != nil {
				b.kicked(p, err)
			}
		}
	}
}

// startWriteback starts the writeback of the dirty pages of the regular
// file at p, a path under one of the staging directories in root, whose
// owner may have put symlinks in it: it is opened through a root on its
// staging directory, so that nothing outside it is opened, and without
// blocking (a FIFO).
func startWriteback(root, p string) error {
	rel, err := filepath.Rel(root, p)
	if err != nil {
		return err
	}
	id, rest, ok := strings.Cut(rel, string(filepath.Separator))
	if !ok || !filepath.IsLocal(rel) || rest == "" {
		return nil
	}
	r, err := os.OpenRoot(filepath.Join(root, id))
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := r.OpenFile(rest, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return err
	}
	return unix.SyncFileRange(int(f.Fd()), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
}
