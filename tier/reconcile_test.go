package tier

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cacheagent/cacheagent/object"
	"github.com/dgraph-io/badger/v4"
)

func TestReconcile(t *testing.T) {
	env := newDirEnv(t)
	dir := t.TempDir()
	c := openCache(t, env.config(dir, 64<<20))
	data := map[string][]byte{}
	attrs := map[string]object.Attrs{}
	for i, name := range []string{"keep1", "missing", "wrongsize", "keep2"} {
		data[name] = pattern(i, 5000+i)
		attrs[name] = env.put(t, "bkt", name, data[name])
		openRead(t, c, obj("bkt", name), data[name])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	lay := newLayout(dir)
	path := func(name string) string {
		a := attrs[name]
		return lay.path(idOf(a.Bucket, a.Name, a.Generation))
	}

	outside := filepath.Join(t.TempDir(), "victim")
	mustWrite(t, outside, []byte("must survive"))
	damage(t, dir, outside, path("missing"), path("wrongsize"))

	c2 := openCache(t, env.config(dir, 64<<20))
	var names []string
	for _, e := range c2.Entries("bkt", "") {
		names = append(names, e.Attrs.Name)
	}
	if want := []string{"keep1", "keep2"}; !slices.Equal(names, want) {
		t.Errorf("entries after reconcile = %q; want %q", names, want)
	}
	files := dataFiles(t, dir)
	wantFiles := []string{rel(t, dir, path("keep1")), rel(t, dir, path("keep2"))}
	slices.Sort(files)
	slices.Sort(wantFiles)
	if !slices.Equal(files, wantFiles) {
		t.Errorf("data files after reconcile = %q; want %q", files, wantFiles)
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "must survive" {
		t.Errorf("file outside the cache = %q, %v; want it untouched", b, err)
	}
	env.dl.calls.Store(0)
	openRead(t, c2, obj("bkt", "keep1"), data["keep1"])
	openRead(t, c2, obj("bkt", "keep2"), data["keep2"])
	openRead(t, c2, obj("bkt", "missing"), data["missing"])
	openRead(t, c2, obj("bkt", "wrongsize"), data["wrongsize"])
	if n := env.dl.calls.Load(); n != 2 {
		t.Errorf("downloads after reconcile = %d; want 2 (the dropped entries)", n)
	}
	checkInvariants(t, c2)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	if err := withIndex(t, dir, func(db *badger.DB) error {
		return db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.DefaultIteratorOptions)
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if n != 5 { // format key + 4 entries
		t.Errorf("index keys = %d; want 5 (format + 4 entries)", n)
	}
}

// damage plants what reconcile must clean up in the closed cache in dir: an
// interrupted fill, orphans of every shape (a symbolic link to outside among
// them), a missing file, a file of the wrong size and malformed records.
func damage(t *testing.T, dir, outside, missing, wrongSize string) {
	t.Helper()
	lay := newLayout(dir)
	mustWrite(t, filepath.Join(lay.tmp, "123.tmp"), []byte("half"))
	mustWrite(t, lay.path(idOf("bkt", "gone", 7)), []byte("orphan"))
	mustWrite(t, filepath.Join(lay.data, "00", "not-a-hash"), []byte("junk"))
	if err := os.Symlink(outside, lay.path(idOf("bkt", "link", 1))); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(lay.path(idOf("bkt", "dir", 1)), "inner"), []byte("x"))
	if err := os.Remove(missing); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, wrongSize, []byte("short"))
	putRaw(t, dir, map[string][]byte{"bkt\x00bad": {0xff, 1, 2}, "nonul": {0}})
}

func mustWrite(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rel(t testing.TB, base, p string) string {
	t.Helper()
	r, err := filepath.Rel(base, p)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// withIndex opens the (closed) cache's badger index directly.
func withIndex(t testing.TB, dir string, fn func(*badger.DB) error) error {
	t.Helper()
	db, err := badger.Open(badgerOptions(filepath.Join(dir, indexName), newDirEnvLogger()))
	if err != nil {
		return err
	}
	err = fn(db)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// putRaw writes raw key/value pairs into a closed cache's index.
func putRaw(t testing.TB, dir string, kv map[string][]byte) {
	t.Helper()
	err := withIndex(t, dir, func(db *badger.DB) error {
		return db.Update(func(txn *badger.Txn) error {
			for k, v := range kv {
				if err := txn.Set([]byte(k), v); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
