package mount

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/fsouza/fake-gcs-server/fakestorage"
	"golang.org/x/sys/unix"

	"github.com/cacheagent/cacheagent/bench/emulator"
	"github.com/cacheagent/cacheagent/fetch"
	"github.com/cacheagent/cacheagent/object"
	"github.com/cacheagent/cacheagent/tier"
)

// dataset is the objects most tests mount: bucket "data" in full, and the
// "keep/" prefix of bucket "other" (its "skip/" objects must not show).
func dataset() []fakestorage.Object {
	var objs []fakestorage.Object
	for i, o := range []struct {
		name string
		size int
	}{
		{"empty.bin", 0},
		{"one.bin", 1},
		{"dir/page-1.bin", 4095},
		{"dir/page.bin", 4096},
		{"dir/sub/page+1.bin", 4097},
		{"large/big.bin", 1<<20 + 3},
		{"deep/1/2/3/4/leaf.npy", 130<<10 + 7},
		{"space name.txt", 10},
		{"unicode-ü.bin", 33},
	} {
		objs = append(objs, obj("data", o.name, emulator.Pattern(uint64(i+1), o.size)))
	}
	objs = append(objs,
		obj("other", "keep/x", []byte("x")),
		obj("other", "keep/y/z", []byte("zz")),
		obj("other", "skip/no", []byte("no")),
	)
	return objs
}

// datasetRoots are the roots that show dataset's visible objects.
var datasetRoots = []Root{{Bucket: "data"}, {Bucket: "other", Prefix: "keep/"}}

// visible returns the mount paths of the objects under roots, sorted.
func visible(objs []fakestorage.Object, roots []Root) []string {
	var out []string
	for _, o := range objs {
		for _, r := range roots {
			if o.BucketName == r.Bucket && strings.HasPrefix(o.Name, r.Prefix) {
				out = append(out, o.BucketName+"/"+o.Name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// mode is one way reads are served.
type mode struct {
	name    string
	disable bool     // DisablePassthrough
	open    OpenMode // Config.Open
}

// modes are the ways reads are served: by the kernel from the cached file
// (where passthrough works), by this process from an open handle, and by
// this process without opens. (OpenAuto picks one of the first and the
// last: TestOpenAuto.)
var modes = []mode{{"passthrough", false, OpenAsk}, {"fd", true, OpenAsk}, {"skipopen", false, OpenSkip}}

// apply sets m in cfg.
func (m mode) apply(cfg *Config) {
	cfg.DisablePassthrough, cfg.Open = m.disable, m.open
}

// TestReadEveryObject reads every object through the mount, in both read
// modes, and checks bytes and attributes.
func TestReadEveryObject(t *testing.T) {
	objs := dataset()
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{SliceSize: 256 << 10})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := e.config(datasetRoots...)
			m.apply(&cfg)
			srv, mp := e.mount(t, cfg, nil)
			if (m.disable || m.open == OpenSkip) && srv.Passthrough() {
				t.Fatal("Passthrough() = true with DisablePassthrough or OpenSkip")
			}
			t.Logf("passthrough: %v", srv.Passthrough())
			for _, o := range objs {
				if o.Name == "skip/no" {
					continue
				}
				checkFile(t, e, filepath.Join(mp, o.BucketName, o.Name), o)
			}
			if _, err := os.Stat(filepath.Join(mp, "other", "skip")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("stat other/skip: %v; want not exist (outside the prefix)", err)
			}
			// The kernel sends RELEASE after close(2) has returned.
			waitFor(t, "the last RELEASE", func() bool { return srv.Stats().OpenFiles == 0 })
			st := srv.Stats()
			switch {
			case st.OpenFiles != 0:
				t.Errorf("OpenFiles = %d after reading; want 0", st.OpenFiles)
			case srv.Passthrough() && st.Reads != 0:
				t.Errorf("Reads = %d with passthrough; want 0 (the kernel reads the cached files)", st.Reads)
			case !srv.Passthrough() && st.Reads == 0:
				t.Errorf("Reads = 0 without passthrough; want > 0")
			}
		})
	}
}

// TestReadPackedObjects reads small objects that the cache packs into
// segment files through the mount, in every mode: each reads back exactly
// (a read never runs into the next object in the segment), served by this
// process at the object's offset, never passed through.
func TestReadPackedObjects(t *testing.T) {
	objs := dataset()
	e := newEnvCache(t, filepath.Join(t.TempDir(), "cache"), emulator.Options{Objects: objs},
		fetch.Config{SliceSize: 256 << 10}, tier.Config{PackBelow: 1 << 30})
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := e.config(datasetRoots...)
			m.apply(&cfg)
			srv, mp := e.mount(t, cfg, nil)
			for _, o := range objs {
				if o.Name == "skip/no" {
					continue
				}
				checkFile(t, e, filepath.Join(mp, o.BucketName, o.Name), o)
			}
			waitFor(t, "the last RELEASE", func() bool { return srv.Stats().OpenFiles == 0 })
			if st := srv.Stats(); st.Reads == 0 {
				t.Errorf("Reads = 0; want the packed objects' reads served here")
			}
		})
	}
	for _, en := range e.cache.Entries("bkt", "") {
		h, err := e.cache.Open(context.Background(), en.Attrs.Object, tier.CachedOnly())
		if err != nil {
			t.Fatal(err)
		}
		if en.Attrs.Size > 0 && !h.Packed() {
			t.Errorf("%s is not packed; the test needs packed objects", en.Attrs.Name)
		}
		h.Close()
	}
}

// checkFile reads path and checks it against o.
func checkFile(t *testing.T, e *env, path string, o fakestorage.Object) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return
	}
	if !bytes.Equal(got, o.Content) {
		t.Errorf("read %s: %d bytes differ from the object's %d", path, len(got), len(o.Content))
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.src.Stat(context.Background(), object.Object{Bucket: o.BucketName, Name: o.Name})
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Size() != a.Size || fi.Mode() != 0o444 || !fi.ModTime().Equal(a.Updated) ||
		st.Uid != uint32(os.Getuid()) || st.Gid != uint32(os.Getgid()) {
		t.Errorf("stat %s: size %d mode %v mtime %v uid %d gid %d; want %d %v %v %d %d", path,
			fi.Size(), fi.Mode(), fi.ModTime(), st.Uid, st.Gid, a.Size, os.FileMode(0o444), a.Updated, os.Getuid(), os.Getgid())
	}
	if want := fileIno(a.Bucket, a.Name, a.Generation); st.Ino != want {
		t.Errorf("stat %s: inode %d; want %d", path, st.Ino, want)
	}
}

// TestWalkMatchesListing walks the mount like find(1) and checks it against
// the listing, then runs testing/fstest over it.
func TestWalkMatchesListing(t *testing.T) {
	objs := dataset()
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	_, mp := e.mount(t, e.config(datasetRoots...), nil)

	want := visible(objs, datasetRoots)
	files, dirs := walk(t, mp)
	if !slices.Equal(files, want) {
		t.Errorf("files under the mount:\n%q\nwant\n%q", files, want)
	}
	if wantDirs := append([]string{"data", "other"}, dirsOf(want)...); !slices.Equal(dirs, sortedSet(wantDirs)) {
		t.Errorf("directories under the mount:\n%q\nwant\n%q", dirs, sortedSet(wantDirs))
	}
	for _, d := range []string{"", "data", "data/dir"} {
		fi, err := os.Stat(filepath.Join(mp, d))
		if err != nil || fi.Mode() != os.ModeDir|0o555 {
			t.Errorf("stat %q: %v, %v; want a 0555 directory", d, fi.Mode(), err)
		}
	}
	// fstest reads every file many ways, a few bytes at a time: keep to the
	// subtrees of small files.
	for _, sub := range []string{"data/dir", "other"} {
		var inSub []string
		for _, w := range want {
			if rel, ok := strings.CutPrefix(w, sub+"/"); ok {
				inSub = append(inSub, rel)
			}
		}
		if err := fstest.TestFS(os.DirFS(filepath.Join(mp, sub)), inSub...); err != nil {
			t.Errorf("%s: %v", sub, err)
		}
	}
}

// sortedSet returns ss sorted without duplicates.
func sortedSet(ss []string) []string {
	ss = slices.Clone(ss)
	slices.Sort(ss)
	return slices.Compact(ss)
}

// TestConcurrentColdOpensShareOneDownload opens one cold file from many
// readers at once: one download, one media GET per slice.
func TestConcurrentColdOpensShareOneDownload(t *testing.T) {
	const (
		readers = 16
		slice   = 64 << 10
		nslices = 5
	)
	data := emulator.Pattern(7, nslices*slice-100)
	arrived := make(chan struct{}, readers)
	all := make(chan struct{})
	// Every media GET waits until all readers are inside Open, so none can
	// find the file already cached.
	plan := func(r *http.Request, n int) emulator.Fault {
		select {
		case <-all:
		case <-r.Context().Done():
		}
		return emulator.Fault{}
	}
	e := newEnv(t, emulator.Options{Objects: []fakestorage.Object{obj("data", "cold.bin", data)}, Faults: plan},
		fetch.Config{SliceSize: slice})
	_, mp := e.mount(t, e.config(Root{Bucket: "data"}), func(f *FS) {
		f.openStart = func(object.Object) { arrived <- struct{}{} }
	})
	path := filepath.Join(mp, "data", "cold.bin")
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			got, err := os.ReadFile(path)
			if err == nil && !bytes.Equal(got, data) {
				err = errors.New("bytes differ")
			}
			errs <- err
		})
	}
	for range readers {
		<-arrived
	}
	close(all)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("read %s: %v", path, err)
		}
	}
	if got := e.emu.MediaGETs(); got != nslices {
		t.Errorf("media GETs = %d; want %d (one download of %d slices)", got, nslices, nslices)
	}
}

// TestUnmountLeavesNothing checks that Unmount leaves an empty directory and
// no mount behind, and that a second Unmount does nothing.
func TestUnmountLeavesNothing(t *testing.T) {
	e := newEnv(t, emulator.Options{Objects: dataset()}, fetch.Config{})
	srv, mp := e.mount(t, e.config(datasetRoots...), nil)
	if ms := mountsAt(t, mp); len(ms) != 1 || ms[0].fstype != "fuse.cacheagent" || !hasOption(ms[0].options, "ro") {
		t.Fatalf("mounts at %s: %+v; want one read-only fuse.cacheagent", mp, ms)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mp, &sfs); err != nil || sfs.Namelen != maxSegment || sfs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("statfs: %v, name length %d, flags %#x; want %d and read-only", err, sfs.Namelen, sfs.Flags, maxSegment)
	}
	if _, err := os.ReadFile(filepath.Join(mp, "data", "dir", "page.bin")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	if ms := mountsAt(t, mp); len(ms) != 0 {
		t.Errorf("mounts at %s after Unmount: %+v", mp, ms)
	}
	if es, err := os.ReadDir(mp); err != nil || len(es) != 0 {
		t.Errorf("mountpoint after Unmount: %v entries, %v; want an empty directory", len(es), err)
	}
	if n := srv.Stats().OpenFiles; n != 0 {
		t.Errorf("OpenFiles = %d after Unmount", n)
	}
	if err := srv.Unmount(); err != nil {
		t.Errorf("second Unmount: %v", err)
	}
}

// hasOption reports whether the comma-separated options include o.
func hasOption(options, o string) bool { return slices.Contains(strings.Split(options, ","), o) }

// TestUnmountBusyDetaches unmounts with a file open: the mount is detached
// at once and the open file is served until it is closed.
func TestUnmountBusyDetaches(t *testing.T) {
	objs := dataset()
	e := newEnv(t, emulator.Options{Objects: objs}, fetch.Config{})
	srv, mp := e.mount(t, e.config(datasetRoots...), nil)
	f, err := os.Open(filepath.Join(mp, "data", "large", "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	if ms := mountsAt(t, mp); len(ms) != 0 {
		t.Errorf("mounts at %s after a busy Unmount: %+v; want it detached", mp, ms)
	}
	select {
	case <-srv.Done():
		t.Fatal("server ended while a file was open")
	default:
	}
	want := objs[5].Content
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read after detach: %v, equal %v", err, bytes.Equal(got, want))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	srv.Wait()
	if n := srv.Stats().OpenFiles; n != 0 {
		t.Errorf("OpenFiles = %d after the server ended", n)
	}
}
