package tier

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"golang.org/x/sys/unix"
)

// shmDir returns a fresh directory under /dev/shm for one test, removed
// after it (after the cache in it is closed: cleanups run last-in first-out).
// Without a tmpfs at /dev/shm the test is skipped, unless $CI is "true".
func shmDir(t testing.TB) string {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		if os.Getenv("CI") == "true" {
			t.Fatalf("/dev/shm is not a tmpfs (statfs: %v)", err)
		}
		t.Skipf("/dev/shm is not a tmpfs (statfs: %v)", err)
	}
	dir, err := os.MkdirTemp("/dev/shm", "tier-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

// shmConfig returns a two-tier Config over the env: disk tier dir, shm tier
// shm.
func (e *dirEnv) shmConfig(dir, shm string, maxBytes, shmMax int64) Config {
	cfg := e.config(dir, maxBytes)
	cfg.ShmDir, cfg.ShmMaxBytes = shm, shmMax
	return cfg
}

// hookLog collects, in order, what a cache's background goroutines report
// through testHooks. The channel is buffered generously so the cache never
// waits on a test that does not read it.
type hookLog struct {
	notes chan note
}

// note is one report: kind is "promoted" (key, err), "watched" (path,
// dropped), "rescanned" (tier in key) or "exited" (goroutine in key).
type note struct {
	kind    string
	key     string
	path    string
	err     error
	dropped bool
}

// newHooks returns testHooks that report to a new hookLog; copy, if not
// nil, runs before every promotion's copy; watched, if not nil, runs on the
// watcher's goroutine before a "watched" note is sent.
func newHooks(copy func(ctx context.Context, key string) error, watched func(path string)) (*hookLog, *testHooks) {
	l := &hookLog{notes: make(chan note, 4096)}
	return l, &testHooks{
		copy:     copy,
		promoted: func(key string, err error) { l.notes <- note{kind: "promoted", key: key, err: err} },
		watched: func(path string, dropped bool) {
			if watched != nil {
				watched(path)
			}
			l.notes <- note{kind: "watched", path: path, dropped: dropped}
		},
		rescanned: func(tier Kind) { l.notes <- note{kind: "rescanned", key: string(tier)} },
		exited:    func(g string) { l.notes <- note{kind: "exited", key: g} },
	}
}

// installHooks makes open cache c report to a new hookLog.
func installHooks(c *Cache, copy func(ctx context.Context, key string) error) *hookLog {
	l, h := newHooks(copy, nil)
	c.hooks.Store(h)
	return l
}

// hookWait bounds how long a test waits for a background goroutine before
// failing instead of hanging. It is a safety net, not a timing assertion.
const hookWait = time.Minute

// next returns the next note.
func (l *hookLog) next(t testing.TB, what string) note {
	t.Helper()
	select {
	case n := <-l.notes:
		return n
	case <-time.After(hookWait):
		t.Fatalf("waiting for %s: the cache reported nothing", what)
		return note{}
	}
}

// awaitPromoted waits for the background promotion of bucket/name to end
// and returns its error.
func (l *hookLog) awaitPromoted(t testing.TB, bucket, name string) error {
	t.Helper()
	for {
		if n := l.next(t, "a promotion of "+name); n.kind == "promoted" && n.key == indexKey(bucket, name) {
			return n.err
		}
	}
}

// awaitWatched waits until the watcher handled an event for path and
// reports whether it dropped a copy then.
func (l *hookLog) awaitWatched(t testing.TB, path string) bool {
	t.Helper()
	for {
		if n := l.next(t, "an event for "+path); n.kind == "watched" && n.path == path {
			return n.dropped
		}
	}
}

// awaitDrop waits until the watcher dropped the copy at path (earlier
// events for it, such as its publication, drop nothing).
func (l *hookLog) awaitDrop(t testing.TB, path string) {
	t.Helper()
	for !l.awaitWatched(t, path) {
	}
}

// until waits until cond holds, checking it now and after each note.
func (l *hookLog) until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		l.next(t, what)
	}
}

// shmPath returns the path of bucket/name's shm copy at generation gen.
func shmPath(c *Cache, bucket, name string, gen int64) string {
	return c.hot.path(idOf(bucket, name, gen))
}

// diskPath returns the path of bucket/name's base file at generation gen.
func diskPath(c *Cache, bucket, name string, gen int64) string {
	return c.base.path(idOf(bucket, name, gen))
}

// tierOf returns the Tier of bucket/name's entry, or "none".
func tierOf(c *Cache, bucket, name string) Kind {
	e, ok := c.Lookup(bucket, name)
	if !ok {
		return "none"
	}
	return e.Tier
}

// openHandle opens o and checks its bytes and tier; the caller closes it.
func openHandle(t testing.TB, c *Cache, o object.Object, want []byte, tier Kind) *Handle {
	t.Helper()
	h, err := c.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open(%s): %v", o, err)
	}
	checkHandle(t, h, want)
	if h.Tier() != tier {
		t.Fatalf("Open(%s).Tier() = %s (path %s); want %s", o, h.Tier(), h.Path(), tier)
	}
	return h
}

// tempFiles lists the files in a tier's temp directory.
func tempFiles(t testing.TB, root string) []string {
	t.Helper()
	return dirNames(t, filepath.Join(root, dataName, tmpName))
}

// dirNames lists the names in dir.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// shmFiles lists the data files of a shm tier directory (not temp files).
func shmFiles(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	for _, f := range dataFiles(t, root) {
		if !strings.HasPrefix(f, filepath.Join(dataName, tmpName)+string(filepath.Separator)) {
			out = append(out, f)
		}
	}
	return out
}
