package mount

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
)

// TestHostileNamesLeftOut mounts a bucket with names that cannot be paths:
// they are absent from the tree and each is logged once, however often the
// bucket is listed.
func TestHostileNamesLeftOut(t *testing.T) {
	hostile := []string{
		"../escape",
		"./dot",
		"dir/../up",
		"dir/./here",
		"dir//double",
		"/leading",
		"nul\x00byte",
		"dir/" + strings.Repeat("n", 256),
		"clash", // "clash/inside" makes clash a directory
	}
	fine := []string{"dir/ok", "clash/inside", "marker/", "dir/" + strings.Repeat("n", 255)}
	var objs []fakestorage.Object
	for _, n := range append(slices.Clone(hostile), fine...) {
		objs = append(objs, obj("data", n, []byte(n)))
	}
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	srv, mp := e.mount(t, e.config(Root{Bucket: "data"}), nil)

	want := []string{"data/clash/inside", "data/dir/" + strings.Repeat("n", 255), "data/dir/ok"}
	for pass := range 3 {
		files, dirs := walk(t, mp)
		if !slices.Equal(files, want) {
			t.Errorf("pass %d: files %q; want %q", pass, files, want)
		}
		if wantDirs := []string{"data", "data/clash", "data/dir", "data/marker"}; !slices.Equal(dirs, wantDirs) {
			t.Errorf("pass %d: directories %q; want %q", pass, dirs, wantDirs)
		}
		srv.fs.buckets["data"].invalidate() // list again next time
	}
	if st := srv.Stats(); st.Listings < 3 || st.Skipped != int64(len(hostile)) {
		t.Errorf("Listings = %d, Skipped = %d; want at least 3 and %d", st.Listings, st.Skipped, len(hostile))
	}
	for _, n := range hostile {
		uri := object.Object{Bucket: "data", Name: n}.String()
		if got := e.logs.count("left out", "object", uri); got != 1 {
			t.Errorf("%q logged %d times; want once", n, got)
		}
	}
	for _, n := range fine {
		uri := object.Object{Bucket: "data", Name: n}.String()
		if got := e.logs.count("left out", "object", uri); got != 0 {
			t.Errorf("%q logged as left out", n)
		}
	}
	if fi, err := os.Stat(filepath.Join(mp, "data", "clash")); err != nil || !fi.IsDir() {
		t.Errorf("stat data/clash: %v; want the directory", err)
	}
}
