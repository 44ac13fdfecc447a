package tier

import (
	"context"
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cacheagent/cacheagent/object"
)

// hostileGCSNames are valid GCS object names that are dangerous as paths.
var hostileGCSNames = []string{
	"../../x",
	"a/./b",
	"a//b",
	"/leading/slash",
	"..\\..\\windows",
	"%2e%2e%2fescaped",
	"ünïcødé/名前/✓",
	"trailing/",
	strings.Repeat("n", 1024),
	strings.Repeat("../", 340) + "etc",
}

func TestHostileNamesThroughGCS(t *testing.T) {
	env := newGCSEnv(t)
	parent := t.TempDir()
	dir := filepath.Join(parent, "cache")
	c := openCache(t, env.config(dir))
	before := snapshot(t, parent, dir)
	for i, name := range hostileGCSNames {
		data := pattern(i, 1000+i)
		env.put(t, name, data)
		if a := openRead(t, c, obj("bkt", name), data); a.Name != name {
			t.Errorf("Attrs().Name = %q; want %q", a.Name, name)
		}
		if _, ok := c.Lookup("bkt", name); !ok {
			t.Errorf("Lookup(%.40q) found nothing", name)
		}
	}
	checkConfined(t, parent, dir, before)
	if got := len(c.Entries("bkt", "")); got != len(hostileGCSNames) {
		t.Errorf("entries = %d; want %d", got, len(hostileGCSNames))
	}
	// They survive a restart.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	env.dl.calls.Store(0)
	c2 := openCache(t, env.config(dir))
	for i, name := range hostileGCSNames {
		openRead(t, c2, obj("bkt", name), pattern(i, 1000+i))
	}
	if n := env.dl.calls.Load(); n != 0 {
		t.Errorf("downloads after restart = %d; want 0", n)
	}
}

func TestHostileNamesAnySource(t *testing.T) {
	// Names GCS itself refuses ("." and newlines) still must be safe if a
	// source offers them.
	names := []string{".", "..", "a\nb", "\r\n", "a/../../b", "nul\x00inside", "\t"}
	src := newMemSource()
	parent := t.TempDir()
	dir := filepath.Join(parent, "cache")
	cfg := Config{Dir: dir, MaxBytes: 1 << 20, Source: src, Downloader: newDownloader(t, src), PackBelow: -1}
	c := openCache(t, cfg)
	before := snapshot(t, parent, dir)
	for i, name := range names {
		src.put("bkt", name, pattern(i, 100+i))
		openRead(t, c, obj("bkt", name), pattern(i, 100+i))
	}
	checkConfined(t, parent, dir, before)
	bad := []object.Object{{Bucket: "bkt", Name: ""}, {Bucket: "", Name: "x"}, {Bucket: "b\x00k", Name: "x"},
		{Bucket: "bkt", Name: strings.Repeat("x", maxKeyLen)}}
	for _, o := range bad {
		if _, err := c.Open(context.Background(), o); !errors.Is(err, object.ErrInvalidName) {
			t.Errorf("Open(%.40q) = %v; want object.ErrInvalidName", o.Bucket+"/"+o.Name, err)
		}
	}
}

// checkConfined fails if anything outside dir changed under parent, or if
// dir holds anything but the cache's own layout.
func checkConfined(t *testing.T, parent, dir string, before map[string]int64) {
	t.Helper()
	if after := snapshot(t, parent, dir); !maps.Equal(after, before) {
		t.Errorf("files outside the cache dir changed:\nbefore %v\nafter  %v", before, after)
	}
	for p := range snapshot(t, dir, "") {
		r := rel(t, dir, p)
		if r != "." && !hasPrefixAny(r, "LOCK", "index", "data") {
			t.Errorf("unexpected path in the cache dir: %q", r)
		}
	}
	for _, f := range dataFiles(t, dir) {
		if _, ok := parseID(filepath.Base(f)); !ok {
			t.Errorf("data file %q is not named by a hash", f)
		}
	}
}
