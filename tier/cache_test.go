package tier

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cacheagent/cacheagent/object"
	"github.com/dgraph-io/badger/v4"
)

func TestConfigValidation(t *testing.T) {
	env := newDirEnv(t)
	good := env.config(t.TempDir(), 1<<20)
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"empty dir", func(c *Config) { c.Dir = "" }},
		{"negative max", func(c *Config) { c.MaxBytes = -1 }},
		{"nil source", func(c *Config) { c.Source = nil }},
		{"nil downloader", func(c *Config) { c.Downloader = nil }},
		{"negative parallelism", func(c *Config) { c.PrefetchParallelism = -1 }},
		{"no dir at all", func(c *Config) { c.Dir, c.ShmDir = "", "" }},
		{"max without dir", func(c *Config) { c.ShmDir, c.Dir, c.MaxBytes = c.Dir, "", 1<<20 }},
		{"negative shm max", func(c *Config) { c.ShmDir, c.ShmMaxBytes = t.TempDir(), -1 }},
		{"negative window", func(c *Config) { c.PromoteWindow = -time.Second }},
		{"same dirs", func(c *Config) { c.ShmDir = c.Dir }},
		{"shm inside dir", func(c *Config) { c.ShmDir = filepath.Join(c.Dir, "data") }},
		{"dir inside shm", func(c *Config) { c.ShmDir = filepath.Dir(c.Dir) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			before := cfg
			c, err := Open(context.Background(), cfg)
			if err == nil {
				c.Close()
				t.Fatalf("Open(%s) = nil error; want one", tt.name)
			}
			if !reflect.DeepEqual(cfg, before) {
				t.Errorf("Open modified its Config")
			}
		})
	}
	t.Run("defaults", func(t *testing.T) {
		cfg := env.config(t.TempDir(), 0)
		cfg.Revalidate = 0
		before := cfg
		c := openCache(t, cfg)
		if !reflect.DeepEqual(cfg, before) {
			t.Errorf("Open modified its Config")
		}
		fsi, err := statFS(cfg.Dir)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := c.Stats().Base().MaxBytes, int64(float64(fsi.size)*0.9); got > want || got < want-fsi.blockSize {
			t.Errorf("MaxBytes = %d; want 90%% of %d", got, fsi.size)
		}
		if c.cfg.revalidate != DefaultRevalidate || c.cfg.parallelism != DefaultPrefetchParallelism {
			t.Errorf("revalidate, parallelism = %v, %d; want defaults", c.cfg.revalidate, c.cfg.parallelism)
		}
		if c.cfg.promoteHits != DefaultPromoteHits || c.cfg.promoteWindow != DefaultPromoteWindow {
			t.Errorf("promote hits, window = %d, %v; want defaults", c.cfg.promoteHits, c.cfg.promoteWindow)
		}
		if c.hot != nil || c.Stats().Base().Name != string(Disk) {
			t.Errorf("a cache without ShmDir has a shm tier")
		}
	})
}

func TestMissThenHit(t *testing.T) {
	env := newDirEnv(t)
	data := pattern(1, 300<<10) // two slices, not block aligned
	a := env.put(t, "bkt", "dir/obj.bin", data)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 64<<20))

	got := openRead(t, c, obj("bkt", "dir/obj.bin"), data)
	// The Dir source gives no CRC32C: the cache records the bytes' own.
	a.CRC32C, a.HasCRC32C = crc32.Checksum(data, castagnoli), true
	if got != a {
		t.Errorf("Attrs() = %+v; want %+v", got, a)
	}
	openRead(t, c, obj("bkt", "dir/obj.bin"), data)
	openRead(t, c, object.Object{Bucket: "bkt", Name: "dir/obj.bin", Generation: a.Generation}, data)
	if n := env.dl.calls.Load(); n != 1 {
		t.Errorf("downloads = %d; want 1", n)
	}
	st := c.Stats().Base()
	if st.Hits != 2 || st.Misses != 1 || st.Fills != 1 || st.BytesFetched != a.Size || st.Entries != 1 {
		t.Errorf("Stats() = %+v; want 2 hits, 1 miss, 1 fill of %d bytes, 1 entry", st, a.Size)
	}
	if want := roundUp(a.Size, c.base.bsize); st.UsedBytes != want {
		t.Errorf("UsedBytes = %d; want %d (size rounded up to blocks)", st.UsedBytes, want)
	}
	h, err := c.Open(context.Background(), obj("bkt", "dir/obj.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if want := filepath.Join(dir, "data", idOf("bkt", "dir/obj.bin", a.Generation).String()[:2]); filepath.Dir(h.Path()) != want {
		t.Errorf("Path() = %s; want a file in %s", h.Path(), want)
	}
	if files := dataFiles(t, dir); len(files) != 1 {
		t.Errorf("data files = %v; want one", files)
	}
	if _, err := c.Open(context.Background(), obj("bkt", "missing")); !errors.Is(err, object.ErrNotFound) {
		t.Errorf("Open(missing) = %v; want object.ErrNotFound", err)
	}
	checkInvariants(t, c)
}

func TestEmptyObject(t *testing.T) {
	env := newDirEnv(t)
	env.put(t, "bkt", "empty", nil)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	openRead(t, c, obj("bkt", "empty"), nil)
	openRead(t, c, obj("bkt", "empty"), nil)
	if st := c.Stats().Base(); st.Entries != 1 || st.Hits != 1 {
		t.Errorf("Stats() = %+v; want 1 entry, 1 hit", st)
	}
}

func TestRestartReadoptsWithoutDownloads(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	const n = 20
	want := make(map[string][]byte)
	c, err := Open(context.Background(), env.config(dir, 64<<20))
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		name := fmt.Sprintf("o/%02d", i)
		want[name] = pattern(i, 1000+i*777)
		env.put(t, "bkt", name, want[name])
		openRead(t, c, obj("bkt", name), want[name])
	}
	if _, err := c.Pin(context.Background(), "bkt", "o/1"); err != nil {
		t.Fatal(err)
	}
	openRead(t, c, obj("bkt", "o/03"), want["o/03"]) // most recently used
	before := c.Entries("bkt", "")
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v; want ErrClosed", err)
	}
	if _, err := c.Open(context.Background(), obj("bkt", "o/01")); !errors.Is(err, ErrClosed) {
		t.Errorf("Open after Close = %v; want ErrClosed", err)
	}

	env.dl.calls.Store(0)
	c2 := openCache(t, env.config(dir, 64<<20))
	after := c2.Entries("bkt", "")
	if !reflect.DeepEqual(after, before) {
		t.Errorf("entries after restart differ:\n got %+v\nwant %+v", after, before)
	}
	if e := c2.base.lru.front(); !strings.HasSuffix(e.key, "o/03") {
		t.Errorf("most recently used after restart = %q; want o/03", e.key)
	}
	for name, data := range want {
		openRead(t, c2, obj("bkt", name), data)
	}
	if n := env.dl.calls.Load(); n != 0 {
		t.Errorf("downloads after restart = %d; want 0", n)
	}
	checkInvariants(t, c2)
}

func TestLock(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 1<<20))
	_, err := Open(context.Background(), env.config(dir, 1<<20))
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v; want ErrLocked", err)
	}
	var le *LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() || le.Dir != dir {
		t.Fatalf("second Open = %#v; want *LockedError{Dir: %s, PID: %d}", err, dir, os.Getpid())
	}
	if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, strconv.Itoa(os.Getpid())) {
		t.Errorf("error %q does not name the dir and the pid", msg)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := openCache(t, env.config(dir, 1<<20))
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestFormatMigratesVersion1(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	data := pattern(1, 1000)
	env.put(t, "bkt", "obj", data)
	c := openCache(t, env.config(dir, 1<<20))
	openRead(t, c, obj("bkt", "obj"), data)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	putRaw(t, dir, map[string][]byte{string(formatKey): binary.AppendUvarint(nil, 1)})
	c2 := openCache(t, env.config(dir, 1<<20))
	openRead(t, c2, obj("bkt", "obj"), data)
	if n := env.dl.calls.Load(); n != 1 {
		t.Errorf("downloads after the migration = %d; want 1", n)
	}
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	var ver uint64
	if err := withIndex(t, dir, func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			item, err := txn.Get(formatKey)
			if err != nil {
				return err
			}
			return item.Value(func(v []byte) error { ver, _ = binary.Uvarint(v); return nil })
		})
	}); err != nil {
		t.Fatal(err)
	}
	if ver != formatVersion {
		t.Errorf("format version after the migration = %d; want %d", ver, formatVersion)
	}
}

func TestFormatVersion(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 1<<20))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	putRaw(t, dir, map[string][]byte{string(formatKey): binary.AppendUvarint(nil, formatVersion+1)})
	_, err := Open(context.Background(), env.config(dir, 1<<20))
	if !errors.Is(err, ErrFormat) {
		t.Fatalf("Open of a newer index = %v; want ErrFormat", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("version %d", formatVersion+1)) {
		t.Errorf("error %q does not name the version", err)
	}
	// The failed Open released the lock.
	l, err := lockDir(dir)
	if err != nil {
		t.Fatalf("lock after failed Open: %v", err)
	}
	l.release()
}

// TestDataFileMode checks that published copies are readable by other
// users (trainers map the files the daemon leases).
func TestDataFileMode(t *testing.T) {
	env := newDirEnv(t)
	c := openCache(t, env.config(t.TempDir(), 1<<20))
	env.put(t, "bkt", "m", pattern(1, 100))
	h, err := c.Open(context.Background(), obj("bkt", "m"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	fi, err := os.Stat(h.Path())
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != dataFileMode {
		t.Errorf("data file mode = %v; want %v", got, os.FileMode(dataFileMode))
	}
}
