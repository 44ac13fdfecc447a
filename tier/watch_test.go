package tier

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// promoteByHits opens o twice (DefaultPromoteHits) and waits for the
// background promotion.
func promoteByHits(t *testing.T, c *Cache, hooks *hookLog, name string, data []byte) {
	t.Helper()
	openRead(t, c, obj("bkt", name), data)
	openRead(t, c, obj("bkt", name), data)
	if err := hooks.awaitPromoted(t, "bkt", name); err != nil {
		t.Fatalf("promote %s: %v", name, err)
	}
}

func TestShmFileRemovedBehindBack(t *testing.T) {
	env := newDirEnv(t)
	shm := shmDir(t)
	c := openCache(t, env.shmConfig(t.TempDir(), shm, 64<<20, 64<<20))
	hooks := installHooks(c, nil)
	data := pattern(1, 100<<10)
	a := env.put(t, "bkt", "obj", data)
	o := obj("bkt", "obj")
	promoteByHits(t, c, hooks, "obj", data)
	h := openHandle(t, c, o, data, Shm) // a reader maps the shm copy
	p := shmPath(c, "bkt", "obj", a.Generation)

	if err := os.Remove(p); err != nil { // someone clears /dev/shm
		t.Fatal(err)
	}
	hooks.awaitDrop(t, p)
	if got := tierOf(c, "bkt", "obj"); got != Disk {
		t.Errorf("tier after the shm copy was deleted = %s; want disk", got)
	}
	st, sh := statsOf(c)
	if st.Damaged != 1 || sh.Entries != 0 || sh.PendingBytes == 0 {
		t.Errorf("Stats() = %+v, shm %+v; want 1 damaged, no shm entry, the open copy pending", st, sh)
	}
	if !h.Stale() {
		t.Errorf("handle on the deleted shm copy is not stale")
	}
	checkHandle(t, h, data) // still readable through its descriptor

	openRead(t, c, o, data) // served from disk: the first Open of a new window
	if tierOf(c, "bkt", "obj") != Disk {
		t.Fatalf("promoted again after one Open")
	}
	openRead(t, c, o, data)
	if err := hooks.awaitPromoted(t, "bkt", "obj"); err != nil {
		t.Fatalf("promote again: %v", err)
	}
	// The old handle's last Close must not delete the new copy at its path.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	h2 := openHandle(t, c, o, data, Shm)
	h2.Close()
	if _, err := os.Stat(p); err != nil {
		t.Errorf("new shm copy after the old handle closed: %v", err)
	}
	if _, st := statsOf(c); st.PendingBytes != 0 || st.Promotions != 2 || env.dl.calls.Load() != 1 {
		t.Errorf("Stats() = %+v, downloads %d; want nothing pending, 2 promotions, 1 download", st, env.dl.calls.Load())
	}
	checkInvariants(t, c)
}

func TestDiskFileTruncatedBehindBack(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 64<<20))
	hooks := installHooks(c, nil)
	data := pattern(2, 300<<10)
	a := env.put(t, "bkt", "obj", data)
	openRead(t, c, obj("bkt", "obj"), data)
	p := diskPath(c, "bkt", "obj", a.Generation)
	if err := os.Truncate(p, 1000); err != nil {
		t.Fatal(err)
	}
	hooks.until(t, "the truncated entry dropped", func() bool {
		_, ok := c.Lookup("bkt", "obj")
		return !ok
	})
	if st := c.Stats().Base(); st.Damaged != 1 || st.Entries != 0 || st.UsedBytes != 0 {
		t.Errorf("Stats() = %+v; want 1 damaged, nothing cached", st)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("truncated file: %v; want it removed", err)
	}
	openRead(t, c, obj("bkt", "obj"), data) // fetched again, whole
	if n := env.dl.calls.Load(); n != 2 {
		t.Errorf("downloads = %d; want 2", n)
	}
	checkInvariants(t, c)
}

// TestOpenChecksFileBeforeServing holds the watcher up so that Open meets a
// damaged file first: its fstat check must catch it, and the event the
// watcher then handles late must not drop the fresh copy.
func TestOpenChecksFileBeforeServing(t *testing.T) {
	for _, tier := range []Kind{Disk, Shm} {
		t.Run(string(tier), func(t *testing.T) {
			env := newDirEnv(t)
			dir, shm := t.TempDir(), shmDir(t)
			entered, release := make(chan struct{}), make(chan struct{})
			gate := filepath.Join(dir, dataName, "00", "gate")
			var once sync.Once
			hooks, h := newHooks(nil, func(path string) {
				if path == gate {
					once.Do(func() {
						close(entered)
						<-release
					})
				}
			})
			cfg := env.shmConfig(dir, shm, 64<<20, 64<<20)
			cfg.hooks = h
			c := openCache(t, cfg)
			data := pattern(3, 200<<10)
			a := env.put(t, "bkt", "obj", data)
			promoteByHits(t, c, hooks, "obj", data)
			p := shmPath(c, "bkt", "obj", a.Generation)
			if tier == Disk {
				if _, err := c.Demote(context.Background(), "bkt", ""); err != nil {
					t.Fatal(err)
				}
				p = diskPath(c, "bkt", "obj", a.Generation)
			}
			mustWrite(t, gate, nil) // a foreign file: its event blocks the watcher
			<-entered
			if err := os.Truncate(p, 5000); err != nil {
				t.Fatal(err)
			}
			openRead(t, c, obj("bkt", "obj"), data) // never the short file
			wantDownloads := map[Kind]int64{Disk: 2, Shm: 1}[tier]
			if st := c.Stats().Base(); st.Damaged != 1 || env.dl.calls.Load() != wantDownloads {
				t.Errorf("damaged, downloads = %d, %d; want 1, %d", st.Damaged, env.dl.calls.Load(), wantDownloads)
			}
			close(release)
			// Events are handled in order: once the watcher reports a second
			// gate file, it has handled the truncation's event.
			gate2 := filepath.Join(dir, dataName, "00", "gate2")
			mustWrite(t, gate2, nil)
			hooks.awaitWatched(t, gate2)
			if st := c.Stats().Base(); st.Damaged != 1 || st.Entries != 1 {
				t.Errorf("after the late event: %+v; want still 1 damaged, 1 entry", st)
			}
			openRead(t, c, obj("bkt", "obj"), data)
			checkInvariants(t, c)
		})
	}
}

func TestWatchedDirRemoved(t *testing.T) {
	env := newDirEnv(t)
	shm := shmDir(t)
	c := openCache(t, env.shmConfig(t.TempDir(), shm, 64<<20, 64<<20))
	hooks := installHooks(c, nil)
	data := pattern(4, 50<<10)
	a := env.put(t, "bkt", "obj", data)
	promoteByHits(t, c, hooks, "obj", data)
	sub := filepath.Dir(shmPath(c, "bkt", "obj", a.Generation))
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	// The file's event comes first, then the directory's, which triggers
	// the rescan.
	for n := hooks.next(t, "a rescan"); n.kind != "rescanned" || n.key != string(Shm); n = hooks.next(t, "a rescan") {
	}
	if got := tierOf(c, "bkt", "obj"); got != Disk {
		t.Errorf("tier after its shm directory was removed = %s; want disk", got)
	}
	if _, err := os.Stat(sub); err != nil {
		t.Fatalf("removed shm subdirectory not recreated: %v", err)
	}
	// The recreated directory is used and watched again.
	if n, err := c.Promote(context.Background(), "bkt", ""); n != 1 || err != nil {
		t.Fatalf("Promote after the rescan = %d, %v", n, err)
	}
	p := shmPath(c, "bkt", "obj", a.Generation)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	hooks.until(t, "the deleted copy dropped", func() bool { return tierOf(c, "bkt", "obj") == Disk })
	checkInvariants(t, c)
}
